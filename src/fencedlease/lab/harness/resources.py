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
    PostgreSQL DSN); ``name`` is the fenced resource's name (the guard row, the Redis key)."""

    kind: ResourceKind
    target: str
    name: str = "check-counter"


class CounterStore(Protocol):
    """One process's handle on the counter. ``read``/``write`` fence with ``lease`` when told;
    both raise [`StaleTokenError`][fencedlease.StaleTokenError] when refused and
    [`BackendError`][fencedlease.BackendError] when the store fails (the write's effect is then
    unknown)."""

    def read(self, lease: Lease, *, fenced: bool) -> int: ...

    def write(self, value: int, lease: Lease, *, fenced: bool) -> None: ...

    def final(self) -> int: ...

    def close(self) -> None: ...


def _prepare_sql(conn: Any, placeholder: str, value_type: str, name: str) -> None:
    """Recreate the counter table at 0 on ``conn`` (a sqlite3 or psycopg connection outside a
    transaction; ``placeholder`` its paramstyle's, ``value_type`` the counter column's SQL type),
    create the guard table if needed and clear the fence of ``name``."""
    conn.execute(f"DROP TABLE IF EXISTS {COUNTER_TABLE}")
    conn.execute(
        f"CREATE TABLE {COUNTER_TABLE} (id INTEGER PRIMARY KEY, value {value_type} NOT NULL)"
    )
    conn.execute(
        f"INSERT INTO {COUNTER_TABLE} (id, value) VALUES ({placeholder}, 0)",  # noqa: S608
        (_ROW_ID,),
    )
    db.create_guard_table(conn)
    conn.execute(
        f"DELETE FROM {db.DEFAULT_GUARD_TABLE} WHERE resource = {placeholder}",  # noqa: S608
        (name,),
    )


class _SqliteStore:
    """The counter in an SQLite file; each access is one ``BEGIN IMMEDIATE`` transaction."""

    def __init__(self, spec: ResourceSpec) -> None:
        self._name = spec.name
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
        _prepare_sql(self._conn, "?", "INTEGER", self._name)

    def read(self, lease: Lease, *, fenced: bool) -> int:
        with self._transaction() as conn:
            if fenced:
                db.fence_guard(conn, self._name, lease)
            return self._select(conn)

    def _select(self, conn: sqlite3.Connection) -> int:
        try:
            row = conn.execute(
                f"SELECT value FROM {COUNTER_TABLE} WHERE id = ?",  # noqa: S608
                (_ROW_ID,),
            ).fetchone()
        except sqlite3.Error as exc:
            raise BackendError(f"sqlite SELECT failed: {exc}") from exc
        return int(row[0])

    def write(self, value: int, lease: Lease, *, fenced: bool) -> None:
        with self._transaction() as conn:
            if fenced:
                db.fence_guard(conn, self._name, lease)
            try:
                conn.execute(f"UPDATE {COUNTER_TABLE} SET value = ? WHERE id = ?", (value, _ROW_ID))  # noqa: S608
            except sqlite3.Error as exc:
                raise BackendError(f"sqlite UPDATE failed: {exc}") from exc

    def final(self) -> int:
        return self._select(self._conn)

    def close(self) -> None:
        self._conn.close()


class _PostgresStore:
    """The counter in PostgreSQL; each access is one transaction, fenced by the guard row."""

    def __init__(self, spec: ResourceSpec) -> None:
        import psycopg  # optional: only for --resource postgres

        self._name = spec.name
        self._psycopg = psycopg
        self._conn = psycopg.connect(spec.target, autocommit=True, connect_timeout=5)

    def _fail(self, exc: Exception) -> BackendError:
        return BackendError(f"postgres: {exc}")

    def prepare(self) -> None:
        _prepare_sql(self._conn, "%s", "BIGINT", self._name)

    def read(self, lease: Lease, *, fenced: bool) -> int:
        try:
            with self._conn.transaction():
                if fenced:
                    db.fence_guard(self._conn, self._name, lease)
                return self._select()
        except self._psycopg.Error as exc:
            raise self._fail(exc) from exc

    def _select(self) -> int:
        row = self._conn.execute(
            f"SELECT value FROM {COUNTER_TABLE} WHERE id = %s",  # noqa: S608
            (_ROW_ID,),
        ).fetchone()
        assert row is not None
        return int(row[0])

    def write(self, value: int, lease: Lease, *, fenced: bool) -> None:
        try:
            with self._conn.transaction():
                if fenced:
                    db.fence_guard(self._conn, self._name, lease)
                self._conn.execute(
                    f"UPDATE {COUNTER_TABLE} SET value = %s WHERE id = %s",  # noqa: S608
                    (value, _ROW_ID),
                )
        except self._psycopg.Error as exc:
            raise self._fail(exc) from exc

    def final(self) -> int:
        return self._select()

    def close(self) -> None:
        self._conn.close()


class _RedisStore:
    """The counter in Redis as a [`RedisFencedResource`][fencedlease.RedisFencedResource] string;
    plain GET/SET unfenced."""

    def __init__(self, spec: ResourceSpec) -> None:
        self._client = redis.Redis.from_url(
            spec.target, socket_timeout=5.0, socket_connect_timeout=5.0
        )
        self._resource = RedisFencedResource(self._client, spec.name)

    def prepare(self) -> None:
        self._client.delete(self._resource.data_key, self._resource.fence_key)
        self._client.set(self._resource.data_key, 0)

    def read(self, lease: Lease, *, fenced: bool) -> int:
        if fenced:
            raw = self._resource.get(lease)
        else:
            try:
                raw = self._client.get(self._resource.data_key)
            except redis.RedisError as exc:
                raise BackendError(f"redis GET failed: {exc}") from exc
        return int(raw or 0)

    def write(self, value: int, lease: Lease, *, fenced: bool) -> None:
        if fenced:
            self._resource.set(value, lease)
            return
        try:
            self._client.set(self._resource.data_key, value)
        except redis.RedisError as exc:
            raise BackendError(f"redis SET failed: {exc}") from exc

    def final(self) -> int:
        return int(self._client.get(self._resource.data_key) or 0)

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
