"""Only the library's own errors escape a public entry point: every argument of every entry
point of both faces fuzzed with Hypothesis (types, extremes, NUL, surrogates, datetime limits)
on memory:// and sqlite:///:memory:, plus the escapes found, each pinned by a test."""

from __future__ import annotations

import asyncio
import functools
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contract.public_errors import (
    CALLS,
    PLAIN_CALLS,
    REDIS_URL_QUERIES,
    call_async,
    call_plain,
    call_sync,
)
from fencedlease import LeaseManager, ValidationError
from fencedlease._core.validate import MAX_MS, ArgumentTypeError
from fencedlease._redis.options import redis_parameters
from fencedlease.aio import AsyncLeaseManager
from fencedlease.backends import (
    AsyncMemoryBackend,
    AsyncSqliteBackend,
    MemoryBackend,
    SqliteBackend,
)
from fencedlease.testing import FakeClock

URLS = ["memory://", "sqlite:///:memory:"]


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # a junk URL that happens to name a SQLite file lands here


@pytest.mark.parametrize("url", URLS)
@pytest.mark.parametrize("name", sorted(CALLS))
def test_sync_entry_points_raise_only_library_errors(url: str, name: str) -> None:
    """LeaseManager: constructor, from_url, acquire, hold, with_lease, restore, inspect,
    force_release and a lease's renew/wait_lost: any argument, only FencedLeaseError."""

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.data())
    def run(data: st.DataObject) -> None:
        call_sync(functools.partial(LeaseManager.from_url, url), name, data.draw(CALLS[name]))

    run()


@pytest.mark.parametrize("url", URLS)
@pytest.mark.parametrize("name", sorted(CALLS))
def test_async_entry_points_raise_only_library_errors(url: str, name: str) -> None:
    """AsyncLeaseManager: the same entry points, awaited: only FencedLeaseError."""

    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.data())
    def run(data: st.DataObject) -> None:
        call_async(functools.partial(AsyncLeaseManager.from_url, url), name, data.draw(CALLS[name]))

    run()


# -- the escapes found, one test each -------------------------------------------------------------

_PLUS_ONE = timezone(timedelta(hours=1))
_MINUS_ONE = timezone(timedelta(hours=-1))


@pytest.mark.parametrize(
    ("expires_at", "match"),
    [
        (datetime.min.replace(tzinfo=_PLUS_ONE), "out of the datetime range"),
        (datetime.max.replace(tzinfo=_MINUS_ONE), "out of the datetime range"),
        (datetime.max.replace(tzinfo=timezone.utc), f"at most {MAX_MS} milliseconds"),
        (datetime.min, "timezone-aware"),
        (datetime(2026, 1, 1), "timezone-aware"),
        ("2026-01-01T00:00:00+00:00", "timezone-aware"),
        (1_700_000_000, "timezone-aware"),
    ],
)
def test_restore_refuses_expires_at_out_of_range_or_naive(expires_at: Any, match: str) -> None:
    """datetime.min/max in any zone, naive, or not a datetime: ValidationError naming
    expires_at (not OverflowError), on both faces."""
    clock = FakeClock(1_800_000_000.0)
    sync = LeaseManager(MemoryBackend(clock=clock), clock=clock)
    aio = AsyncLeaseManager(AsyncMemoryBackend(clock=clock), clock=clock)
    for face in (sync, aio):
        with pytest.raises(ValidationError, match=match) as info:
            face.restore("k", "owner", ttl_ms=1_000, expires_at=expires_at)
        assert info.value.argument == "expires_at"


def test_restore_takes_a_long_past_expiry_as_lost() -> None:
    """datetime.min in UTC is representable: the restored lease is simply past its deadline,
    and keeps the given expires_at."""
    clock = FakeClock(1_800_000_000.0)
    leases = LeaseManager(MemoryBackend(clock=clock), clock=clock)
    earliest = datetime.min.replace(tzinfo=timezone.utc)
    lease = leases.restore("k", "owner", ttl_ms=1_000, expires_at=earliest)
    assert lease.expires_at == earliest
    assert lease.lost is True


def test_restore_takes_an_expiry_up_to_max_ms_ahead() -> None:
    """expires_at exactly MAX_MS milliseconds ahead is the bound, and is accepted."""
    clock = FakeClock(1_800_000_000.0)
    leases = LeaseManager(MemoryBackend(clock=clock), clock=clock)
    at = datetime.fromtimestamp(1_800_000_000.0 + MAX_MS / 1000, tz=timezone.utc)
    lease = leases.restore("k", "owner", ttl_ms=1_000, expires_at=at)
    assert lease.expires_at == at
    assert lease.lost is False
    with pytest.raises(ValidationError, match="expires_at"):
        leases.restore("k", "owner", ttl_ms=1_000, expires_at=at + timedelta(seconds=1))


@pytest.mark.parametrize("token", [0, -1, 2**63, 2**64, True, 1.0, "1"])
def test_restore_refuses_a_fencing_token_out_of_the_counters_range(token: object) -> None:
    """fencing_token: an int in 1..2**63-1, on both faces."""
    for face in (LeaseManager.from_url("memory://"), AsyncLeaseManager.from_url("memory://")):
        with pytest.raises(ValidationError) as info:
            face.restore("k", "owner", ttl_ms=1_000, fencing_token=token)  # type: ignore[arg-type]
        assert info.value.argument == "fencing_token"
    assert (
        LeaseManager.from_url("memory://")
        .restore("k", "o", ttl_ms=1, fencing_token=2**63 - 1)
        .fencing_token
        == 2**63 - 1
    )


class _Recording(MemoryBackend):
    """A MemoryBackend that counts acquires, to show a refusal came before any."""

    acquires = 0

    def acquire(self, *args: Any) -> Any:
        type(self).acquires += 1
        return super().acquire(*args)


async def _async_fn(lease: object) -> int:
    return 1


class _AsyncCallable:
    async def __call__(self, lease: object) -> int:
        return 1


@pytest.mark.parametrize(
    "fn", [_async_fn, functools.partial(_async_fn), _AsyncCallable()], ids=["def", "partial", "obj"]
)
def test_sync_with_lease_refuses_a_coroutine_function_before_acquiring(fn: Any) -> None:
    """An async function given to LeaseManager.with_lease: ValidationError (also TypeError)
    naming fn, and no acquire was sent."""
    _Recording.acquires = 0
    leases = LeaseManager(_Recording())
    with pytest.raises(ArgumentTypeError, match="AsyncLeaseManager") as info:
        leases.with_lease("k", fn)
    assert info.value.argument == "fn"
    assert isinstance(info.value, TypeError)
    assert _Recording.acquires == 0


def test_sync_with_lease_refuses_an_awaitable_result_after_releasing() -> None:
    """A lambda returning a coroutine cannot be told apart before it runs: the coroutine is
    closed unawaited, the lease released, and ValidationError names fn."""
    leases = LeaseManager.from_url("memory://")
    with pytest.raises(ArgumentTypeError) as info:
        leases.with_lease("k", lambda lease: _async_fn(lease))
    assert info.value.argument == "fn"
    assert leases.inspect("k") is None


@pytest.mark.parametrize("fn", [None, 5, "fn"])
def test_with_lease_refuses_a_non_callable_before_acquiring(fn: Any) -> None:
    """fn not callable: ValidationError naming fn on both faces, before any acquire."""
    _Recording.acquires = 0
    with pytest.raises(ValidationError) as info:
        LeaseManager(_Recording()).with_lease("k", fn)
    assert info.value.argument == "fn"

    class _AsyncRecording(AsyncMemoryBackend):
        async def acquire(self, *args: Any) -> Any:
            _Recording.acquires += 1
            return await super().acquire(*args)

    async def run() -> None:
        async with AsyncLeaseManager(_AsyncRecording()) as leases:
            with pytest.raises(ValidationError) as info:
                await leases.with_lease("k", fn)
            assert info.value.argument == "fn"

    asyncio.run(run())
    assert _Recording.acquires == 0


def _sync_fn(lease: object) -> int:
    return 1


def test_async_with_lease_refuses_a_sync_function_and_releases() -> None:
    """A sync function given to AsyncLeaseManager.with_lease: ValidationError (also TypeError)
    naming fn; the lease it ran under is released, not left held."""

    async def run() -> None:
        async with AsyncLeaseManager.from_url("memory://") as leases:
            sync_fn: Any = _sync_fn
            with pytest.raises(ArgumentTypeError, match=r"LeaseManager\.with_lease") as info:
                await leases.with_lease("k", sync_fn)
            assert info.value.argument == "fn"
            assert await leases.inspect("k") is None

    asyncio.run(run())


@pytest.mark.parametrize("callback", [5, "print", b"x"])
def test_hold_refuses_a_non_callable_on_renew_error(callback: object) -> None:
    """on_renew_error must be callable or None: ValidationError before acquiring, both faces."""
    leases = LeaseManager.from_url("memory://")
    with (
        pytest.raises(ValidationError) as info,
        leases.hold("k", on_renew_error=callback),  # type: ignore[arg-type]
    ):
        pytest.fail("body ran")
    assert info.value.argument == "on_renew_error"
    assert leases.inspect("k") is None
    aio = AsyncLeaseManager.from_url("memory://")
    with pytest.raises(ValidationError) as info:
        aio.hold("k", on_renew_error=callback)  # type: ignore[arg-type]
    assert info.value.argument == "on_renew_error"


@pytest.mark.parametrize(
    ("client", "argument", "is_type_error"),
    [
        (5, "client", False),
        (None, "client", False),
        ("redis://localhost", "client", False),
    ],
)
def test_constructors_refuse_what_is_not_a_client(
    client: object, argument: str, is_type_error: bool
) -> None:
    """A client that is neither a redis-py client nor a backend: ValidationError naming it."""
    for face in (LeaseManager, AsyncLeaseManager):
        with pytest.raises(ValidationError) as info:
            face(client)  # type: ignore[arg-type]
        assert info.value.argument == argument
        assert isinstance(info.value, TypeError) is is_type_error


def test_constructors_refuse_the_other_faces_client_as_a_type_error() -> None:
    """A redis.asyncio.Redis or async backend to LeaseManager, a redis.Redis or sync backend to
    AsyncLeaseManager: ValidationError that is also a TypeError, naming the right manager."""
    cases: list[tuple[Any, Any, str]] = [
        (LeaseManager, redis.asyncio.Redis(), "AsyncLeaseManager"),
        (LeaseManager, AsyncMemoryBackend(), "AsyncLeaseManager"),
        (AsyncLeaseManager, redis.Redis(), "LeaseManager"),
        (AsyncLeaseManager, MemoryBackend(), "LeaseManager"),
    ]
    for face, client, match in cases:
        with pytest.raises(ArgumentTypeError, match=match) as info:
            face(client)
        assert info.value.argument == "client"


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"clock": 5}, "clock"),
        ({"clock": None}, "clock"),
        ({"prefix": ""}, "prefix"),
        ({"prefix": 5}, "prefix"),
        ({"prefix": "a{b"}, "prefix"),
        ({"renew_batch_size": 0}, "renew_batch_size"),
        ({"renew_batch_size": 2.5}, "renew_batch_size"),
    ],
)
def test_constructors_refuse_bad_options(kwargs: dict[str, Any], argument: str) -> None:
    """clock without monotonic()/time(), a bad prefix or batch size: ValidationError naming it,
    on both faces, with a backend object as with from_url."""
    cases: list[tuple[Any, Any]] = [
        (LeaseManager, MemoryBackend()),
        (AsyncLeaseManager, AsyncMemoryBackend()),
    ]
    for face, backend in cases:
        with pytest.raises(ValidationError) as info:
            face(backend, **kwargs)
        assert info.value.argument == argument
        with pytest.raises(ValidationError) as info:
            face.from_url("memory://", **kwargs)
        assert info.value.argument == argument


@pytest.mark.parametrize("path", ["a\x00b.db", Path("a\x00b.db")])
def test_sqlite_backends_refuse_a_nul_in_the_path(path: Any) -> None:
    """SqliteBackend and AsyncSqliteBackend (made directly, not from a URL): ValidationError
    naming path, not sqlite3's ValueError, before anything is opened."""
    for make in (SqliteBackend, AsyncSqliteBackend):
        with pytest.raises(ValidationError) as info:
            make(path)
        assert info.value.argument == "path"


def test_backends_refuse_a_clock_without_monotonic_and_time() -> None:
    """MemoryBackend, SqliteBackend and AsyncSqliteBackend check their clock when made, rather
    than failing with AttributeError at the first lease."""
    makers: list[Any] = [
        lambda: MemoryBackend(clock=5),  # type: ignore[arg-type]
        lambda: AsyncMemoryBackend(clock=object()),  # type: ignore[arg-type]
        lambda: SqliteBackend(":memory:", clock=None),  # type: ignore[arg-type]
        lambda: AsyncSqliteBackend(":memory:", clock="clock"),  # type: ignore[arg-type]
    ]
    for make in makers:
        with pytest.raises(ValidationError) as info:
            make()
        assert info.value.argument == "clock"


class _WrappedAsyncBackend:
    """An asyncio backend whose methods are plain functions returning awaitables (as a
    decorator would make them): not told apart from a sync one by inspection, so accepted."""

    def __init__(self) -> None:
        self.inner = AsyncMemoryBackend()

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.inner, name)
        return lambda *args: method(*args)


def test_async_manager_takes_a_backend_whose_methods_return_awaitables() -> None:
    """Only the library's own sync backends are refused by AsyncLeaseManager; a backend of
    plain methods returning awaitables works."""

    async def run() -> int | None:
        async with AsyncLeaseManager(_WrappedAsyncBackend()) as leases:
            result = await leases.acquire("k")
            assert result.lease is not None
            await result.lease.release()
            return result.lease.fencing_token

    assert asyncio.run(run()) == 1


@pytest.mark.parametrize("name", sorted(PLAIN_CALLS))
def test_plain_entry_points_raise_only_library_errors(name: str) -> None:
    """owner_fingerprint and the backend constructors, every argument fuzzed."""

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.data())
    def run(data: st.DataObject) -> None:
        call_plain(name, data.draw(PLAIN_CALLS[name][1]))

    run()


def test_redis_url_options_raise_only_library_errors() -> None:
    """Any option redis-py knows of (or not), with any short value, in a Redis URL: refused by
    from_url, or the first acquire fails as BackendError (nothing listens on port 1); never an
    AttributeError/TypeError from inside redis-py, on both faces."""
    kw = {"key": "k", "ttl_ms": 1_000, "wait_ms": 0, "retry_delay_ms": 1}

    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(REDIS_URL_QUERIES)
    def run(query: str) -> None:
        url = f"redis://127.0.0.1:1/0?{query}"
        options: dict[str, Any] = {
            "socket_connect_timeout": 1
        }  # a URL's own value of it is dropped: in bounds
        call_sync(functools.partial(LeaseManager.from_url, url, **options), "acquire", dict(kw))
        call_async(
            functools.partial(AsyncLeaseManager.from_url, url, **options), "acquire", dict(kw)
        )

    run()


@pytest.mark.parametrize(
    "option",
    ["retry", "connection_class", "credential_provider", "retry_on_error", "redis_connect_func",
     "event_dispatcher", "socket_type", "decode_responses", "ssl", "port", "cache_config"],
)  # fmt: skip
@pytest.mark.parametrize("face", ["sync", "async"])
def test_a_url_option_redis_py_keeps_as_a_string_is_refused_naming_it(
    option: str, face: str
) -> None:
    """redis-py passes these on from a URL as raw strings where it takes an object (or a bool:
    'false' is truthy): a ValidationError naming the option, the password not shown."""
    url = f"redis://:hunter2@127.0.0.1:1/0?{option}=1"
    factory = LeaseManager.from_url if face == "sync" else AsyncLeaseManager.from_url
    with pytest.raises(ValidationError) as caught:
        factory(url)
    assert caught.value.argument == option
    assert "hunter2" not in str(caught.value)
    if option in redis_parameters():
        assert f"pass {option}= as a keyword argument" in str(caught.value)
    else:  # a redis-py older than the option (event_dispatcher, cache_config: 5.0.1 has neither)
        assert f"{option} is not an option of redis:// connections" in str(caught.value)


@pytest.mark.parametrize("token", [None, 123, b"ab", "", "\ud800"])
def test_owner_fingerprint_refuses_what_is_no_token(token: object) -> None:
    import fencedlease

    with pytest.raises(ValidationError) as caught:
        fencedlease.owner_fingerprint(token)  # type: ignore[arg-type]
    assert caught.value.argument == "owner_token"


@pytest.mark.parametrize("path", ["\ud800", Path("\udcff.db"), "a\ud800b.db"])
@pytest.mark.parametrize("backend", [SqliteBackend, AsyncSqliteBackend])
def test_sqlite_backends_refuse_a_path_not_encodable_as_utf8(path: Any, backend: Any) -> None:
    with pytest.raises(ValidationError, match="encodable as UTF-8") as caught:
        backend(path)
    assert caught.value.argument == "path"
