"""Fencing tokens decode exactly up to 2**63-1, malformed stored values become BackendError (never
ValueError/TypeError/IndexError), the memory and SQLite counters stop at 2**63-1, and the pure rule
of which error replies may have written (and so need a release with the same owner token)."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from redis.exceptions import (
    ConnectionError as RedisConnectionError,
)
from redis.exceptions import (
    MaxConnectionsError,
    NoPermissionError,
    NoScriptError,
    OutOfMemoryError,
    ResponseError,
)
from test_aio_support import backend_error

from fencedlease import BackendError, LeaseManager, ValidationError
from fencedlease._core.attempt import AcquireAttempt, is_ambiguous, may_have_written
from fencedlease._core.protocol import MAX_FENCING_TOKEN, AcquireReply
from fencedlease._core.state import restored_state
from fencedlease._redis.replies import (
    _renew_entry,
    decode_acquire,
    decode_inspect,
    decode_release,
    decode_renew,
    decode_renew_many,
    parse_token,
    split_value,
)
from fencedlease.aio import AsyncLeaseManager
from fencedlease.backends.memory import AsyncMemoryBackend, MemoryBackend
from fencedlease.backends.sqlite import SqliteBackend
from fencedlease.testing import FakeClock

SECRET = "0123456789abcdef0123456789abcdef"

# -- exact tokens -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    ["1", "9007199254740992", "9007199254740993", "9223372036854775806", "9223372036854775807"],
)
def test_tokens_decode_exactly(text: str) -> None:
    """Above 2**53 a double would round (2**53 + 1 -> 2**53); the decoders never use one."""
    number = int(text)
    assert parse_token(text, "t") == number
    assert parse_token(text.encode(), "t") == number
    assert decode_acquire([1, text, 500], "k") == AcquireReply(True, number, 500)
    assert decode_acquire([b"2", text.encode(), b"500"], "k") == AcquireReply(
        True, number, 500, retried=True
    )
    assert decode_renew(text, "k") == number
    assert split_value(f"{text}:{SECRET}") == (number, SECRET)


@pytest.mark.parametrize(
    "value",
    ["0", "-1", "01", "1.5", "", " 1", "1 ", "+1", "x", "9223372036854775808", "1e3",
     "\uff11", "99999999999999999999999", b"\xff", None, 1.5, True, -5, 2**63],
)  # fmt: skip
def test_a_bad_token_is_a_backend_error(value: object) -> None:
    with pytest.raises(BackendError, match="acquire 'k'"):
        decode_acquire([1, value, 500], "k")


@pytest.mark.parametrize(
    "value",
    ["abc", ":x", "999999999999999999999:o", "5:", "0:o", "-3:o", "1.5:o", "05:o", b"\xff:o",
     "9223372036854775808:o", 7, ["5:o"]],
)  # fmt: skip
def test_a_malformed_lease_value_is_a_backend_error_naming_the_key(value: object) -> None:
    """inspect names the key and never quotes the stored value (it may hold an owner token)."""
    with pytest.raises(BackendError, match="inspect 'job': the lease key") as info:
        decode_inspect([value, 100, b"3"], "job")
    assert "999999999999999999999" not in str(info.value)


@pytest.mark.parametrize("counter", [b"-3", b"1.5", b"x", b"9223372036854775808", 1.5])
def test_a_malformed_counter_is_a_backend_error_naming_it(counter: object) -> None:
    with pytest.raises(BackendError, match="inspect 'job': the fencing counter"):
        decode_inspect([b"5:" + SECRET.encode(), 100, counter], "job")


def test_an_owner_that_is_not_utf8_still_gets_a_fingerprint() -> None:
    info = decode_inspect([b"5:\xff", 10, b"5"], "k")
    assert info is not None and info.fencing_token == 5
    assert info.owner_fingerprint == hashlib.sha256(b"\xff").hexdigest()[:16]


def test_inspect_counter_may_be_zero_and_tokens_are_exact() -> None:
    info = decode_inspect([b"9223372036854775807:o", 5, b"9223372036854775807"], "k")
    assert info is not None
    assert (info.fencing_token, info.last_issued_token) == (MAX_FENCING_TOKEN, MAX_FENCING_TOKEN)
    info = decode_inspect(["3:o", 5, "0"], "k")
    assert info is not None and info.last_issued_token == 0


def test_renew_many_codes_and_junk_fail_only_their_item() -> None:
    items = [("a", "o", 1), ("b", "o", 1), ("c", "o", 1), ("d", "o", 1)]
    results = decode_renew_many(items, [b"9223372036854775807", -3, b"nope", 0])
    assert results[0] == MAX_FENCING_TOKEN
    assert isinstance(results[1], BackendError) and "'b'" in str(results[1])
    assert "malformed" in str(results[1])
    assert isinstance(results[2], BackendError) and "'c'" in str(results[2])
    assert results[3] == 0


def test_release_replies() -> None:
    assert (decode_release(1, "k"), decode_release(b"0", "k")) == (True, False)
    with pytest.raises(BackendError, match="release 'k'"):
        decode_release(b"2", "k")


_junk = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True),
    st.text(max_size=30),
    st.binary(max_size=30),
    st.from_regex(r"\A-?[0-9]{0,22}(:[a-z]{0,3})?\Z"),
)


@given(value=_junk, pttl=_junk, counter=_junk)
def test_decoders_raise_only_the_librarys_error(
    value: object, pttl: object, counter: object
) -> None:
    """Whatever a key holds, the decoders answer or raise BackendError; a token they return is
    an exact int in 1..2**63-1."""
    for decode in (
        lambda: decode_inspect([value, pttl, counter], "k"),
        lambda: decode_acquire([value, pttl, counter], "k"),
        lambda: decode_renew(value, "k"),
        lambda: decode_release(value, "k"),
        lambda: decode_renew_many([("k", "o", 1)], [value]),
        lambda: split_value(value),
    ):
        try:
            result = decode()
        except BackendError:
            continue
        if isinstance(result, AcquireReply) and result.acquired:
            assert 1 <= result.fencing_token <= MAX_FENCING_TOKEN
        if isinstance(result, tuple) and isinstance(result[0], int):
            assert 1 <= result[0] <= MAX_FENCING_TOKEN


@given(values=st.lists(st.one_of(_junk, st.sampled_from([b"1", b"0", 0, b"9223372036854775808"]))))
def test_renew_many_inline_decoding_agrees_with_the_full_checks(values: list[object]) -> None:
    """The one-pass decoding of a batch reply gives, entry by entry, what the full checks of a
    single entry give (tokens as bytes and 0 take the inline path, the rest the full one)."""
    items = [(f"k{i}", "o", 1) for i in range(len(values))]
    results = decode_renew_many(items, values)
    expected = [_renew_entry(item, value) for item, value in zip(items, values, strict=True)]
    assert [r if isinstance(r, int) else repr(r) for r in results] == [
        e if isinstance(e, int) else repr(e) for e in expected
    ]
    for value, result in zip(values, results, strict=True):
        if isinstance(value, bytes) and value.isdigit() and int(value) > MAX_FENCING_TOKEN:
            assert isinstance(result, BackendError)


# -- which errors may have written --------------------------------------------------------------


@pytest.mark.parametrize(
    ("cause", "wrote"),
    [
        # A script failed after (possibly) writing: Redis keeps what it wrote.
        (ResponseError("The user executing the script can't run this command or subcommand"
                       " script: 3a, on @user_script:1."), True),
        (ResponseError("Error running script (call to f_3a): @user_script:1: The user executing"
                       " the script can't run this command or subcommand"), True),
        (OutOfMemoryError("command not allowed when used memory > 'maxmemory'. script: 3a"), True),
        (NoPermissionError("User u has no permissions to run the 'set' command script: 3a"), True),
        (ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value script"),
         True),
        (RedisConnectionError("Connection reset by peer"), True),
        # Nothing was written.
        (ResponseError("fencedlease acquire: the waiter queue p:{k}:waiters cannot be read"),
         False),
        (NoPermissionError("this user has no permissions to run the 'evalsha' command"), False),
        (NoScriptError("No matching script. Please use EVAL."), False),
        (MaxConnectionsError("Too many connections"), False),
        (ValueError("not redis"), False),
    ],
)  # fmt: skip
def test_may_have_written(cause: Exception, wrote: bool) -> None:
    assert may_have_written(backend_error(cause)) is wrote
    assert may_have_written(BackendError("no cause")) is False


def test_an_error_after_a_possible_write_is_not_resent_but_cleaned_up() -> None:
    """The script failed mid-way: resending would fail again, so may_resend says no, and the
    attempt stays uncertain: the manager releases with the same owner token."""
    attempt = AcquireAttempt("k", 1_000, 0, 100, FakeClock())
    attempt.sending()
    exc = backend_error(ResponseError("The user executing the script can't run this command"
                                      " or subcommand script: 3a, on @user_script:1."))  # fmt: skip
    assert is_ambiguous(exc) is False
    assert attempt.may_resend(exc) is False
    assert attempt.uncertain is True
    refusal = AcquireAttempt("k", 1_000, 0, 100, FakeClock())
    refusal.sending()
    assert refusal.may_resend(backend_error(ResponseError("fencedlease acquire: x"))) is False
    assert refusal.uncertain is False


class _ScriptFailsAfterWriting(MemoryBackend):
    """acquire writes the grant, then fails as a script does when a later command is refused."""

    def __init__(self) -> None:
        super().__init__(clock=FakeClock())
        self.released: list[tuple[str, str]] = []

    def acquire(self, key: str, owner_token: str, ttl_ms: int) -> AcquireReply:
        super().acquire(key, owner_token, ttl_ms)
        raise backend_error(ResponseError("OOM command not allowed script: 3a"))

    def release(self, key: str, owner_token: str) -> bool:
        self.released.append((key, owner_token))
        return super().release(key, owner_token)


def test_sync_manager_releases_after_an_error_reply_that_may_have_written() -> None:
    backend = _ScriptFailsAfterWriting()
    manager = LeaseManager(backend, clock=backend._clock)
    with pytest.raises(BackendError, match="OOM"):
        manager.acquire("k", ttl_ms=5_000)
    manager.close()  # waits for the background clean-up
    assert len(backend.released) == 1 and backend.released[0][0] == "k"
    assert backend.inspect("k") is None
    assert backend._counters == {"k": 1}  # the token was spent, never reused


# -- bounds of the counters and of restore ------------------------------------------------------


def test_restore_accepts_tokens_up_to_2_63_minus_1() -> None:
    clock = FakeClock()
    state = restored_state("k", SECRET, 1_000, None, MAX_FENCING_TOKEN, clock)
    assert state.fencing_token == MAX_FENCING_TOKEN
    for bad in (0, -1, MAX_FENCING_TOKEN + 1, 2**64):
        with pytest.raises(
            ValidationError, match="1 <= fencing_token <= 9223372036854775807"
        ) as info:
            restored_state("k", SECRET, 1_000, None, bad, clock)
        assert info.value.argument == "fencing_token"


def test_both_faces_restore_within_1_to_2_63_minus_1() -> None:
    clock = FakeClock()
    sync = LeaseManager(MemoryBackend(clock=clock), clock=clock)
    aio = AsyncLeaseManager(AsyncMemoryBackend(clock=clock), clock=clock)
    for restore in (sync.restore, aio.restore):
        lease = restore("k", SECRET, ttl_ms=1_000, fencing_token=MAX_FENCING_TOKEN)
        assert lease.fencing_token == MAX_FENCING_TOKEN
        with pytest.raises(ValidationError, match="1 <= fencing_token <= 9223372036854775807"):
            restore("k", SECRET, ttl_ms=1_000, fencing_token=MAX_FENCING_TOKEN + 1)
    sync.close()


def test_memory_counter_stops_at_2_63_minus_1() -> None:
    backend = MemoryBackend(clock=FakeClock())
    backend._counters["k"] = MAX_FENCING_TOKEN - 1
    assert backend.acquire("k", "o1", 100) == AcquireReply(True, MAX_FENCING_TOKEN, 100)
    assert backend.release("k", "o1") is True
    with pytest.raises(BackendError, match=r"acquire 'k'.*2\*\*63-1"):
        backend.acquire("k", "o2", 100)
    assert backend.inspect("k") is None
    assert backend._counters["k"] == MAX_FENCING_TOKEN


def _set_counter(path: Path, value: object) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute(
            "INSERT OR REPLACE INTO fencedlease_fences (prefix, key, last_token) VALUES (?, ?, ?)",
            ("fencedlease", "k", value),
        )


def test_sqlite_counter_stops_at_2_63_minus_1(tmp_path: Path) -> None:
    path = tmp_path / "leases.db"
    backend = SqliteBackend(path, clock=FakeClock())
    try:
        _set_counter(path, MAX_FENCING_TOKEN - 1)
        assert backend.acquire("k", "o1", 100) == AcquireReply(True, MAX_FENCING_TOKEN, 100)
        info = backend.inspect("k")
        assert info is not None and info.last_issued_token == MAX_FENCING_TOKEN
        assert backend.release("k", "o1") is True
        with pytest.raises(BackendError, match=r"acquire 'k'.*2\*\*63-1"):
            backend.acquire("k", "o2", 100)
        assert backend.inspect("k") is None
    finally:
        backend.close()


@pytest.mark.parametrize("stored", [-3, "x", 1.5, b"\x01", MAX_FENCING_TOKEN + 0.0])
def test_sqlite_malformed_counter_is_refused_and_nothing_written(
    tmp_path: Path, stored: object
) -> None:
    path = tmp_path / "leases.db"
    backend = SqliteBackend(path, clock=FakeClock())
    try:
        _set_counter(path, stored)
        with pytest.raises(BackendError, match="acquire 'k': the fencing counter"):
            backend.acquire("k", "o1", 100)
        assert backend.inspect("k") is None
        with sqlite3.connect(path) as conn:
            rows = conn.execute("SELECT last_token FROM fencedlease_fences").fetchall()
        assert rows == [(stored,)]
    finally:
        backend.close()


def test_sqlite_malformed_lease_token_fails_only_its_own_renewal(tmp_path: Path) -> None:
    """A lease row whose token is not an integer: renew, renew_many's item, inspect and a retried
    acquire raise BackendError naming the key; the other lease of the batch is renewed."""
    path = tmp_path / "leases.db"
    clock = FakeClock()
    backend = SqliteBackend(path, clock=clock)
    try:
        assert backend.acquire("bad", "o", 1_000).fencing_token == 1
        assert backend.acquire("good", "o", 1_000).fencing_token == 1
        with sqlite3.connect(path) as conn:
            conn.execute("UPDATE fencedlease_leases SET fencing_token = 'x' WHERE key = 'bad'")
        results = backend.renew_many([("bad", "o", 5_000), ("good", "o", 5_000)])
        assert isinstance(results[0], BackendError) and "renew 'bad'" in str(results[0])
        assert results[1] == 1
        with pytest.raises(BackendError, match="renew 'bad'"):
            backend.renew("bad", "o", 5_000)
        with pytest.raises(BackendError, match="inspect 'bad'"):
            backend.inspect("bad")
        with pytest.raises(BackendError, match="acquire 'bad'"):
            backend.acquire("bad", "o", 1_000)
        clock.advance(2_000)  # ms: "good", renewed to 5 s, has 3 s left
        info = backend.inspect("good")
        assert info is not None and info.ttl_ms == 3_000
    finally:
        backend.close()
