"""The lease scripts on a real Redis (6.2 and 7), both faces: a key of a foreign type at every
KEYS[i] of every script, or a malformed lease value or counter, is refused with a BackendError
naming the key and nothing written; tokens are exact near 2**53 and 2**63-1 and a spent counter is
refused; a command an ACL denies mid-script makes the manager release with the same owner token."""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
import redis.asyncio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fencedlease._core.attempt
from fencedlease import BackendError, LeaseManager
from fencedlease._async.handoff import AsyncHandoff
from fencedlease._async.redis_backend import AsyncRedisBackend
from fencedlease._core.protocol import MAX_FENCING_TOKEN, AcquireReply
from fencedlease._redis.keys import key_base
from fencedlease._sync.handoff import Handoff
from fencedlease._sync.redis_backend import RedisBackend
from fencedlease.aio import AsyncLeaseManager

pytestmark = pytest.mark.live

PREFIX = "fl"
KEY = "job"
BASE = key_base(PREFIX, KEY)
LEASE, COUNTER, WAITERS, META = BASE, BASE + ":fence", BASE + ":waiters", BASE + ":waiters:meta"
OWNER = "0" * 31 + "a"  # ours
OTHER = "0" * 31 + "b"  # another owner's, or a waiter's
FACES = ["sync", "async"]


def call(face: str, url: str, op: str, *args: Any, decode: bool = False) -> Any:
    """Run one backend operation (or the hand-off's enqueue) on ``face`` over a fresh client."""
    if face == "sync":
        client = redis.Redis.from_url(url, decode_responses=decode)
        try:
            backend = RedisBackend(client, PREFIX)
            if op == "enqueue":
                return Handoff(client, PREFIX)._enqueue(*args)
            return getattr(backend, op)(*args)
        finally:
            client.close()

    async def main() -> Any:
        aclient = redis.asyncio.Redis.from_url(url, decode_responses=decode)
        try:
            if op == "enqueue":
                return await AsyncHandoff(aclient, PREFIX)._enqueue(*args)
            return await getattr(AsyncRedisBackend(aclient, PREFIX), op)(*args)
        finally:
            await aclient.aclose()

    return asyncio.run(main())


def snapshot(client: redis.Redis) -> dict[Any, tuple[Any, Any, bool]]:
    """Every key: its type, its DUMP (the value, exactly) and whether it has a TTL."""
    return {k: (client.type(k), client.dump(k), client.pttl(k) >= 0) for k in client.keys("*")}


def assert_no_key_without_ttl(client: redis.Redis) -> None:
    """Only the fencing counter lives without a TTL."""
    for key in client.keys("*"):
        assert key == COUNTER.encode() or client.pttl(key) >= 0, key


@pytest.fixture
def admin(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    client.flushdb()
    yield client
    client.close()


def _waiter_details(admin: redis.Redis, waiter: str) -> None:
    """``waiter`` queued with a deadline a minute ahead on Redis's clock."""
    seconds, micros = admin.time()
    now_ms = seconds * 1000 + micros // 1000
    admin.zadd(WAITERS, {waiter: seconds * 1_000_000 + micros})
    admin.hset(META, waiter, f"{now_ms + 60_000}:5000:200")
    admin.pexpire(WAITERS, 60_000)
    admin.pexpire(META, 60_000)


# Each case: the script, the Redis key holding a foreign type, how the keys are laid out, and the
# operation's arguments. The foreign key always has a TTL (but the counter), so the check that
# "no key lost its TTL" means something.
def _foreign(admin: redis.Redis, key: str) -> None:
    if key == WAITERS:
        admin.set(key, "not a zset", px=60_000)
    else:
        admin.rpush(key, "not a string or a hash")
        if key != COUNTER:
            admin.pexpire(key, 60_000)


def _nothing(admin: redis.Redis) -> None:
    pass


def _we_are_queued(admin: redis.Redis) -> None:
    admin.zadd(WAITERS, {OWNER: 1})
    admin.pexpire(WAITERS, 60_000)


def _we_hold(admin: redis.Redis) -> None:
    admin.set(LEASE, f"5:{OWNER}", px=60_000)


def _we_hold_another_waits(admin: redis.Redis) -> None:
    _we_hold(admin)
    admin.zadd(WAITERS, {OTHER: 1})
    admin.pexpire(WAITERS, 60_000)


def _we_hold_a_live_waiter_waits(admin: redis.Redis) -> None:
    _we_hold(admin)
    _waiter_details(admin, OTHER)


def _another_holds(admin: redis.Redis) -> None:
    admin.set(LEASE, f"5:{OTHER}", px=60_000)


_ACQ = (KEY, OWNER, 5_000)
_ENQ = (KEY, OWNER, 5_000, 1_000, False)
CASES: list[tuple[str, str, Callable[[redis.Redis], None], tuple[Any, ...]]] = [
    ("acquire", LEASE, _nothing, _ACQ),
    ("acquire", COUNTER, _nothing, _ACQ),
    ("acquire", WAITERS, _nothing, _ACQ),
    ("acquire", META, _we_are_queued, _ACQ),
    ("renew", LEASE, _nothing, _ACQ),
    ("release", LEASE, _nothing, (KEY, OWNER)),
    ("release", WAITERS, _we_hold, (KEY, OWNER)),
    ("release", META, _we_hold_another_waits, (KEY, OWNER)),
    ("release", COUNTER, _we_hold_a_live_waiter_waits, (KEY, OWNER)),
    ("enqueue", LEASE, _nothing, _ENQ),
    ("enqueue", WAITERS, _another_holds, _ENQ),
    ("enqueue", META, _another_holds, _ENQ),
    ("inspect", LEASE, _nothing, (KEY,)),
    ("inspect", COUNTER, _another_holds, (KEY,)),
]


@pytest.mark.parametrize("face", FACES)
@pytest.mark.parametrize(
    ("op", "foreign", "layout", "args"),
    CASES,
    ids=[f"{op}-{key[len(BASE) :] or ':lease'}" for op, key, _, _ in CASES],
)
def test_a_foreign_type_at_any_key_is_refused_with_nothing_written(
    redis_url: str,
    admin: redis.Redis,
    face: str,
    op: str,
    foreign: str,
    layout: Callable[[redis.Redis], None],
    args: tuple[Any, ...],
) -> None:
    layout(admin)
    _foreign(admin, foreign)
    before = snapshot(admin)
    with pytest.raises(BackendError) as info:
        call(face, redis_url, op, *args)
    message = str(info.value)
    assert foreign in message and f"fencedlease {op}:" in message
    assert OWNER not in message
    assert snapshot(admin) == before
    assert_no_key_without_ttl(admin)


@pytest.mark.parametrize("face", FACES)
def test_renew_many_refuses_a_foreign_key_alone(
    redis_url: str, admin: redis.Redis, face: str
) -> None:
    """One key of another type fails its own item; the good lease next to it is renewed."""
    admin.hset(LEASE, "f", "v")
    other = key_base(PREFIX, "other")
    admin.set(other, f"{2**53 + 1}:{OWNER}", px=1_000)
    results = call(face, redis_url, "renew_many", [(KEY, OWNER, 5_000), ("other", OWNER, 60_000)])
    assert isinstance(results[0], BackendError) and "WRONGTYPE" in str(results[0])
    assert results[1] == 2**53 + 1
    assert admin.pttl(other) > 1_000
    assert admin.hgetall(LEASE) == {b"f": b"v"} and admin.pttl(LEASE) == -1


# -- exact tokens ----------------------------------------------------------------------------


@pytest.mark.parametrize("face", FACES)
@pytest.mark.parametrize("start", [2**53 - 2, 2**53 - 1, 2**53, 2**63 - 3])
def test_tokens_are_exact_consecutive_integers(
    redis_url: str, admin: redis.Redis, face: str, start: int
) -> None:
    """A double would give 2**53 + 1 and 2**53 + 2 the same value; the tokens come out exact."""
    admin.set(COUNTER, start)
    for n in (1, 2):
        reply = call(face, redis_url, "acquire", KEY, OWNER, 5_000)
        assert reply == AcquireReply(True, start + n, 5_000)
        assert admin.get(LEASE) == f"{start + n}:{OWNER}".encode()
        assert admin.get(COUNTER) == str(start + n).encode()
        again = call(face, redis_url, "acquire", KEY, OWNER, 5_000, decode=True)
        assert again == AcquireReply(True, start + n, 5_000, retried=True)
        assert call(face, redis_url, "renew", KEY, OWNER, 5_000) == start + n
        assert call(face, redis_url, "renew_many", [(KEY, OWNER, 5_000)]) == [start + n]
        info = call(face, redis_url, "inspect", KEY, decode=True)
        assert (info.fencing_token, info.last_issued_token) == (start + n, start + n)
        assert call(face, redis_url, "release", KEY, OWNER) is True


@pytest.mark.parametrize("face", FACES)
def test_a_counter_at_2_63_minus_1_is_refused_with_nothing_written(
    redis_url: str, admin: redis.Redis, face: str
) -> None:
    admin.set(COUNTER, MAX_FENCING_TOKEN - 1)
    reply = call(face, redis_url, "acquire", KEY, OWNER, 5_000)
    assert reply == AcquireReply(True, MAX_FENCING_TOKEN, 5_000)
    assert call(face, redis_url, "release", KEY, OWNER) is True
    before = snapshot(admin)
    with pytest.raises(BackendError, match=re.escape(f"fencing counter {COUNTER} is at 2^63-1")):
        call(face, redis_url, "acquire", KEY, OTHER, 5_000)
    assert snapshot(admin) == before
    assert admin.get(COUNTER) == str(MAX_FENCING_TOKEN).encode() and admin.exists(LEASE) == 0


@pytest.mark.parametrize("face", FACES)
@pytest.mark.parametrize(
    "counter",
    [-1, -3, -(2**53) + 1, -(2**53), -(2**53) - 1, -(10**16), -(2**63)],
)
def test_a_negative_counter_is_refused_and_left_exactly_as_it_was(
    redis_url: str, admin: redis.Redis, face: str, counter: int
) -> None:
    """A free key's grant INCRs the counter first (its reply is the token): a negative counter is
    put back exactly, beyond 2**53 too (-(10**16) + 1 ends in nines), TTL kept, and refused."""
    admin.set(COUNTER, counter, px=60_000)
    before = snapshot(admin)
    with pytest.raises(BackendError, match=re.escape(f"fencing counter {COUNTER} is negative")):
        call(face, redis_url, "acquire", KEY, OWNER, 5_000)
    assert snapshot(admin) == before
    assert admin.get(COUNTER) == str(counter).encode() and admin.exists(LEASE) == 0


@pytest.mark.parametrize("face", FACES)
def test_a_hand_off_issues_exact_tokens_and_refuses_a_spent_counter(
    redis_url: str, admin: redis.Redis, face: str
) -> None:
    """release.lua's new grant is the counter's exact successor; at 2**63-1 it refuses, and
    neither the holder's lease nor the queue changes."""
    admin.set(COUNTER, 2**53)
    admin.set(LEASE, f"{2**53}:{OWNER}", px=60_000)
    assert call(face, redis_url, "enqueue", KEY, OTHER, 5_000, 1_000, False) is True
    assert call(face, redis_url, "release", KEY, OWNER) is True
    assert admin.get(LEASE) == f"{2**53 + 1}:{OTHER}".encode()
    assert admin.get(COUNTER) == str(2**53 + 1).encode()
    assert call(face, redis_url, "acquire", KEY, OTHER, 5_000) == AcquireReply(
        True, 2**53 + 1, 5_000, retried=True
    )
    admin.set(COUNTER, MAX_FENCING_TOKEN)
    admin.set(LEASE, f"{MAX_FENCING_TOKEN}:{OWNER}", px=60_000)
    assert call(face, redis_url, "enqueue", KEY, OTHER, 5_000, 1_000, False) is True
    before = snapshot(admin)
    with pytest.raises(BackendError, match="is at 2\\^63-1"):
        call(face, redis_url, "release", KEY, OWNER)
    assert snapshot(admin) == before
    assert_no_key_without_ttl(admin)


# Waiter details release.lua must drop: "{d}" is a live deadline a minute ahead. Every field is
# checked before the SET (a 0 or huge PX would fail it after the INCR and the ZPOPMIN).
_BAD_DETAILS = [
    "not:a:deadline",
    "{d}:0:0",
    "{d}:-5:0",
    "{d}:2147483648:0",
    "{d}:99999999999999999999999:0",
    "{d}:99999999999999999999999:99999999999999999999999",
    "{d}:5000:99999999999999999999999",
    "{d}:5000:2147483648",
    "99999999999999999999999:5000:0",
    "0:5000:0",
    "{d}:1.5:0",
    "{d}.5:5000:0",
    "{d}:5000:0.5",
    "{d}:1e3:0",
    "{d}::0",
    "{d}:5000:",
    ":5000:0",
    "",
    "{d}:5000:0:7:8",
    "{d}:5000:0:",
    "{d}:5000:0:AB",
    "{d}:5000:0:" + "a" * 33,
    "{d}:5000:0:a b",
]


@pytest.mark.parametrize("details", _BAD_DETAILS)
@pytest.mark.parametrize("face", FACES)
def test_a_malformed_waiter_entry_is_dropped_like_a_dead_one(
    redis_url: str, admin: redis.Redis, face: str, details: str
) -> None:
    """Waiter details that do not parse, or whose numbers are out of bounds (a ttl of 0, a
    negative, huge or fractional field, an empty one, a listener id that is not 1..32 lowercase
    hex digits, a fifth field), cannot fail the release half-way: that
    waiter is skipped, the next live one gets the lease with the exact next token."""
    seconds, micros = admin.time()
    deadline = seconds * 1000 + micros // 1000 + 60_000
    admin.set(COUNTER, 5)
    admin.set(LEASE, f"5:{OWNER}", px=60_000)
    admin.zadd(WAITERS, {"garbled": 1})
    admin.hset(META, "garbled", details.format(d=deadline))
    _waiter_details(admin, OTHER)
    assert call(face, redis_url, "release", KEY, OWNER) is True
    assert admin.get(LEASE) == f"6:{OTHER}".encode() and admin.get(COUNTER) == b"6"
    assert admin.exists(WAITERS, META) == 0
    assert_no_key_without_ttl(admin)


@pytest.mark.parametrize("details", _BAD_DETAILS)
def test_a_malformed_entry_of_the_only_waiter_frees_the_key(
    redis_url: str, admin: redis.Redis, details: str
) -> None:
    """With no live waiter behind it, the malformed entry is dropped and the key deleted: no
    token spent, the holder's release succeeds."""
    seconds, micros = admin.time()
    deadline = seconds * 1000 + micros // 1000 + 60_000
    admin.set(COUNTER, 5)
    admin.set(LEASE, f"5:{OWNER}", px=60_000)
    admin.zadd(WAITERS, {"garbled": 1})
    admin.hset(META, "garbled", details.format(d=deadline))
    assert call("sync", redis_url, "release", KEY, OWNER) is True
    assert admin.get(COUNTER) == b"5"
    assert admin.exists(LEASE, WAITERS, META) == 0


@pytest.mark.parametrize("ttl", ["1e3", "1.0", "0", "-1", "2147483648", "99999999999999999999", ""])
def test_a_ttl_argument_set_px_would_refuse_is_refused_before_any_write(
    admin: redis.Redis, ttl: str
) -> None:
    """acquire.lua, renew.lua, renew_many.lua and enqueue.lua check the numbers they pass to
    SET PX / PEXPIRE / the details entry as decimal integers in bounds before any write ('1e3'
    is a number to Lua but not to SET, which would fail after the INCR)."""
    from fencedlease._redis.scripts import ACQUIRE, ENQUEUE, RENEW, RENEW_MANY

    with pytest.raises(redis.ResponseError, match="ttl_ms must be a positive integer"):
        admin.eval(ACQUIRE.source, 4, LEASE, COUNTER, WAITERS, META, OWNER, ttl)
    assert admin.exists(LEASE, COUNTER, WAITERS, META) == 0
    admin.set(LEASE, f"5:{OWNER}", px=60_000)
    with pytest.raises(redis.ResponseError, match="ttl_ms must be a positive integer"):
        admin.eval(RENEW.source, 1, LEASE, OWNER, ttl)
    other = BASE + "x"
    admin.set(other, f"5:{OWNER}", px=60_000)
    assert admin.eval(RENEW_MANY.source, 2, other, LEASE, OWNER, "90000", OWNER, ttl) == [
        b"5",
        -1,
    ]
    assert 60_000 < admin.pttl(other) <= 90_000 and admin.pttl(LEASE) <= 60_000
    admin.set(LEASE, f"5:{OTHER}", px=60_000)
    for slot, args in enumerate(((ttl, "5000", "0"), ("1000", ttl, "0"), ("1000", "5000", ttl))):
        if ttl == "0" and slot != 1:
            continue  # a 0 wait or grace is in bounds
        with pytest.raises(redis.ResponseError, match="fencedlease enqueue: ARGV"):
            admin.eval(ENQUEUE.source, 3, LEASE, WAITERS, META, OWNER, *args)
        assert admin.exists(WAITERS, META) == 0


def test_managers_hold_exact_tokens_near_2_63(redis_url: str, admin: redis.Redis) -> None:
    """Both managers hand out the exact token, and the background renewer keeps the lease."""
    admin.set(COUNTER, MAX_FENCING_TOKEN - 2)
    client = redis.Redis.from_url(redis_url)
    with (
        LeaseManager(client, prefix=PREFIX) as leases,
        leases.hold(KEY, ttl_ms=2_000, heartbeat_ms=20) as lease,
    ):
        assert lease.fencing_token == MAX_FENCING_TOKEN - 1
        assert lease.renew() is True and lease.fencing_token == MAX_FENCING_TOKEN - 1
    client.close()

    async def main() -> None:
        aclient = redis.asyncio.Redis.from_url(redis_url)
        async with AsyncLeaseManager(aclient, prefix=PREFIX) as leases:
            async with leases.hold(KEY, ttl_ms=2_000, heartbeat_ms=20) as lease:
                assert lease.fencing_token == MAX_FENCING_TOKEN
                assert await lease.renew() is True
            with pytest.raises(BackendError, match="2\\^63-1"):
                await leases.acquire(KEY)
        await aclient.aclose()

    asyncio.run(main())
    assert admin.exists(LEASE) == 0


# -- malformed stored values ------------------------------------------------------------------


def _token_of(value: bytes) -> int | None:
    """The oracle: the token of a well-formed lease value, else None."""
    match = re.fullmatch(rb"([1-9][0-9]{0,18}):(.+)", value, re.DOTALL)
    if match is None or int(match[1]) > MAX_FENCING_TOKEN:
        return None
    return int(match[1])


def _counter_of(value: bytes) -> int | None:
    """The oracle: a counter an acquire may increment (canonical 0..2**63-2), else None."""
    if re.fullmatch(rb"0|[1-9][0-9]{0,18}", value) and int(value) < MAX_FENCING_TOKEN:
        return int(value)
    return None


def _utf8(value: bytes) -> bool:
    try:
        value.decode()
    except UnicodeDecodeError:
        return False
    return True


_stored = st.one_of(
    st.binary(max_size=24),
    st.from_regex(rb"\A-?[0-9]{0,21}(\.[0-9])?(:[a-z0-9:\n]{0,4})?\Z"),
    st.sampled_from([b"abc", b":x", b"999999999999999999999:o", b"0:o", b"-3", b"1.5", b"x",
                     b"9223372036854775807", b"9223372036854775808:o", b"07", b"5:\xff"]),
)  # fmt: skip


@pytest.mark.parametrize("face", FACES)
@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(value=_stored, decode=st.booleans())
def test_junk_in_the_lease_key_never_escapes_and_changes_nothing(
    redis_url: str, admin: redis.Redis, face: str, value: bytes, decode: bool
) -> None:
    admin.flushdb()
    admin.set(LEASE, value, px=60_000)
    admin.set(COUNTER, 7)
    before = snapshot(admin)
    token = _token_of(value)

    def outcome(op: str, *args: Any) -> Any:
        try:
            return call(face, redis_url, op, *args, decode=decode)
        except BackendError as exc:
            return exc

    info = outcome("inspect", KEY)
    results = [info]
    if token is None or (decode and not _utf8(value)):
        assert isinstance(info, BackendError)
        if token is None:
            assert LEASE in str(info) or repr(KEY) in str(info)
    else:
        assert (info.fencing_token, info.last_issued_token) == (token, 7)
    expected: dict[str, Any] = {"acquire": AcquireReply(False, 0, admin.pttl(LEASE))}
    acquired = outcome("acquire", KEY, OWNER, 5_000)
    if token is None:
        assert isinstance(acquired, BackendError) and LEASE in str(acquired)
    else:
        assert isinstance(acquired, AcquireReply) and acquired.acquired is False
        assert 0 < acquired.ttl_ms <= expected["acquire"].ttl_ms
    renewed = outcome("renew", KEY, OWNER, 5_000)
    assert isinstance(renewed, BackendError) if token is None else renewed == 0
    many = outcome("renew_many", [(KEY, OWNER, 5_000)])
    assert isinstance(many[0], BackendError) if token is None else many == [0]
    released = outcome("release", KEY, OWNER)
    assert isinstance(released, BackendError) if token is None else released is False
    for result in [*results, acquired, renewed, *many, released]:
        assert OWNER not in str(result)
    assert snapshot(admin) == before


@pytest.mark.parametrize("face", FACES)
@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(value=_stored, decode=st.booleans())
def test_junk_in_the_counter_never_escapes_and_changes_nothing(
    redis_url: str, admin: redis.Redis, face: str, value: bytes, decode: bool
) -> None:
    admin.flushdb()
    admin.set(COUNTER, value)
    before = snapshot(admin)
    counter = _counter_of(value)
    if counter is not None:
        reply = call(face, redis_url, "acquire", KEY, OWNER, 5_000, decode=decode)
        assert reply == AcquireReply(True, counter + 1, 5_000)
        assert admin.get(COUNTER) == str(counter + 1).encode()
        info = call(face, redis_url, "inspect", KEY, decode=decode)
        assert (info.fencing_token, info.last_issued_token) == (counter + 1, counter + 1)
        return
    with pytest.raises(BackendError, match=re.escape(f"the fencing counter {COUNTER} ")):
        call(face, redis_url, "acquire", KEY, OWNER, 5_000, decode=decode)
    assert snapshot(admin) == before
    admin.set(LEASE, f"5:{OTHER}", px=60_000)
    if value == str(MAX_FENCING_TOKEN).encode():  # it cannot be incremented, but it is a token
        info = call(face, redis_url, "inspect", KEY, decode=decode)
        assert info.last_issued_token == MAX_FENCING_TOKEN
    else:
        with pytest.raises(BackendError, match=r"fencing counter|not UTF-8"):
            call(face, redis_url, "inspect", KEY, decode=decode)


@pytest.mark.parametrize("face", FACES)
@pytest.mark.parametrize(
    "token", ["999999999999999999999", "9223372036854775808", "0", "-3", "1.5", "07", "x", ""]
)
def test_our_own_lease_with_a_malformed_token_is_refused(
    redis_url: str, admin: redis.Redis, face: str, token: str
) -> None:
    """The owner part is ours but the token is not one (the "already ours" paths once passed it
    through tonumber): acquire, renew, renew_many and release refuse, nothing written."""
    admin.set(LEASE, f"{token}:{OWNER}", px=60_000)
    admin.set(COUNTER, 3)
    before = snapshot(admin)
    for op, args in (
        ("acquire", (KEY, OWNER, 5_000)),
        ("renew", (KEY, OWNER, 5_000)),
        ("release", (KEY, OWNER)),
        ("enqueue", (KEY, OWNER, 5_000, 1_000, False)),
    ):
        with pytest.raises(BackendError, match=f"{op}: the lease key {re.escape(LEASE)} holds a"):
            call(face, redis_url, op, *args)
    [item] = call(face, redis_url, "renew_many", [(KEY, OWNER, 5_000)])
    assert isinstance(item, BackendError) and "malformed" in str(item)
    assert snapshot(admin) == before


@pytest.mark.parametrize("face", FACES)
def test_the_renewer_reports_a_malformed_lease_as_an_error(
    redis_url: str, admin: redis.Redis, face: str
) -> None:
    """A lease overwritten with junk: each renewal is a BackendError for on_renew_error (not a
    crash of the renewer); the final release is refused with nothing written."""
    errors: list[BaseException] = []
    seen = threading.Event()

    def on_error(exc: BaseException) -> None:
        errors.append(exc)
        seen.set()

    if face == "sync":
        client = redis.Redis.from_url(redis_url)
        with (
            LeaseManager(client, prefix=PREFIX) as leases,
            pytest.raises(BackendError, match="malformed"),
            leases.hold(KEY, ttl_ms=10_000, heartbeat_ms=20, on_renew_error=on_error),
        ):
            admin.set(LEASE, b"abc", keepttl=True)
            assert seen.wait(10)
        client.close()
    else:

        async def main() -> None:
            aclient = redis.asyncio.Redis.from_url(redis_url)
            async with AsyncLeaseManager(aclient, prefix=PREFIX) as leases:
                with pytest.raises(BackendError, match="malformed"):
                    async with leases.hold(
                        KEY, ttl_ms=10_000, heartbeat_ms=20, on_renew_error=on_error
                    ):
                        admin.set(LEASE, b"abc", keepttl=True)
                        while not seen.is_set():
                            await asyncio.sleep(0.01)
            await aclient.aclose()

        asyncio.run(main())
    assert isinstance(errors[0], BackendError) and repr(KEY) in str(errors[0])
    assert "malformed" in str(errors[0])
    assert admin.get(LEASE) == b"abc" and admin.get(COUNTER) == b"1"


# -- a command an ACL denies mid-script ------------------------------------------------------


@pytest.fixture
def acl_user(redis_url: str, admin: redis.Redis) -> Iterator[Callable[..., dict[str, Any]]]:
    """Create a user with the given ACL rules; yields a factory of client keyword arguments."""
    made: list[str] = []

    def make(*rules: str) -> dict[str, Any]:
        name = f"fl-test-{len(made)}"
        admin.execute_command("ACL", "SETUSER", name, "reset", "on", ">pw", "~*", *rules)  # type: ignore[no-untyped-call]
        made.append(name)
        return {"username": name, "password": "pw"}

    yield make
    for name in made:
        admin.execute_command("ACL", "DELUSER", name)  # type: ignore[no-untyped-call]


class _SpyBackend(RedisBackend):
    def __init__(self, client: redis.Redis) -> None:
        super().__init__(client, PREFIX)
        self.released: list[str] = []

    def release(self, key: str, owner_token: str) -> bool:
        self.released.append(owner_token)
        return super().release(key, owner_token)


class _AsyncSpyBackend(AsyncRedisBackend):
    def __init__(self, client: redis.asyncio.Redis) -> None:
        super().__init__(client, PREFIX)
        self.released: list[str] = []

    async def release(self, key: str, owner_token: str) -> bool:
        self.released.append(owner_token)
        return await super().release(key, owner_token)


def _acquire_as(face: str, url: str, user: dict[str, Any]) -> tuple[BaseException, list[str]]:
    """An acquire through the manager as ``user``; returns its error and the owner tokens the
    manager released with (after the manager is closed: its clean-up has run)."""
    if face == "sync":
        client = redis.Redis.from_url(url, **user)
        spy = _SpyBackend(client)
        leases = LeaseManager(spy)
        with pytest.raises(BackendError) as info:
            leases.acquire(KEY, ttl_ms=30_000)
        leases.close()
        client.close()
        return info.value, spy.released

    async def main() -> tuple[BaseException, list[str]]:
        aclient = redis.asyncio.Redis.from_url(url, **user)
        aspy = _AsyncSpyBackend(aclient)
        async with AsyncLeaseManager(aspy) as aleases:
            with pytest.raises(BackendError) as ainfo:
                await aleases.acquire(KEY, ttl_ms=30_000)
        await aclient.aclose()
        return ainfo.value, aspy.released

    return asyncio.run(main())


@pytest.mark.parametrize("face", FACES)
def test_an_acl_denied_set_after_the_incr_is_cleaned_up(
    redis_url: str,
    admin: redis.Redis,
    acl_user: Callable[..., dict[str, Any]],
    face: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The INCR ran and the SET was denied: the error reply comes after a write, so the manager
    releases with the same owner token; no lease is left, and the spent token is never reused."""
    monkeypatch.setattr(fencedlease._core.attempt, "new_owner_token", lambda: OWNER)
    user = acl_user("+@all", "-set")
    error, released = _acquire_as(face, redis_url, user)
    assert "can't run this command" in str(error.__cause__)
    assert released == [OWNER]
    assert admin.exists(LEASE) == 0 and admin.get(COUNTER) == b"1"
    assert_no_key_without_ttl(admin)
    with LeaseManager(admin, prefix=PREFIX) as leases:
        lease = leases.acquire(KEY).lease
        assert lease is not None and lease.fencing_token == 2


@pytest.mark.parametrize("face", FACES)
def test_an_acl_denied_pexpire_on_a_handed_lease_releases_it(
    redis_url: str,
    admin: redis.Redis,
    acl_user: Callable[..., dict[str, Any]],
    face: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A release handed the lease to this owner; its claim (acquire's "already ours") fails at
    the PEXPIRE: the manager releases with the same owner token, so the handed lease does not sit
    orphaned until its TTL."""
    monkeypatch.setattr(fencedlease._core.attempt, "new_owner_token", lambda: OWNER)
    admin.set(COUNTER, 7)
    admin.set(LEASE, f"7:{OWNER}", px=60_000)
    user = acl_user("+@all", "-pexpire")
    error, released = _acquire_as(face, redis_url, user)
    assert "can't run this command" in str(error.__cause__)
    assert released == [OWNER]
    assert admin.exists(LEASE) == 0 and admin.get(COUNTER) == b"7"
    assert_no_key_without_ttl(admin)


@pytest.mark.parametrize("face", FACES)
def test_a_denied_publish_does_not_fail_the_hand_off(
    redis_url: str, admin: redis.Redis, acl_user: Callable[..., dict[str, Any]], face: str
) -> None:
    """The holder may not publish on any channel: the release still hands the lease over (the
    waiter finds it on its next poll) and reports success."""
    user = acl_user("+@all", "resetchannels")
    with redis.Redis.from_url(redis_url, **user) as denied, pytest.raises(redis.ResponseError):
        denied.publish(LEASE + ":handoff", "x")
    admin.set(COUNTER, 5)
    admin.set(LEASE, f"5:{OWNER}", px=60_000)
    assert call(face, redis_url, "enqueue", KEY, OTHER, 5_000, 1_000, False) is True
    if face == "sync":
        client = redis.Redis.from_url(redis_url, **user)
        assert RedisBackend(client, PREFIX).release(KEY, OWNER) is True
        client.close()
    else:

        async def main() -> bool:
            aclient = redis.asyncio.Redis.from_url(redis_url, **user)
            try:
                return await AsyncRedisBackend(aclient, PREFIX).release(KEY, OWNER)
            finally:
                await aclient.aclose()

        assert asyncio.run(main()) is True
    assert admin.get(LEASE) == f"6:{OTHER}".encode() and admin.pttl(LEASE) > 0
    assert admin.get(COUNTER) == b"6"
    assert_no_key_without_ttl(admin)
