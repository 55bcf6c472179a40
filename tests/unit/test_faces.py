"""The sync and async faces cannot drift.

By shape: same public names, same parameters (names, kinds, defaults, annotations up to the Async
prefix and Awaitable), I/O awaited exactly where the sync face blocks, and results with the same
fields. By behaviour: one scenario of steps run on both faces over every backend (memory, SQLite,
a real Redis) gives the same outcomes, and on Redis the same commands.
"""

from __future__ import annotations

import asyncio
import inspect
import random
import re
import threading
import uuid
from collections.abc import Awaitable, Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import attrs
import pytest
import redis
import redis.asyncio

from fencedlease import AcquireResult, Lease, LeaseInfo, LeaseManager, LeaseOutcome, ValidationError
from fencedlease.aio import AsyncAcquireResult, AsyncLease, AsyncLeaseManager, AsyncLeaseOutcome
from fencedlease.backends import (
    AsyncMemoryBackend,
    AsyncSqliteBackend,
    MemoryBackend,
    SqliteBackend,
)
from fencedlease.testing import FakeClock

PAIRS = [(LeaseManager, AsyncLeaseManager), (Lease, AsyncLease)]

# Dunders that differ on purpose: with/async with.
TWIN_DUNDERS = {"__enter__": "__aenter__", "__exit__": "__aexit__"}

# Methods that do I/O: a coroutine function on the async face, a plain one on the sync face.
IO_METHODS = {
    LeaseManager: {"acquire", "with_lease", "inspect", "force_release", "close", "check_health"},
    Lease: {"renew", "release", "wait_lost"},
}

# Return annotations that are rightly different in kind, not just by name.
RETURN_TWINS = {
    ("hold", "AbstractContextManager[Lease]"): "AbstractAsyncContextManager[AsyncLease]",
    ("keep_alive", "AbstractContextManager[Lease]"): "AbstractAsyncContextManager[AsyncLease]",
    ("renewer", "Renewer"): "AsyncRenewer",
}


def _public(cls: type) -> set[str]:
    return {name for name in dir(cls) if not name.startswith("_")}


def _normalise(annotation: str) -> str:
    """Erase what only names the face: ``Async`` prefixes, ``redis.asyncio.`` and Awaitable."""
    text = annotation.replace("redis.asyncio.Redis", "redis.Redis")
    text = re.sub(r"\bAsync(?=[A-Z])", "", text)
    while True:
        new = re.sub(r"Awaitable\[([^\[\]]*(?:\[[^\[\]]*\])?[^\[\]]*)\]", r"\1", text)
        if new == text:
            return text
        text = new


def _attr(cls: type, name: str) -> Any:
    return inspect.getattr_static(cls, name)


@pytest.mark.parametrize(("sync", "aio"), PAIRS, ids=lambda c: c.__name__)
def test_same_public_names(sync: type, aio: type) -> None:
    """Every public name of one face exists on the other."""
    assert _public(sync) == _public(aio)
    for sync_name, aio_name in TWIN_DUNDERS.items():
        assert hasattr(sync, sync_name) == hasattr(aio, aio_name)


@pytest.mark.parametrize(("sync", "aio"), PAIRS, ids=lambda c: c.__name__)
def test_same_kinds_of_member(sync: type, aio: type) -> None:
    """A property stays a property, a classmethod a classmethod, a method a method."""
    for name in _public(sync):
        assert type(_attr(sync, name)) is type(_attr(aio, name)), name


@pytest.mark.parametrize(("sync", "aio"), PAIRS, ids=lambda c: c.__name__)
def test_same_signatures(sync: type, aio: type) -> None:
    """Parameters match by name, kind, default and (normalised) annotation; so do return
    annotations, apart from the listed twins (a context manager, the renewer)."""
    names = sorted(_public(sync) | {"__init__"})
    for name in names:
        sync_member, aio_member = getattr(sync, name), getattr(aio, name)
        if isinstance(_attr(sync, name), property):
            sync_member, aio_member = _attr(sync, name).fget, _attr(aio, name).fget
        if not callable(sync_member):
            continue
        s_sig, a_sig = inspect.signature(sync_member), inspect.signature(aio_member)
        s_params = [
            (p.name, p.kind, p.default, _normalise(str(p.annotation)))
            for p in s_sig.parameters.values()
        ]
        a_params = [
            (p.name, p.kind, p.default, _normalise(str(p.annotation)))
            for p in a_sig.parameters.values()
        ]
        assert s_params == a_params, name
        s_ret, a_ret = str(s_sig.return_annotation), str(a_sig.return_annotation)
        expected = RETURN_TWINS.get((name, s_ret))
        if expected is not None:
            assert a_ret == expected, name
        else:
            assert _normalise(s_ret) == _normalise(a_ret), name


@pytest.mark.parametrize(("sync", "aio"), PAIRS, ids=lambda c: c.__name__)
def test_io_is_awaited_exactly_where_sync_blocks(sync: type, aio: type) -> None:
    """The I/O methods are coroutine functions on the async face and plain on the sync face;
    every other method is plain on both (restore, check, hold: no I/O at call time)."""
    io = IO_METHODS[sync]
    for name in sorted(_public(sync)):
        member = _attr(aio, name)
        if isinstance(member, (property, classmethod, staticmethod)):
            continue
        assert inspect.iscoroutinefunction(getattr(aio, name)) is (name in io), name
        assert not inspect.iscoroutinefunction(getattr(sync, name)), name
    assert inspect.iscoroutinefunction(aio.__aenter__ if hasattr(aio, "__aenter__") else _none)


async def _none() -> None:
    return None


@pytest.mark.parametrize(
    ("sync", "aio"),
    [(AcquireResult, AsyncAcquireResult), (LeaseOutcome, AsyncLeaseOutcome)],
    ids=lambda c: c.__name__,
)
def test_results_have_the_same_fields(sync: type, aio: type) -> None:
    """Result objects: same attrs fields (name, default), same public properties."""
    s_fields = [(f.name, f.default) for f in attrs.fields(sync)]
    a_fields = [(f.name, f.default) for f in attrs.fields(aio)]
    assert s_fields == a_fields
    assert _public(sync) == _public(aio)


def test_defaults_are_one_definition() -> None:
    """Both faces' defaults are the shared constant objects, not copies."""
    from fencedlease._core import decisions as _decisions

    for face in (LeaseManager, AsyncLeaseManager):
        for method in ("acquire", "hold", "with_lease"):
            params = inspect.signature(getattr(face, method)).parameters
            assert params["ttl_ms"].default is _decisions.DEFAULT_TTL_MS
            assert params["retry_delay_ms"].default is _decisions.DEFAULT_RETRY_DELAY_MS
        close = inspect.signature(face.close).parameters["timeout_ms"]
        assert close.default is None  # the manager's own bound (from_env sets another)
    sync_manager = LeaseManager(MemoryBackend())
    assert sync_manager._shutdown_timeout_ms is _decisions.DEFAULT_CLOSE_TIMEOUT_MS
    sync_manager.close()
    assert (_decisions.DEFAULT_TTL_MS, _decisions.DEFAULT_RETRY_DELAY_MS) == (30_000, 100)
    assert _decisions.DEFAULT_CLOSE_TIMEOUT_MS == 1_000


# -- behaviour parity ----------------------------------------------------------------------------
#
# One scenario, a list of named steps, run on both faces over every backend. Each step's outcome
# is recorded normalised (results as tuples, errors as type and message, TTLs exact on a fake
# clock and bounded on Redis), and on Redis the commands the server received (MONITOR on a
# connection of its own, keys under the run's own prefix, owner tokens masked). The sync record
# must equal the async one, step for step and command for command.

TTL_MS = 10_000

STEPS = [
    "acquire a free key",
    "acquire a held key",
    "inspect a held key",
    "renew",
    "renew with a new ttl",
    "renew with ttl_ms=0",
    "release",
    "release again",
    "renew a released lease",
    "inspect a free key",
    "restore without expires_at and renew",
    "restore with a naive expires_at",
    "restore with fencing_token=0",
    "force_release a held key",
    "force_release a free key",
    "renew a lease an operator deleted",
    "hold with a body that returns",
    "hold with a body that raises",
    "hold with a body that loses the lease",
    "hold a held key",
    "hold with a body that releases",
    "hold with heartbeat_ms above ttl_ms // 2",
    "with_lease that returns",
    "with_lease on a held key",
    "acquire a held key, waiting 500 ms on the fake clock",
    "acquire with an empty key",
    "acquire with wait_ms=-1",
    "acquire with ttl_ms=0",
    "inspect a key that is not a str",
    "force_release an empty key",
    "close while holding",
    "acquire after close",
    "hold after close",
    "with_lease after close",
]


def _ttl(ttl_ms: int | None, exact: bool) -> object:
    if ttl_ms is None or exact:
        return ttl_ms
    return "0 < ttl_ms <= 10000" if 0 < ttl_ms <= TTL_MS else ttl_ms


def _norm(value: object, exact: bool) -> object:
    """A step's outcome as plain data, the same on both faces."""
    if isinstance(value, (AcquireResult, AsyncAcquireResult)):
        lease = value.lease
        return (
            ("acquired", _norm(lease, exact))
            if lease
            else ("not acquired", _ttl(value.holder_ttl_ms, exact))
        )
    if isinstance(value, (Lease, AsyncLease)):
        return (
            "lease", value.key, value.fencing_token, value.ttl_ms, value.lost, value.lost_reason,
            value.expires_at is None,
        )  # fmt: skip
    if isinstance(value, LeaseInfo):
        return ("info", value.key, value.fencing_token, _ttl(value.ttl_ms, exact),
                len(value.owner_fingerprint), value.last_issued_token)  # fmt: skip
    if isinstance(value, (LeaseOutcome, AsyncLeaseOutcome)):
        return ("outcome", value.acquired, value.skipped, value.value, _norm(value.lease, exact))
    if isinstance(value, BaseException):
        return ("raised", type(value).__name__, str(value))
    if isinstance(value, tuple):
        return tuple(_norm(v, exact) for v in value)
    assert value is None or isinstance(value, (bool, int, str)), value
    return value


class _Scenario:
    """The state a run carries between steps (the leases it holds)."""

    def __init__(self) -> None:
        self.leases: dict[str, Any] = {}


def _run_sync(leases: LeaseManager, exact: bool) -> list[tuple[str, object]]:
    s = _Scenario()
    naive = datetime(2030, 1, 1)

    def loses(lease: Lease) -> bool:
        leases.force_release(lease.key)
        return lease.renew()

    def releases(lease: Lease) -> tuple[bool, bool]:
        return lease.release(), lease.release()

    def raises(lease: Lease) -> None:
        raise ValueError("the body failed")

    def hold(key: str, body: Callable[[Lease], object], **kw: Any) -> object:
        with leases.hold(key, **kw) as lease:
            return body(lease)

    def close_while_holding() -> object:
        with leases.hold("g", ttl_ms=TTL_MS) as lease:
            closer = threading.Thread(target=leases.close)
            closer.start()
            closer.join()
            return lease.lost

    def restore_renew() -> object:
        b = leases.acquire("b", ttl_ms=TTL_MS).lease
        assert b is not None
        r = s.leases["restored"] = leases.restore("b", b.owner_token, ttl_ms=TTL_MS)
        before = _norm(r, exact)
        return before, r.renew(), r

    steps: dict[str, Callable[[], object]] = {
        "acquire a free key": lambda: s.leases.setdefault("a", leases.acquire("a", ttl_ms=TTL_MS)),
        "acquire a held key": lambda: leases.acquire("a", ttl_ms=TTL_MS),
        "inspect a held key": lambda: leases.inspect("a"),
        "renew": lambda: (s.leases["a"].lease.renew(), s.leases["a"].lease),
        "renew with a new ttl": lambda: (
            s.leases["a"].lease.renew(TTL_MS // 2),
            s.leases["a"].lease,
        ),
        "renew with ttl_ms=0": lambda: s.leases["a"].lease.renew(0),
        "release": lambda: (s.leases["a"].lease.release(), s.leases["a"].lease),
        "release again": lambda: (s.leases["a"].lease.release(), s.leases["a"].lease),
        "renew a released lease": lambda: s.leases["a"].lease.renew(),
        "inspect a free key": lambda: leases.inspect("a"),
        "restore without expires_at and renew": restore_renew,
        "restore with a naive expires_at": lambda: leases.restore(
            "b", "x" * 32, ttl_ms=TTL_MS, expires_at=naive
        ),
        "restore with fencing_token=0": lambda: leases.restore(
            "b", "x" * 32, ttl_ms=TTL_MS, fencing_token=0
        ),
        "force_release a held key": lambda: leases.force_release("b"),
        "force_release a free key": lambda: leases.force_release("b"),
        "renew a lease an operator deleted": lambda: (
            s.leases["restored"].renew(),
            s.leases["restored"],
        ),
        "hold with a body that returns": lambda: (
            hold("c", lambda lease: lease.fencing_token, ttl_ms=TTL_MS),
            leases.inspect("c"),
        ),
        "hold with a body that raises": lambda: hold("c", raises, ttl_ms=TTL_MS),
        "hold with a body that loses the lease": lambda: hold("c", loses, ttl_ms=TTL_MS),
        "hold a held key": lambda: (leases.acquire("d", ttl_ms=TTL_MS), hold("d", lambda lease: 1)),
        "hold with a body that releases": lambda: (
            hold("e", releases, ttl_ms=TTL_MS),
            leases.inspect("e"),
        ),
        "hold with heartbeat_ms above ttl_ms // 2": lambda: hold(
            "f", lambda lease: 1, ttl_ms=1_000, heartbeat_ms=501
        ),
        "with_lease that returns": lambda: leases.with_lease("e", lambda lease: 42, ttl_ms=TTL_MS),
        "with_lease on a held key": lambda: leases.with_lease("d", lambda lease: 42),
        "acquire a held key, waiting 500 ms on the fake clock": lambda: (
            leases.acquire("d", ttl_ms=TTL_MS, wait_ms=500, retry_delay_ms=100)
            if exact
            else "real clock: not run"
        ),
        "acquire with an empty key": lambda: leases.acquire(""),
        "acquire with wait_ms=-1": lambda: leases.acquire("f", wait_ms=-1),
        "acquire with ttl_ms=0": lambda: leases.acquire("f", ttl_ms=0),
        "inspect a key that is not a str": lambda: leases.inspect(7),  # type: ignore[arg-type]
        "force_release an empty key": lambda: leases.force_release(""),
        "close while holding": close_while_holding,
        "acquire after close": lambda: leases.acquire("h"),
        "hold after close": lambda: hold("h", lambda lease: 1),
        "with_lease after close": lambda: leases.with_lease("h", lambda lease: 1),
    }
    assert list(steps) == STEPS
    record: list[tuple[str, object]] = []
    for name in STEPS:
        try:
            outcome = steps[name]()
        except Exception as exc:
            outcome = exc
        record.append((name, _norm(outcome, exact)))
    return record


async def _run_async(leases: AsyncLeaseManager, exact: bool) -> list[tuple[str, object]]:
    s = _Scenario()
    naive = datetime(2030, 1, 1)

    async def loses(lease: AsyncLease) -> bool:
        await leases.force_release(lease.key)
        return await lease.renew()

    async def releases(lease: AsyncLease) -> tuple[bool, bool]:
        return await lease.release(), await lease.release()

    async def raises(lease: AsyncLease) -> None:
        raise ValueError("the body failed")

    async def value(result: object) -> object:
        return result

    async def hold(key: str, body: Callable[[AsyncLease], Awaitable[object]], **kw: Any) -> object:
        async with leases.hold(key, **kw) as lease:
            return await body(lease)

    async def close_while_holding() -> object:
        async with leases.hold("g", ttl_ms=TTL_MS) as lease:
            closer = asyncio.ensure_future(leases.close())
            s.leases["closer"] = closer
            await asyncio.shield(closer)  # the loss cancels the body here
            return lease.lost

    async def restore_renew() -> object:
        b = (await leases.acquire("b", ttl_ms=TTL_MS)).lease
        assert b is not None
        r = s.leases["restored"] = leases.restore("b", b.owner_token, ttl_ms=TTL_MS)
        before = _norm(r, exact)
        return before, await r.renew(), r

    async def acquire_a() -> object:
        s.leases["a"] = await leases.acquire("a", ttl_ms=TTL_MS)
        return s.leases["a"]

    def a() -> AsyncLease:
        lease = s.leases["a"].lease
        assert isinstance(lease, AsyncLease)
        return lease

    async def both(first: Awaitable[object], second: Callable[[], Awaitable[object]]) -> object:
        return await first, await second()

    steps: dict[str, Callable[[], Awaitable[object]]] = {
        "acquire a free key": acquire_a,
        "acquire a held key": lambda: leases.acquire("a", ttl_ms=TTL_MS),
        "inspect a held key": lambda: leases.inspect("a"),
        "renew": lambda: both(a().renew(), lambda: value(a())),
        "renew with a new ttl": lambda: both(a().renew(TTL_MS // 2), lambda: value(a())),
        "renew with ttl_ms=0": lambda: a().renew(0),
        "release": lambda: both(a().release(), lambda: value(a())),
        "release again": lambda: both(a().release(), lambda: value(a())),
        "renew a released lease": lambda: a().renew(),
        "inspect a free key": lambda: leases.inspect("a"),
        "restore without expires_at and renew": restore_renew,
        "restore with a naive expires_at": lambda: value(
            leases.restore("b", "x" * 32, ttl_ms=TTL_MS, expires_at=naive)
        ),
        "restore with fencing_token=0": lambda: value(
            leases.restore("b", "x" * 32, ttl_ms=TTL_MS, fencing_token=0)
        ),
        "force_release a held key": lambda: leases.force_release("b"),
        "force_release a free key": lambda: leases.force_release("b"),
        "renew a lease an operator deleted": lambda: both(
            s.leases["restored"].renew(), lambda: value(s.leases["restored"])
        ),
        "hold with a body that returns": lambda: both(
            hold("c", lambda lease: value(lease.fencing_token), ttl_ms=TTL_MS),
            lambda: leases.inspect("c"),
        ),
        "hold with a body that raises": lambda: hold("c", raises, ttl_ms=TTL_MS),
        "hold with a body that loses the lease": lambda: hold("c", loses, ttl_ms=TTL_MS),
        "hold a held key": lambda: both(
            leases.acquire("d", ttl_ms=TTL_MS), lambda: hold("d", lambda lease: value(1))
        ),
        "hold with a body that releases": lambda: both(
            hold("e", releases, ttl_ms=TTL_MS), lambda: leases.inspect("e")
        ),
        "hold with heartbeat_ms above ttl_ms // 2": lambda: hold(
            "f", lambda lease: value(1), ttl_ms=1_000, heartbeat_ms=501
        ),
        "with_lease that returns": lambda: leases.with_lease(
            "e", lambda lease: value(42), ttl_ms=TTL_MS
        ),
        "with_lease on a held key": lambda: leases.with_lease("d", lambda lease: value(42)),
        "acquire a held key, waiting 500 ms on the fake clock": lambda: (
            leases.acquire("d", ttl_ms=TTL_MS, wait_ms=500, retry_delay_ms=100)
            if exact
            else value("real clock: not run")
        ),
        "acquire with an empty key": lambda: leases.acquire(""),
        "acquire with wait_ms=-1": lambda: leases.acquire("f", wait_ms=-1),
        "acquire with ttl_ms=0": lambda: leases.acquire("f", ttl_ms=0),
        "inspect a key that is not a str": lambda: leases.inspect(7),  # type: ignore[arg-type]
        "force_release an empty key": lambda: leases.force_release(""),
        "close while holding": close_while_holding,
        "acquire after close": lambda: leases.acquire("h"),
        "hold after close": lambda: hold("h", lambda lease: value(1)),
        "with_lease after close": lambda: leases.with_lease("h", lambda lease: value(1)),
    }
    assert list(steps) == STEPS
    record: list[tuple[str, object]] = []
    for name in STEPS:
        try:
            outcome = await steps[name]()
        except Exception as exc:
            outcome = exc
        record.append((name, _norm(outcome, exact)))
        if name == "close while holding":
            await s.leases["closer"]
    return record


class _Monitor:
    """The commands a Redis server receives (MONITOR on a connection of its own) that name keys
    under ``prefix``, with the prefix and every 32-hex owner token masked."""

    def __init__(self, url: str, prefix: str) -> None:
        self._client = redis.Redis.from_url(url, decode_responses=True)
        self._prefix = prefix
        self._marker = f"parity-end-{uuid.uuid4().hex}"
        self.commands: list[str] = []
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._listen, daemon=True)

    def __enter__(self) -> _Monitor:
        self._thread.start()
        assert self._ready.wait(30)
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._client.echo(self._marker)
        self._thread.join(30)
        self._client.close()

    def _listen(self) -> None:
        with self._client.monitor() as monitor:  # type: ignore[no-untyped-call]
            self._ready.set()
            for event in monitor.listen():
                command = str(event["command"])
                if self._marker in command:
                    return
                if self._prefix in command:
                    command = command.replace(self._prefix, "<prefix>")
                    self.commands.append(re.sub(r"\b[0-9a-f]{32}\b", "<owner>", command))


BACKENDS = ["memory", "sqlite", pytest.param("redis", marks=pytest.mark.live)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_both_faces_behave_the_same(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The scenario's record (and, on Redis, the commands sent) is the same on both faces. The
    retry jitter is pinned (x1.0) so a waiting acquire is the same on both; it runs on the fake
    clock's stores only (on Redis the hand-off's wake-ups follow real time)."""
    monkeypatch.setattr(random, "uniform", lambda low, high: 1.0)
    exact = backend != "redis"
    records: dict[str, list[tuple[str, object]]] = {}
    commands: dict[str, list[str]] = {}
    url = request.getfixturevalue("redis_url") if backend == "redis" else ""
    if backend == "redis":  # warm the script cache, so neither run sees a NOSCRIPT round trip
        with LeaseManager(redis.Redis.from_url(url), prefix=f"warm{uuid.uuid4().hex[:8]}") as warm:
            _run_sync(warm, exact)
    for face in ("sync", "async"):
        clock = FakeClock()
        prefix = f"parity{uuid.uuid4().hex[:12]}"
        if backend == "redis":
            with _Monitor(url, prefix) as monitor:
                if face == "sync":
                    client = redis.Redis.from_url(url)
                    records[face] = _run_sync(LeaseManager(client, prefix=prefix), exact)
                    client.close()
                else:

                    async def main(prefix: str = prefix) -> list[tuple[str, object]]:
                        client = redis.asyncio.Redis.from_url(url)
                        try:
                            return await _run_async(AsyncLeaseManager(client, prefix=prefix), exact)
                        finally:
                            await client.aclose()

                    records[face] = asyncio.run(main())
            commands[face] = monitor.commands
        elif face == "sync":
            store: Any = (
                MemoryBackend(clock=clock)
                if backend == "memory"
                else SqliteBackend(tmp_path / "sync.db", clock=clock)
            )
            records[face] = _run_sync(LeaseManager(store, clock=clock), exact)
        else:

            async def main_memory(clock: FakeClock = clock) -> list[tuple[str, object]]:
                store: Any = (
                    AsyncMemoryBackend(clock=clock)
                    if backend == "memory"
                    else AsyncSqliteBackend(tmp_path / "async.db", clock=clock)
                )
                return await _run_async(AsyncLeaseManager(store, clock=clock), exact)

            records[face] = asyncio.run(main_memory())
    assert [name for name, _ in records["sync"]] == STEPS
    for (name, sync_outcome), (_, async_outcome) in zip(
        records["sync"], records["async"], strict=True
    ):
        assert (name, sync_outcome) == (name, async_outcome)
    assert commands.get("sync") == commands.get("async")
    if backend == "redis":
        assert len(commands["sync"]) > len(STEPS)  # the monitor saw the scenario's commands


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"ttl_ms": 0}, "ttl_ms"),
        ({"ttl_ms": 40_000, "heartbeat_ms": 20_001}, "heartbeat_ms"),
        ({"on_renew_error": 1}, "on_renew_error"),
    ],
)
def test_hold_checks_its_arguments_when_called_on_both_faces(
    kwargs: dict[str, object], argument: str
) -> None:
    """``hold(...)`` raises before any ``with`` is entered, naming the argument, the same on both
    faces (one shared definition); nothing is acquired."""
    clock = FakeClock()
    store = MemoryBackend(clock=clock)
    leases = LeaseManager(store, clock=clock)
    with pytest.raises(ValidationError) as sync_error:
        leases.hold("k", **kwargs)  # type: ignore[arg-type]

    async def main() -> ValidationError:
        async with AsyncLeaseManager(AsyncMemoryBackend(sync=store), clock=clock) as aio:
            with pytest.raises(ValidationError) as error:
                aio.hold("k", **kwargs)  # type: ignore[arg-type]
            return error.value

    async_error = asyncio.run(main())
    assert sync_error.value.argument == async_error.argument == argument
    assert str(sync_error.value) == str(async_error)
    assert leases.inspect("k") is None
    leases.close()
