"""A fenced store knows which counter fences it: the lease's fencing scope, not its bare key.

Tokens are counted per counter, ``<prefix>:{<key>}:fence``: two managers with different prefixes
count the same key independently. Every store (FencedResource, the SQL guard, ``fenced_update``
with ``lease_key_column``; RedisFencedResource in tests/live) records the scope of the first lease
it accepts and refuses a lease of another scope, whatever its token, so the real holder of the
first counter is never locked out by a token of the second. Leases of both faces and of every
backend carry a scope, restored leases included. A record of the earlier shape (a bare key) is
migrated by the first lease of that key.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fencedlease import (
    BackendError,
    FencedResource,
    LeaseKeyMismatchError,
    LeaseManager,
    SqliteBackend,
    StaleTokenError,
    db,
    redis_keys,
)
from fencedlease._core.fencing import FenceState, FencingAccess, decide
from fencedlease._core.fencing_access import coerce_access
from fencedlease.aio import AsyncLeaseManager
from fencedlease.backends import AsyncMemoryBackend, AsyncSqliteBackend, MemoryBackend

KEY = "orders"
RESOURCE = "orders-data"
B_BUMPS = 4  # appB's counter is moved on, so its lease's token (5) exceeds appA's next (2)


@attrs.frozen
class Grants:
    """appA's lease (token 1), appA's next lease after it (token 2) and appB's lease of the same
    key (token 5, another counter); ``restored_a``/``restored_b`` are ``la2``/``lb`` rebuilt by
    ``restore()`` on their own managers."""

    la: Any
    la2: Any
    lb: Any
    restored_a: Any
    restored_b: Any


def _sync_grants(a: LeaseManager, b: LeaseManager) -> Grants:
    with a, b:
        for _ in range(B_BUMPS):
            bumped = b.acquire(KEY, ttl_ms=10_000).lease
            assert bumped is not None and bumped.release() is True
        la = a.acquire(KEY, ttl_ms=10_000).lease
        lb = b.acquire(KEY, ttl_ms=10_000).lease
        assert la is not None and lb is not None and la.release() is True
        la2 = a.acquire(KEY, ttl_ms=10_000).lease
        assert la2 is not None
        restored_a = a.restore(KEY, la2.owner_token, ttl_ms=10_000, fencing_token=la2.fencing_token)
        restored_b = b.restore(KEY, lb.owner_token, ttl_ms=10_000, fencing_token=lb.fencing_token)
        return Grants(la, la2, lb, restored_a, restored_b)


def _async_grants(a: AsyncLeaseManager, b: AsyncLeaseManager) -> Grants:
    async def main() -> Grants:
        async with a, b:
            for _ in range(B_BUMPS):
                bumped = (await b.acquire(KEY, ttl_ms=10_000)).lease
                assert bumped is not None and await bumped.release() is True
            la = (await a.acquire(KEY, ttl_ms=10_000)).lease
            lb = (await b.acquire(KEY, ttl_ms=10_000)).lease
            assert la is not None and lb is not None and await la.release() is True
            la2 = (await a.acquire(KEY, ttl_ms=10_000)).lease
            assert la2 is not None
            restored_a = a.restore(
                KEY, la2.owner_token, ttl_ms=10_000, fencing_token=la2.fencing_token
            )
            restored_b = b.restore(
                KEY, lb.owner_token, ttl_ms=10_000, fencing_token=lb.fencing_token
            )
            return Grants(la, la2, lb, restored_a, restored_b)

    return asyncio.run(main())


def grants_of(backend: str, face: str, tmp_path: Path) -> tuple[Grants, str, str]:
    """The grants of two independent counters of KEY on ``backend`` through ``face``, and the
    scopes appA's and appB's leases must carry."""
    path = tmp_path / "leases.db"
    if backend == "memory":
        sync_a, sync_b = MemoryBackend(), MemoryBackend()  # two stores: two counters
        scope_a, scope_b = sync_a.fencing_scope(KEY), sync_b.fencing_scope(KEY)
        assert scope_a.startswith("memory:") and scope_a.endswith(":{orders}:fence")
        if face == "sync":
            return _sync_grants(LeaseManager(sync_a), LeaseManager(sync_b)), scope_a, scope_b
        return (
            _async_grants(
                AsyncLeaseManager(AsyncMemoryBackend(sync=sync_a)),
                AsyncLeaseManager(AsyncMemoryBackend(sync=sync_b)),
            ),
            scope_a,
            scope_b,
        )
    scope_a, scope_b = "appA:{orders}:fence", "appB:{orders}:fence"
    if face == "sync":
        managers = (
            LeaseManager(SqliteBackend(path, prefix="appA")),
            LeaseManager(SqliteBackend(path, prefix="appB")),
        )
        return _sync_grants(*managers), scope_a, scope_b
    amanagers = (
        AsyncLeaseManager(AsyncSqliteBackend(path, prefix="appA")),
        AsyncLeaseManager(AsyncSqliteBackend(path, prefix="appB")),
    )
    return _async_grants(*amanagers), scope_a, scope_b


def check_counters_kept_apart(
    accept: Callable[[Any], int], recorded: Callable[[], str | None], g: Grants
) -> None:
    """The review's case on one store: appA's lease fences it; appB's lease of the same key (a
    larger token of another counter) is refused with LeaseKeyMismatchError naming both scopes and
    no owner token, also restored; appA's next holder, and its restored lease, are accepted."""
    assert g.la.fencing_scope != g.lb.fencing_scope
    assert g.la.fencing_scope == g.la2.fencing_scope == g.restored_a.fencing_scope
    assert g.restored_b.fencing_scope == g.lb.fencing_scope
    assert (g.la.fencing_token, g.la2.fencing_token, g.lb.fencing_token) == (1, 2, B_BUMPS + 1)
    assert accept(g.la) == 1
    assert recorded() == g.la.fencing_scope
    for other in (g.lb, g.restored_b):
        with pytest.raises(LeaseKeyMismatchError) as info:
            accept(other)
        exc = info.value
        assert isinstance(exc, StaleTokenError)
        assert (exc.token, exc.last_token) == (B_BUMPS + 1, 1)
        assert (exc.lease_key, exc.presented_key) == (g.la.fencing_scope, g.lb.fencing_scope)
        message = str(exc)
        assert f"of a lease of {g.lb.fencing_scope!r}" in message
        assert f"fenced by leases of {g.la.fencing_scope!r}" in message
        for secret in (g.la.owner_token, g.lb.owner_token, g.la2.owner_token):
            assert secret not in message
        assert recorded() == g.la.fencing_scope
    assert accept(g.la2) == 2  # appA's current holder is not locked out
    assert accept(g.restored_a) == 2
    assert recorded() == g.la.fencing_scope
    assert accept(2) == 2  # a bare int token is still accepted


def sqlite_guard(conn: sqlite3.Connection) -> tuple[Callable[[Any], int], Callable[[], Any]]:
    db.create_guard_table(conn)

    def recorded() -> Any:
        row = conn.execute(
            "SELECT lease_key FROM fencedlease_guard WHERE resource = ?", (RESOURCE,)
        ).fetchone()
        return None if row is None else row[0]

    return (lambda lease: db.fence_guard(conn, RESOURCE, lease)), recorded


def sqlite_rows(conn: sqlite3.Connection) -> tuple[Callable[[Any], int], Callable[[], Any]]:
    conn.execute(
        "CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT, fencing_token INTEGER, lease_key TEXT)"
    )
    conn.execute("INSERT INTO t (id) VALUES (1)")

    def accept(lease: Any) -> int:
        assert (
            db.fenced_update(conn, "t", {"v": "x"}, {"id": 1}, lease, lease_key_column="lease_key")
            == 1
        )
        return int(conn.execute("SELECT fencing_token FROM t WHERE id = 1").fetchone()[0])

    return accept, lambda: conn.execute("SELECT lease_key FROM t WHERE id = 1").fetchone()[0]


def memory_resource() -> tuple[Callable[[Any], int], Callable[[], Any]]:
    res = FencedResource(RESOURCE)
    return res.accept, lambda: res.lease_key


@pytest.fixture
def conn() -> Iterator[sqlite3.Connection]:
    c = sqlite3.connect(":memory:", isolation_level=None)
    yield c
    c.close()


STORES: dict[str, Callable[[sqlite3.Connection], tuple[Callable[[Any], int], Callable[[], Any]]]]
STORES = {
    "FencedResource": lambda _conn: memory_resource(),
    "sqlite fence_guard": sqlite_guard,
    "sqlite fenced_update lease_key_column": sqlite_rows,
}


@pytest.mark.parametrize("store", sorted(STORES))
@pytest.mark.parametrize("face", ["sync", "aio"])
@pytest.mark.parametrize("backend", ["memory", "sqlite"])
def test_store_refuses_the_same_key_of_another_counter(
    store: str, face: str, backend: str, conn: sqlite3.Connection, tmp_path: Path
) -> None:
    g, scope_a, scope_b = grants_of(backend, face, tmp_path)
    assert (g.la.fencing_scope, g.lb.fencing_scope) == (scope_a, scope_b)
    check_counters_kept_apart(*STORES[store](conn), g)


@pytest.mark.parametrize("face", ["sync", "aio"])
def test_every_lease_names_its_counter_as_the_redis_layout_does(face: str, tmp_path: Path) -> None:
    """SQLite leases (both faces, restored too) carry ``redis_keys(prefix, key).fence``, escaping
    included; a MemoryBackend's carry ``memory:<id>`` of that backend in place of the prefix."""
    key = "a{b}%c"
    expected = redis_keys("app:x", key).fence
    assert expected == "app:x:{a%7Bb%7D%25c}:fence"
    sqlite = SqliteBackend(tmp_path / "x.db", prefix="app:x")
    memory = MemoryBackend()
    if face == "sync":
        for manager, scope in (
            (LeaseManager(sqlite), expected),
            (LeaseManager(memory), memory.fencing_scope(key)),
        ):
            with manager:
                lease = manager.acquire(key, ttl_ms=1000).lease
                assert lease is not None and lease.fencing_scope == scope
                assert manager.restore(key, "t", ttl_ms=1000).fencing_scope == scope
    else:

        async def main() -> None:
            for manager, scope in (
                (AsyncLeaseManager(AsyncSqliteBackend(sync=sqlite)), expected),
                (AsyncLeaseManager(AsyncMemoryBackend(sync=memory)), memory.fencing_scope(key)),
            ):
                async with manager:
                    lease = (await manager.acquire(key, ttl_ms=1000)).lease
                    assert lease is not None and lease.fencing_scope == scope
                    assert manager.restore(key, "t", ttl_ms=1000).fencing_scope == scope

        asyncio.run(main())
    assert memory.fencing_scope(key) != MemoryBackend().fencing_scope(key)
    assert memory.fencing_scope(key).endswith(":{a%7Bb%7D%25c}:fence")


# --- the migration of a record of the earlier shape (a bare key) ---------------------------------


@attrs.frozen
class ScopedLease:
    """What fencing sees of a lease of this library: key, scope, owner token, fencing token."""

    key: str
    fencing_scope: str | None
    owner_token: str = attrs.field(repr=False)
    fencing_token: int | None


A1 = ScopedLease("orders", "appA:{orders}:fence", "owner-a-secret-1", 7)
A2 = ScopedLease("orders", "appA:{orders}:fence", "owner-a-secret-2", 8)
B1 = ScopedLease("orders", "appB:{orders}:fence", "owner-b-secret-1", 9)
UNSCOPED = ScopedLease("orders", None, "owner-u-secret-1", 10)
# a key that looks like appA's scope, under another prefix
LOOKALIKE = ScopedLease(
    "appA:{orders}:fence", "appB:{appA:%7Borders%7D:fence}:fence", "owner-l-secret", 11
)


def test_decide_migrates_a_bare_key_to_the_scope() -> None:
    """A bare key on record (the earlier shape) matches a lease of that key, which records its
    scope; from then on the same key of another counter and a lease without a scope are refused.
    A key shaped like a scope never matches as a bare key."""
    access_a = coerce_access(A1)
    assert access_a == FencingAccess(7, access_a.fingerprint, "appA:{orders}:fence", "orders")
    assert coerce_access(UNSCOPED).lease_key == "orders"
    assert coerce_access(UNSCOPED).legacy_key is None
    assert coerce_access(LOOKALIKE).legacy_key is None
    old = FenceState(5, None, "orders")
    migrated = decide(old, access_a)
    assert migrated == FenceState(7, access_a.fingerprint, "appA:{orders}:fence")
    assert decide(migrated, coerce_access(B1)) == "key"
    assert decide(migrated, coerce_access(UNSCOPED)) == "key"
    assert decide(migrated, coerce_access(A2)) == FenceState(
        8, coerce_access(A2).fingerprint, "appA:{orders}:fence"
    )
    assert decide(migrated, FencingAccess(7)) == migrated  # a bare int keeps the record
    assert decide(FenceState(5, None, "orders"), coerce_access(UNSCOPED)) == FenceState(
        10, coerce_access(UNSCOPED).fingerprint, "orders"
    )
    assert decide(FenceState(5, None, "appA:{orders}:fence"), coerce_access(LOOKALIKE)) == "key"
    scope_shaped = FenceState(5, None, "x:{y}:fence")  # a bare key that looks like a scope
    lease_xy = ScopedLease("x:{y}:fence", "p:{x:%7By%7D:fence}:fence", "owner-x", 6)
    assert decide(scope_shaped, coerce_access(lease_xy)) == "key"  # fails closed


def test_sqlite_guard_migrates_a_bare_key(conn: sqlite3.Connection) -> None:
    accept, recorded = sqlite_guard(conn)
    conn.execute(
        "INSERT INTO fencedlease_guard (resource, fencing_token, lease_key) VALUES (?, 5, ?)",
        (RESOURCE, "orders"),
    )
    check_migration(accept, recorded)


def test_sqlite_lease_key_column_migrates_a_bare_key(conn: sqlite3.Connection) -> None:
    accept, recorded = sqlite_rows(conn)
    conn.execute("UPDATE t SET fencing_token = 5, lease_key = 'orders' WHERE id = 1")
    check_migration(accept, recorded)


def test_sqlite_stores_refuse_a_key_shaped_like_the_recorded_scope(
    conn: sqlite3.Connection,
) -> None:
    for accept, _recorded in (sqlite_guard(conn), sqlite_rows(conn), memory_resource()):
        assert accept(A1) == 7
        with pytest.raises(LeaseKeyMismatchError) as info:
            accept(LOOKALIKE)
        assert (info.value.lease_key, info.value.presented_key) == (
            "appA:{orders}:fence",
            "appB:{appA:%7Borders%7D:fence}:fence",
        )


def check_migration(accept: Callable[[Any], int], recorded: Callable[[], Any]) -> None:
    """A store holding the bare key "orders" at token 5 (the earlier shape): appA's lease of the
    key is accepted and the scope recorded in its place; then appB's lease and an unscoped lease
    of the same key are refused, appA's next lease accepted."""
    assert recorded() == "orders"
    assert accept(A1) == 7
    assert recorded() == "appA:{orders}:fence"
    for other in (B1, UNSCOPED):
        with pytest.raises(LeaseKeyMismatchError) as info:
            accept(other)
        assert (info.value.lease_key, info.value.presented_key) == (
            "appA:{orders}:fence",
            other.fencing_scope or other.key,
        )
        assert other.owner_token not in str(info.value)
    assert accept(A2) == 8
    assert recorded() == "appA:{orders}:fence"


# --- every store against the rule, over leases of several counters and a record of either shape --

OTHER = ScopedLease("other", "appA:{other}:fence", "owner-o-secret", 1)
MIXED = (A1, A2, B1, UNSCOPED, LOOKALIKE, OTHER)
# what a store may hold before the sequence: nothing, a bare key (the earlier shape), a scope
INITIAL = (None, "orders", "appA:{orders}:fence", "appA:{orders}:fence-not-a-scope")
Step = tuple[int | None, int]  # (index into MIXED, or None for a bare int; token)

steps_strategy = st.lists(
    st.tuples(st.none() | st.integers(0, len(MIXED) - 1), st.integers(1, 9)), max_size=12
)


def check_against_rule(
    accept: Callable[[Any], int],
    recorded: Callable[[], Any],
    initial: str | None,
    steps: list[Step],
    *,
    fingerprints: bool = True,
) -> None:
    """Present ``steps`` to a store holding ``initial`` at token 5 (already loaded): each access is
    accepted or refused as :func:`decide` says (``fingerprints=False`` for a store that keeps
    none), a counter refusal is a LeaseKeyMismatchError naming the record, and the record after
    each step is the rule's."""
    state = None if initial is None else FenceState(5, None, initial)
    for who, token in steps:
        presented: Any = token if who is None else attrs.evolve(MIXED[who], fencing_token=token)
        access = coerce_access(presented)
        if not fingerprints:
            access = attrs.evolve(access, fingerprint=None)
        outcome = decide(state, access)
        if isinstance(outcome, FenceState):
            assert accept(presented) == token, (state, presented)
            state = outcome
        elif outcome == "key":
            assert state is not None
            with pytest.raises(LeaseKeyMismatchError) as info:
                accept(presented)
            assert (info.value.lease_key, info.value.presented_key) == (
                state.lease_key,
                access.lease_key,
            )
        else:
            with pytest.raises(StaleTokenError) as refused:
                accept(presented)
            assert not isinstance(refused.value, LeaseKeyMismatchError), (state, presented)
        assert recorded() == (None if state is None else state.lease_key), (state, presented)


@pytest.mark.parametrize("initial", INITIAL)
@settings(max_examples=30, deadline=None)
@given(steps=steps_strategy)
def test_sqlite_guard_follows_the_rule(initial: str | None, steps: list[Step]) -> None:
    c = sqlite3.connect(":memory:", isolation_level=None)
    try:
        accept, recorded = sqlite_guard(c)
        if initial is not None:
            c.execute(
                "INSERT INTO fencedlease_guard (resource, fencing_token, lease_key)"
                " VALUES (?, 5, ?)",
                (RESOURCE, initial),
            )
        check_against_rule(accept, recorded, initial, steps)
    finally:
        c.close()


@pytest.mark.parametrize("initial", INITIAL)
@settings(max_examples=30, deadline=None)
@given(steps=steps_strategy)
def test_sqlite_lease_key_column_follows_the_rule(initial: str | None, steps: list[Step]) -> None:
    c = sqlite3.connect(":memory:", isolation_level=None)
    try:
        accept, recorded = sqlite_rows(c)
        if initial is not None:
            c.execute("UPDATE t SET fencing_token = 5, lease_key = ? WHERE id = 1", (initial,))
        check_against_rule(accept, recorded, initial, steps, fingerprints=False)
    finally:
        c.close()


@settings(max_examples=60, deadline=None)
@given(steps=steps_strategy)
def test_fenced_resource_follows_the_rule(steps: list[Step]) -> None:
    check_against_rule(*memory_resource(), None, steps)


class _NoScope:
    """A backend of one's own that names no counter: MemoryBackend's methods, no fencing_scope."""

    def __init__(self, scope: object = None) -> None:
        self._inner = MemoryBackend()
        self._scope = scope
        for name in ("acquire", "renew", "renew_many", "release", "inspect", "force_release"):
            setattr(self, name, getattr(self._inner, name))

    def close(self) -> None:
        self._inner.close()


class _BadScope(_NoScope):
    def fencing_scope(self, key: str) -> object:
        return self._scope


def test_a_backend_without_fencing_scope_gives_leases_none_and_stores_use_the_key() -> None:
    with LeaseManager(_NoScope()) as manager:  # type: ignore[arg-type]
        lease = manager.acquire(KEY, ttl_ms=1000).lease
        assert lease is not None and lease.fencing_scope is None
        assert manager.restore(KEY, "t", ttl_ms=1000).fencing_scope is None
        res = FencedResource(RESOURCE)
        assert res.accept(lease) == 1
        assert res.lease_key == KEY
        other = FencedResource(RESOURCE)
        other.accept(A1)
        with pytest.raises(LeaseKeyMismatchError) as info:
            other.accept(lease)  # a lease without a scope does not match a recorded scope
        assert (info.value.lease_key, info.value.presented_key) == ("appA:{orders}:fence", KEY)
        # A bare key on record is the earlier shape: the first scoped lease of that key claims it
        # (docs/fencing.md, "Records of the earlier shape").
        assert res.accept(A1) == 7
        assert res.lease_key == "appA:{orders}:fence"


@pytest.mark.parametrize("scope", ["", 7])
def test_a_backend_naming_its_counter_badly_is_a_backend_error(scope: object) -> None:
    with LeaseManager(_BadScope(scope)) as manager:  # type: ignore[arg-type]
        with pytest.raises(BackendError) as info:
            manager.acquire(KEY, ttl_ms=1000)
        assert str(info.value) == (
            f"_BadScope.fencing_scope returned {type(scope).__name__}, not a non-empty str"
        )
        assert info.value.__cause__ is None
        assert manager.inspect(KEY) is None  # nothing was sent
