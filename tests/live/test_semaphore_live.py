"""Semaphores on a real Redis: the Lua store against the model, its keys (layout, TTLs, nothing
orphaned), refusals, 32 workers on limit=4 never over the limit, a paused holder's slot reclaimed
(and the paused one told), and the asyncio face."""

from __future__ import annotations

import asyncio
import random
import secrets
import signal
import subprocess
import sys
import textwrap
import threading
import time
from typing import Any

import attrs
import pytest
import redis
import redis.asyncio

from conftest import acl_log, expiry_ms
from contract.semaphore_model import SlotModel
from fencedlease import (
    BackendError,
    LeaseManager,
    RedisBackend,
    SemaphoreLeaseLostError,
)
from fencedlease._core.acl import acl_rules
from fencedlease._core.state import LossReason
from fencedlease._sync.redis_slots import RedisSlots
from fencedlease.aio import AsyncLeaseManager
from fencedlease.aio.testing import cancel_at_suspension
from fencedlease_lab.servers.redis import RedisServer

pytestmark = pytest.mark.live

LONG = 60_000  # a TTL no step of a test outlives


def _store(client: redis.Redis) -> RedisSlots:
    backend = RedisBackend(client, "t")
    return RedisSlots(backend)


def test_redis_store_follows_the_model_without_expiry(redis_client: redis.Redis) -> None:
    """300 random acquires, renewals, releases, counts and clears on two names (one with a
    brace), long TTLs: every reply equals the model's (tokens exactly; a refused acquire's
    remaining ms within the steps' elapsed time, since Redis's clock runs)."""
    rng = random.Random(7)
    store, model = _store(redis_client), SlotModel()
    owners, names = ["a", "b", "c", "d", "e"], ["pool", "po{ol}"]
    for _ in range(300):
        op = rng.choice(["acquire", "renew", "release", "count", "acquire", "clear"])
        name, owner = rng.choice(names), rng.choice(owners)
        got: object
        want: object
        if op == "acquire":
            limit = rng.randint(1, 4)
            granted = store.acquire(name, owner, LONG, limit)
            expected = model.acquire(0, name, owner, LONG, limit)
            if not expected.acquired:
                assert not granted.acquired
                assert 0 < granted.ttl_ms <= expected.ttl_ms
                continue
            got, want = granted, expected
        elif op == "renew":
            got = store.renew_many([(name, owner, LONG)])[0]
            want = model.renew(0, name, owner, LONG)
        elif op == "release":
            got, want = store.release(name, owner), model.release(0, name, owner)
        elif op == "clear":
            got, want = store.clear(name), model.clear(0, name)
        else:
            got, want = store.count(name), model.count(0, name)
        assert got == want, (op, name, owner)


def test_keys_share_the_tag_carry_ttls_and_vanish(redis_client: redis.Redis) -> None:
    """The slot set and token hash of "a{b}" live at t:{a%7Bb%7D}:semaphore[:tokens] with a TTL of
    at most the latest deadline; the counter has none; releasing the last slot deletes both, and
    an expired slot is purged by the next grant."""
    store = _store(redis_client)
    slots, tokens, fence = (
        b"t:{a%7Bb%7D}:semaphore",
        b"t:{a%7Bb%7D}:semaphore:tokens",
        (b"t:{a%7Bb%7D}:semaphore:fence"),
    )
    assert store.acquire("a{b}", "one", 5_000, 2).fencing_token == 1
    assert store.acquire("a{b}", "two", 9_000, 2).fencing_token == 2
    assert set(redis_client.keys("t:*")) == {slots, tokens, fence}
    assert 8_000 < redis_client.pttl(slots) <= 9_000
    assert 8_000 < redis_client.pttl(tokens) <= 9_000
    assert redis_client.pttl(fence) == -1
    assert redis_client.zcard(slots) == 2
    assert store.release("a{b}", "two") is True
    assert 4_000 < redis_client.pttl(slots) <= 5_000  # shrinks to the latest live deadline
    assert store.release("a{b}", "one") is True
    assert set(redis_client.keys("t:*")) == {fence}
    assert store.acquire("a{b}", "three", 1, 1).fencing_token == 3
    deadline = time.monotonic() + 5
    while store.count("a{b}") and time.monotonic() < deadline:
        time.sleep(0.002)
    assert store.count("a{b}") == 0
    reply = store.acquire("a{b}", "four", 5_000, 1)
    assert (reply.acquired, reply.fencing_token) == (True, 4)
    assert redis_client.hkeys(tokens) == [b"four"]
    assert redis_client.get(fence) == b"4"


def test_a_key_of_another_type_is_a_backend_error_and_nothing_is_written(
    redis_client: redis.Redis,
) -> None:
    """The slot set holding a string: acquire, release, count and clear raise BackendError with the
    Redis error as cause and no owner token in the message; the counter is not touched; a
    renewal batch reports that item as an error without failing the batch."""
    store = _store(redis_client)
    redis_client.set("t:{p}:semaphore", "junk")
    for call in (
        lambda: store.acquire("p", "secret-owner", 1000, 2),
        lambda: store.release("p", "secret-owner"),
        lambda: store.count("p"),
        lambda: store.clear("p"),
    ):
        with pytest.raises(BackendError, match="holds a string, not a zset") as caught:
            call()
        assert isinstance(caught.value.__cause__, redis.ResponseError)
        assert "secret-owner" not in str(caught.value)
    assert redis_client.exists("t:{p}:semaphore:fence") == 0
    assert redis_client.get("t:{p}:semaphore") == b"junk"
    replies = store.renew_many([("p", "secret-owner", 1000), ("q", "x", 1000)])
    assert isinstance(replies[0], BackendError)
    assert replies[1] == 0


@attrs.frozen
class Held:
    token: int
    sent: float  # before the acquire was sent
    start: float  # the grant's reply was in hand
    end: float  # min(the release began, the last confirmed deadline)


def test_32_workers_on_limit_4_never_exceed_4(redis_url: str, redis_client: redis.Redis) -> None:
    """32 threads over 4 managers, 6 holds each on one semaphore with limit=4 (ttl 400 ms,
    renewed): from the history of intervals during which a holder relied on its slot (from the
    grant's reply to the earlier of its release and its last confirmed deadline), at most 4
    overlap at any instant, and exactly 4 do at some; every hold ends without loss; tokens are
    1..192, each once, and a grant's token is larger than every grant whose reply was in hand
    before its acquire was sent."""
    managers = [LeaseManager.from_url(redis_url, prefix="t") for _ in range(4)]
    history: list[Held] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def worker(index: int) -> None:
        pool = managers[index % 4].semaphore("pool", limit=4)
        rng = random.Random(index)
        try:
            for _ in range(6):
                sent = time.monotonic()
                with pool.hold(ttl_ms=400, wait_ms=60_000, retry_delay_ms=5) as slot:
                    start = time.monotonic()
                    time.sleep(rng.uniform(0, 0.02))
                    end = time.monotonic()
                    deadline = slot._state.deadline
                    assert deadline is not None
                    token = slot.fencing_token
                    assert token is not None
                with lock:
                    history.append(Held(token, sent, start, min(end, deadline)))
        except BaseException as exc:
            with lock:
                errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(32)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
    finally:
        for manager in managers:
            manager.close()
    assert errors == []
    assert sorted(h.token for h in history) == list(range(1, 193))
    edges = sorted([(h.start, 1) for h in history] + [(h.end, -1) for h in history])
    holding, most = 0, 0
    for _, step in edges:  # an end before a start at the same instant: no false overlap
        holding += step
        most = max(most, holding)
    assert most == 4
    for first in history:
        for later in history:
            if first.start < later.sent:  # granted before the later acquire was sent
                assert first.token < later.token
    assert redis_client.exists("t:{pool}:semaphore") == 0  # every slot released


_PAUSED_HOLDER = textwrap.dedent(
    """
    import sys
    from fencedlease import LeaseManager, SemaphoreLeaseLostError
    leases = LeaseManager.from_url(sys.argv[1], prefix="t")
    pool = leases.semaphore("paused", limit=1)
    try:
        with pool.hold(ttl_ms=300, heartbeat_ms=75) as slot:
            print("held", slot.fencing_token, flush=True)
            sys.stdin.readline()  # the test SIGSTOPs us before this returns
            slot.wait_lost(30_000)
        print("finished", flush=True)
    except SemaphoreLeaseLostError:
        print("lost:", slot.lost_reason, flush=True)
    leases.close()
    """
)


def test_a_paused_holder_loses_its_slot_to_another(
    redis_url: str, redis_client: redis.Redis
) -> None:
    """A process holds the only slot (ttl 300, renewed) and is SIGSTOPped; another caller
    waiting for the slot gets it once the TTL passed (token 2); resumed, the paused holder is
    told it lost the slot (SemaphoreLeaseLostError) and the new holder keeps it."""
    child = subprocess.Popen(
        [sys.executable, "-c", _PAUSED_HOLDER, redis_url],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert child.stdout is not None
        assert child.stdin is not None
        assert child.stdout.readline().split() == ["held", "1"]
        child.send_signal(signal.SIGSTOP)
        with LeaseManager.from_url(redis_url, prefix="t") as leases:
            pool = leases.semaphore("paused", limit=1)
            with pool.hold(ttl_ms=10_000, wait_ms=30_000, retry_delay_ms=20) as slot:
                assert slot.fencing_token == 2
                child.send_signal(signal.SIGCONT)
                child.stdin.write("\n")
                child.stdin.flush()
                told = child.stdout.readline().strip()
                # by its deadline, or by a renewal answered 0 (whichever the renewer saw first)
                assert told in (f"lost: {LossReason.DEADLINE}", f"lost: {LossReason.RENEW_REFUSED}")
                assert child.wait(30) == 0
                assert pool.holders() == 1
                assert not slot.lost
        assert redis_client.get("t:{paused}:semaphore:fence") == b"2"
    finally:
        child.kill()
        child.wait()


def test_asyncio_face_on_redis(redis_url: str) -> None:
    """AsyncLeaseManager on Redis: limit 2 gives tokens 1, 2 and refuses a third; a renewed hold
    outlives its TTL; a hold without renewal is lost at its deadline to a waiting caller (token
    5), ending in SemaphoreLeaseLostError."""

    async def main() -> None:
        client = redis.asyncio.Redis.from_url(redis_url)
        await client.flushdb()
        async with AsyncLeaseManager(client, prefix="t") as manager:
            pool = manager.semaphore("apool", limit=2)
            first, second = await pool.acquire(ttl_ms=LONG), await pool.acquire(ttl_ms=LONG)
            assert first.lease is not None
            assert second.lease is not None
            assert [first.lease.fencing_token, second.lease.fencing_token] == [1, 2]
            assert not (await pool.acquire(ttl_ms=LONG)).acquired
            assert await first.lease.release() is True
            async with pool.hold(ttl_ms=200, heartbeat_ms=50) as renewed:
                while manager_round_trips(pool) < 6:  # renewed past its first TTL
                    await asyncio.sleep(0.01)
                assert not renewed.lost
            assert await second.lease.release() is True
            single = manager.semaphore("apool", limit=1)
            with pytest.raises(SemaphoreLeaseLostError) as caught:
                async with single.hold(ttl_ms=200, heartbeat_ms=False) as paused:
                    taker = await single.acquire(ttl_ms=LONG, wait_ms=30_000, retry_delay_ms=10)
                    assert taker.lease is not None
                    assert taker.lease.fencing_token == 5
                    assert paused.lost
            assert caught.value.key == "apool"
        await client.aclose()

    asyncio.run(main())


def manager_round_trips(pool: Any) -> int:
    """Renewal round trips of the semaphore's own renewer."""
    return int(pool._slots.renewer.round_trips)


def test_a_cancelled_acquire_leaves_no_slot(redis_url: str) -> None:
    """A semaphore acquire cancelled at its 1st, 2nd, ... suspension (connecting, sending,
    reading): once the manager's clean-up ran (close waits for it), no slot is held; the run that
    is not cancelled holds exactly one."""

    async def main() -> None:
        client = redis.asyncio.Redis.from_url(redis_url)
        await client.flushdb()
        n = 0
        while True:
            n += 1
            manager = AsyncLeaseManager.from_url(redis_url, prefix="t")
            pool = manager.semaphore("cancel", limit=2)
            attempt = cancel_at_suspension(pool.acquire(ttl_ms=LONG), n)
            try:
                result = await attempt
            except asyncio.CancelledError:
                assert attempt.fired
                await manager.close()
                assert await client.zcard("t:{cancel}:semaphore") == 0, n
                continue
            assert result.lease is not None
            assert await client.zcard("t:{cancel}:semaphore") == 1
            await manager.close()
            break
        assert n > 2  # the path had suspensions to cancel at
        await client.aclose()

    asyncio.run(main())


def test_every_semaphore_script_runs_as_the_least_privilege_user(own_redis: RedisServer) -> None:
    """An ACL user with exactly the documented rule set (acl_rules) takes, renews, releases,
    counts and clears slots on both faces, also after SCRIPT FLUSH (the EVAL fallback); Redis
    logs no refusal but redis-py's optional CLIENT SETINFO."""
    admin = own_redis.client()
    password = secrets.token_hex(16)
    admin.execute_command(  # type: ignore[no-untyped-call]
        "ACL", "SETUSER", "fl", "reset", "on", f">{password}", *acl_rules("acl")
    )
    scheme, rest = own_redis.url.split("://", 1)
    url = f"{scheme}://fl:{password}@{rest}"

    def run(flush: bool) -> None:
        if flush:
            admin.script_flush()
        with LeaseManager.from_url(url, prefix="acl") as leases:
            pool = leases.semaphore("s", limit=2)
            with pool.hold(ttl_ms=2_000, heartbeat_ms=20) as slot:
                while pool._slots.renewer.round_trips < 3:
                    time.sleep(0.005)
                slot.check()
                assert pool.holders() == 1
            spare = pool.acquire(ttl_ms=2_000).lease
            assert spare is not None
            assert pool.force_release() is True

        async def aio() -> None:
            if flush:
                admin.script_flush()
            async with AsyncLeaseManager.from_url(url, prefix="acl") as leases:
                pool = leases.semaphore("a", limit=1)
                async with pool.hold(ttl_ms=2_000, heartbeat_ms=20):
                    while pool._slots.renewer.round_trips < 3:
                        await asyncio.sleep(0.005)
                    assert await pool.holders() == 1
                assert await pool.force_release() is False

        asyncio.run(aio())

    run(flush=False)
    run(flush=True)
    refused = {(e[b"reason"].decode(), e[b"object"].decode()) for e in acl_log(admin)}
    assert refused <= {("command", "client"), ("command", "client|setinfo")}
    admin.close()


FOREIGN = [
    ("t:{p}:semaphore", lambda c: c.set("t:{p}:semaphore", "x"), "holds a string, not a zset"),
    ("t:{p}:semaphore:tokens", lambda c: c.rpush("t:{p}:semaphore:tokens", "x"), "hold a list"),
]


@pytest.mark.parametrize(("key", "plant", "says"), FOREIGN, ids=["slot-set", "tokens"])
def test_a_foreign_type_at_either_slot_key_refuses_every_step(
    redis_client: redis.Redis, key: str, plant: Any, says: str
) -> None:
    """A key of another type at the slot set or the token hash, with a live slot and an expired
    one beside it where the type allows: acquire, release, count (slot set only) and clear raise
    BackendError naming the key and write nothing (no purge, no INCR); a renewal batch reports
    that item alone."""
    store = _store(redis_client)
    plant(redis_client)
    before = {k: redis_client.dump(k) for k in redis_client.keys("t:*")}
    calls: list[Any] = [
        lambda: store.acquire("p", "o", 1000, 5),
        lambda: store.release("p", "o"),
        lambda: store.clear("p"),
    ]
    if key.endswith(":semaphore"):
        calls.append(lambda: store.count("p"))
    for call in calls:
        with pytest.raises(BackendError, match=says) as caught:
            call()
        assert isinstance(caught.value.__cause__, redis.ResponseError)
    assert {k: redis_client.dump(k) for k in redis_client.keys("t:*")} == before
    replies = store.renew_many([("p", "o", 1000), ("q", "o", 1000)])
    assert isinstance(replies[0], BackendError)
    assert replies[1] == 0


def test_a_spent_or_malformed_counter_refuses_the_grant(redis_client: redis.Redis) -> None:
    """The counter at 2**63-1, or not an integer: acquire raises BackendError and neither purges
    the expired slot nor grants; at 2**63-2 the grant gets token 2**63-1 exactly."""
    store = _store(redis_client)
    assert store.acquire("p", "live", LONG, 2).fencing_token == 1  # keeps the keys alive
    assert store.acquire("p", "old", 1, 2).fencing_token == 2
    deadline = time.monotonic() + 5
    while store.count("p") > 1 and time.monotonic() < deadline:
        time.sleep(0.002)
    for value, says in ((str(2**63 - 1), "no next token"), ("abc", "not an integer")):
        redis_client.set("t:{p}:semaphore:fence", value)
        with pytest.raises(BackendError, match=says):
            store.acquire("p", "new", 1000, 3)
        assert redis_client.zrange("t:{p}:semaphore", 0, -1) == [b"old", b"live"]  # no purge
    redis_client.set("t:{p}:semaphore:fence", str(2**63 - 2))
    reply = store.acquire("p", "new", LONG, 3)
    assert (reply.acquired, reply.fencing_token) == (True, 2**63 - 1)
    assert redis_client.zrange("t:{p}:semaphore", 0, -1) == [b"live", b"new"]


def test_thousands_of_expired_slots_are_purged_in_one_grant(redis_client: redis.Redis) -> None:
    """2,500 slots (limit 10,000) with a 1 ms TTL, all expired: the next grant purges every one
    of them from both keys (the token hash in chunks) and holds the only live slot."""
    store = _store(redis_client)
    for i in range(2_500):
        assert store.acquire("big", f"o{i}", 1, 10_000).acquired
    deadline = time.monotonic() + 5
    while store.count("big") and time.monotonic() < deadline:
        time.sleep(0.002)
    reply = store.acquire("big", "last", 60_000, 1)
    assert (reply.acquired, reply.fencing_token) == (True, 2_501)
    assert redis_client.zcard("t:{big}:semaphore") == 1
    assert redis_client.hkeys("t:{big}:semaphore:tokens") == [b"last"]


def test_both_slot_keys_expire_at_the_latest_deadline(redis_client: redis.Redis) -> None:
    """After a grant, a renewal and a release, the slot set and its token hash expire at one
    absolute moment, the latest slot deadline: two relative expiries could fall a millisecond
    apart, and a slot set gone first left the hash's fields to the next grant."""
    store = _store(redis_client)
    keys = ("t:{apart}:semaphore", "t:{apart}:semaphore:tokens")

    def latest_deadline() -> int:
        return int(redis_client.zrange(keys[0], -1, -1, withscores=True)[0][1])

    assert store.acquire("apart", "a", LONG, 3).acquired
    assert store.acquire("apart", "b", 2 * LONG, 3).acquired
    assert expiry_ms(redis_client, *keys) == [latest_deadline()] * 2
    assert store.renew_many([("apart", "a", 3 * LONG)]) == [1]
    assert expiry_ms(redis_client, *keys) == [latest_deadline()] * 2
    assert store.release("apart", "a") is True
    assert expiry_ms(redis_client, *keys) == [latest_deadline()] * 2


def test_a_token_hash_without_its_slot_set_is_dropped_by_the_next_grant(
    redis_client: redis.Redis,
) -> None:
    """Token fields whose slot set is gone (keys an earlier version let expire apart) are orphans:
    the next grant deletes them and the hash holds only the new slot's token."""
    store = _store(redis_client)
    redis_client.hset("t:{orphans}:semaphore:tokens", mapping={"gone1": "4", "gone2": "5"})
    redis_client.pexpire("t:{orphans}:semaphore:tokens", LONG)
    reply = store.acquire("orphans", "new", LONG, 2)
    assert (reply.acquired, reply.fencing_token) == (True, 1)
    assert redis_client.hgetall("t:{orphans}:semaphore:tokens") == {b"new": b"1"}
