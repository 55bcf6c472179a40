"""Where the workload's counter lives: three storage adapters behind one
[`CounterStore`][fencedlease.lab.harness.resources.CounterStore].

``sqlite`` (a file; the default), ``redis`` (a
[`RedisFencedResource`][fencedlease.RedisFencedResource]) and ``postgres``. The SQL ones fence with
[`fencedlease.db.fence_guard`][] inside each access's transaction, which also refuses a duplicate
token from a different lease; a plain access (``fenced=False``) checks nothing. Each process opens
its own handle with [`open_store`][fencedlease.lab.harness.resources.open_store].
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from typing import Any, Final, Literal, Protocol

import attrs
import redis

from fencedlease import BackendError, Lease, RedisFencedResource, db

__all__ = [
    "COUNTER_TABLE",
    "RESOURCES",
    "CounterStore",
    "ResourceKind",
    "ResourceSpec",
    "open_store",
    "prepare_resource",
    "read_final_counter",
    "read_final_counters",
]

ResourceKind = Literal["sqlite", "redis", "postgres"]

RESOURCES: Final[tuple[ResourceKind, ...]] = ("sqlite", "redis", "postgres")

#: The counter's table in the SQL resources (one row, ``id`` 1).
COUNTER_TABLE: Final = "fencedlease_check_counter"
_ROW_ID: Final = 1


# --- the resource ---------------------------------------------------------------------------


@attrs.frozen
class ResourceSpec:
    """Where the counter lives: ``kind`` and ``target`` (an SQLite path, a Redis URL, a
    PostgreSQL DSN); ``name`` is the fenced resource's name (the guard row, the Redis key).
    ``keys``: the lease keys, one counter each
    ([`slot`][fencedlease.lab.harness.resources.ResourceSpec.slot]); empty: one counter for any
    key."""

    kind: ResourceKind
    target: str
    name: str = "check-counter"
    keys: tuple[str, ...] = ()

    def slot(self, key: str | None) -> tuple[str, int]:
        """The fenced resource's name and the counter's row of lease ``key``: ``name`` and row
        1 for the first key (or any key when ``keys`` is empty), ``<name>:<i>`` and row
        ``i + 1`` for the ``i``-th."""
        index = self.keys.index(key) if key in self.keys else 0
        return (self.name if index == 0 else f"{self.name}:{index}"), index + 1

    def slots(self) -> list[tuple[str, int]]:
        """Every counter's [`slot`][fencedlease.lab.harness.resources.ResourceSpec.slot], in the
        order of ``keys``."""
        return [self.slot(key) for key in self.keys] or [self.slot(None)]


class CounterStore(Protocol):
    """One process's handle on the counter. ``read``/``write`` fence with ``lease`` when told;
    both raise [`StaleTokenError`][fencedlease.StaleTokenError] when refused and
    [`BackendError`][fencedlease.BackendError] when the store fails (the write's effect is then
    unknown)."""

    def read(self, lease: Lease, *, fenced: bool) -> int: ...

    def write(self, value: int, lease: Lease, *, fenced: bool) -> None: ...

    def final(self, row: int = ...) -> int: ...

    def close(self) -> None: ...


def _prepare_sql(conn: Any, placeholder: str, value_type: str, spec: ResourceSpec) -> None:
    """Recreate the counter table at 0 on ``conn`` (a sqlite3 or psycopg connection outside a
    transaction; ``placeholder`` its paramstyle's, ``value_type`` the counter column's SQL type),
    one row per counter of ``spec``, create the guard table if needed and clear their fences."""
    conn.execute(f"DROP TABLE IF EXISTS {COUNTER_TABLE}")
    conn.execute(
        f"CREATE TABLE {COUNTER_TABLE} (id INTEGER PRIMARY KEY, value {value_type} NOT NULL)"
    )
    db.create_guard_table(conn)
    for name, row in spec.slots():
        conn.execute(
            f"INSERT INTO {COUNTER_TABLE} (id, value) VALUES ({placeholder}, 0)",  # noqa: S608
            (row,),
        )
        conn.execute(
            f"DELETE FROM {db.DEFAULT_GUARD_TABLE} WHERE resource = {placeholder}",  # noqa: S608
            (name,),
        )


class _SqliteStore:
    """The counter in an SQLite file; each access is one ``BEGIN IMMEDIATE`` transaction."""

    def __init__(self, spec: ResourceSpec) -> None:
        self._spec = spec
        self._conn = sqlite3.connect(spec.target, timeout=10.0, isolation_level=None)

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        conn = self._conn
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise BackendError(f"sqlite BEGIN failed: {exc}") from exc
        try:
            yield conn
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            raise
        try:
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            raise BackendError(f"sqlite COMMIT failed: {exc}") from exc

    def prepare(self) -> None:
        _prepare_sql(self._conn, "?", "INTEGER", self._spec)

    def read(self, lease: Lease, *, fenced: bool) -> int:
        name, row = self._spec.slot(lease.key)
        with self._transaction() as conn:
            if fenced:
                db.fence_guard(conn, name, lease)
            return self._select(conn, row)

    def _select(self, conn: sqlite3.Connection, row_id: int = _ROW_ID) -> int:
        try:
            row = conn.execute(
                f"SELECT value FROM {COUNTER_TABLE} WHERE id = ?",  # noqa: S608
                (row_id,),
            ).fetchone()
        except sqlite3.Error as exc:
            raise BackendError(f"sqlite SELECT failed: {exc}") from exc
        return int(row[0])

    def write(self, value: int, lease: Lease, *, fenced: bool) -> None:
        name, row = self._spec.slot(lease.key)
        with self._transaction() as conn:
            if fenced:
                db.fence_guard(conn, name, lease)
            try:
                conn.execute(f"UPDATE {COUNTER_TABLE} SET value = ? WHERE id = ?", (value, row))  # noqa: S608
            except sqlite3.Error as exc:
                raise BackendError(f"sqlite UPDATE failed: {exc}") from exc

    def final(self, row: int = _ROW_ID) -> int:
        return self._select(self._conn, row)

    def close(self) -> None:
        self._conn.close()


class _PostgresStore:
    """The counter in PostgreSQL; each access is one transaction, fenced by the guard row."""

    def __init__(self, spec: ResourceSpec) -> None:
        import psycopg  # optional: only for --resource postgres

        self._spec = spec
        self._psycopg = psycopg
        self._conn = psycopg.connect(spec.target, autocommit=True, connect_timeout=5)

    def _fail(self, exc: Exception) -> BackendError:
        return BackendError(f"postgres: {exc}")

    def prepare(self) -> None:
        _prepare_sql(self._conn, "%s", "BIGINT", self._spec)

    def read(self, lease: Lease, *, fenced: bool) -> int:
        name, row = self._spec.slot(lease.key)
        try:
            with self._conn.transaction():
                if fenced:
                    db.fence_guard(self._conn, name, lease)
                return self._select(row)
        except self._psycopg.Error as exc:
            raise self._fail(exc) from exc

    def _select(self, row_id: int = _ROW_ID) -> int:
        row = self._conn.execute(
            f"SELECT value FROM {COUNTER_TABLE} WHERE id = %s",  # noqa: S608
            (row_id,),
        ).fetchone()
        assert row is not None
        return int(row[0])

    def write(self, value: int, lease: Lease, *, fenced: bool) -> None:
        name, row = self._spec.slot(lease.key)
        try:
            with self._conn.transaction():
                if fenced:
                    db.fence_guard(self._conn, name, lease)
                self._conn.execute(
                    f"UPDATE {COUNTER_TABLE} SET value = %s WHERE id = %s",  # noqa: S608
                    (value, row),
                )
        except self._psycopg.Error as exc:
            raise self._fail(exc) from exc

    def final(self, row: int = _ROW_ID) -> int:
        return self._select(row)

    def close(self) -> None:
        self._conn.close()


class _RedisStore:
    """The counter in Redis as a [`RedisFencedResource`][fencedlease.RedisFencedResource] string;
    plain GET/SET unfenced."""

    def __init__(self, spec: ResourceSpec) -> None:
        self._client = redis.Redis.from_url(
            spec.target, socket_timeout=5.0, socket_connect_timeout=5.0
        )
        self._spec = spec
        # One fenced resource per counter (row number -> resource).
        self._resources = {
            row: RedisFencedResource(self._client, name) for name, row in spec.slots()
        }
        self._resource = self._resources[_ROW_ID]

    def _of(self, lease: Lease) -> RedisFencedResource:
        return self._resources[self._spec.slot(lease.key)[1]]

    def prepare(self) -> None:
        for resource in self._resources.values():
            self._client.delete(resource.data_key, resource.fence_key)
            self._client.set(resource.data_key, 0)

    def read(self, lease: Lease, *, fenced: bool) -> int:
        resource = self._of(lease)
        if fenced:
            raw = resource.get(lease)
        else:
            try:
                raw = self._client.get(resource.data_key)
            except redis.RedisError as exc:
                raise BackendError(f"redis GET failed: {exc}") from exc
        return int(raw or 0)

    def write(self, value: int, lease: Lease, *, fenced: bool) -> None:
        resource = self._of(lease)
        if fenced:
            resource.set(value, lease)
            return
        try:
            self._client.set(resource.data_key, value)
        except redis.RedisError as exc:
            raise BackendError(f"redis SET failed: {exc}") from exc

    def final(self, row: int = _ROW_ID) -> int:
        return int(self._client.get(self._resources[row].data_key) or 0)

    def close(self) -> None:
        self._client.close()


def open_store(spec: ResourceSpec) -> _SqliteStore | _PostgresStore | _RedisStore:
    """A new handle on the counter described by ``spec`` (one per process)."""
    if spec.kind == "sqlite":
        return _SqliteStore(spec)
    if spec.kind == "postgres":
        return _PostgresStore(spec)
    return _RedisStore(spec)


def prepare_resource(spec: ResourceSpec) -> None:
    """Create the counter at 0 and clear the fence of ``spec.name`` (before the workers start)."""
    store = open_store(spec)
    try:
        store.prepare()
    finally:
        store.close()


def read_final_counter(spec: ResourceSpec) -> int:
    """The counter's value, read plainly (after the workers stopped)."""
    store = open_store(spec)
    try:
        return store.final()
    finally:
        store.close()


def read_final_counters(spec: ResourceSpec) -> dict[str, int]:
    """Each lease key's counter (``spec.keys``), read plainly (after the workers stopped)."""
    store = open_store(spec)
    try:
        return {key: store.final(spec.slot(key)[1]) for key in spec.keys}
    finally:
        store.close()
