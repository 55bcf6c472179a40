"""The SQL resources: one counter row per key in SQLite or PostgreSQL, fenced two ways.

- ``sqlite`` / ``postgres``: [`fencedlease.db.fence_guard`][] on the guard row of the key
  (named ``<name>/<key>``) opens each access's transaction; the guard's row lock fences the rest
  of it, reads included, and catches a duplicate grant (the same token from another lease).
- ``sqlite-rows`` / ``postgres-rows``: the counter row fences itself: a read is
  [`fencedlease.db.fenced_read`][] (moves the row's token and returns its value in one
  statement), a write [`fencedlease.db.fenced_update`][]; the row records its counter's scope
  in ``lease_key``. A row compares tokens only, with no fingerprint, so an equal token from
  another lease (a duplicate grant, after the lease counter was rolled back) would be accepted
  non-strict. So a lease's first fenced access of a key is *strict* (the token must be greater
  than the row's), which refuses the duplicate, and its later accesses (the write after its
  read) are not, which lets the lease's own write land: strict fencing for one access per
  token, as [`fencedlease.db.fenced_read`][] advises.

- ``sqlite-strict``: the guard in strict mode (each token accepted once): a lease's first fenced
  access of a key is ``fence_guard(strict=True)``, its later ones (the write after its read) the
  guard not strict, which lets its own write land. Before that write the worker asks for a
  ``recheck``: the strict guard once more with the same token, which a strict store must
  refuse (the checker's rule for strict stores, property ``a``).

Each access is one transaction (SQLite: ``BEGIN IMMEDIATE``); a refusal rolls it back.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator, Sequence
from typing import Any, Final

from fencedlease import BackendError, Lease, StaleTokenError, db, owner_fingerprint

from .resource_spec import COUNTER_TABLE, ResourceSpec, access_key

__all__ = ["SqlConnection", "SqlCounterStore", "ensure_row", "open_sql_store", "select_counter"]

_ROWS_LEASE_KEY: Final = "lease_key"


class SqlConnection:
    """One connection to the SQL resource of ``spec`` (sqlite3 or psycopg), with its
    placeholder and one transaction at a time
    ([`transaction`][fencedlease_lab.harness.resources_sql.SqlConnection.transaction]). Driver
    errors are [`BackendError`][fencedlease.BackendError] with the driver's error in
    ``__cause__``."""

    def __init__(self, spec: ResourceSpec) -> None:
        self.spec = spec
        self._in_transaction = False
        if spec.family == "sqlite":
            self.placeholder = "?"
            self._errors: tuple[type[Exception], ...] = (sqlite3.Error,)
            self.conn: Any = sqlite3.connect(spec.target, timeout=10.0, isolation_level=None)
        else:
            import psycopg  # optional: only for the PostgreSQL resources

            self.placeholder = "%s"
            self._errors = (psycopg.Error,)
            self.conn = self._connect()

    def _connect(self) -> Any:
        import psycopg

        timeout_s = max(1, round(self.spec.timeout_ms / 1000))
        return psycopg.connect(self.spec.target, autocommit=True, connect_timeout=timeout_s)

    def _reopen(self) -> None:
        """A PostgreSQL connection a fault broke is made again before the next access (that
        access's outcome, and only it, was unknown)."""
        if self.spec.family != "sqlite" and self.conn.closed:
            try:
                self.conn = self._connect()
            except self._errors as exc:
                raise BackendError(f"{self.spec.family}: {exc}") from exc

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Any]:
        """One transaction: committed when the block ends, rolled back when it raises."""
        self._reopen()
        self._in_transaction = True
        try:
            if self.spec.family == "sqlite":
                with self._sqlite_transaction() as conn:
                    yield conn
            else:
                with self.conn.transaction():
                    yield self.conn
        except self._errors as exc:
            raise BackendError(f"{self.spec.family}: {exc}") from exc
        finally:
            self._in_transaction = False

    @contextlib.contextmanager
    def _sqlite_transaction(self) -> Iterator[Any]:
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def run(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Execute ``sql`` (``?`` placeholders, rewritten to the driver's) and return its rows
        (none for a statement without a result)."""
        if not self._in_transaction:  # inside one, a new connection would run outside it
            self._reopen()
        try:
            cursor = self.conn.execute(sql.replace("?", self.placeholder), tuple(params))
            return list(cursor.fetchall()) if cursor.description is not None else []
        except self._errors as exc:
            raise BackendError(f"{self.spec.family}: {exc}") from exc

    def close(self) -> None:
        self.conn.close()


def _create_counters(sql: SqlConnection) -> None:
    """Recreate the counter table empty, create the guard table if needed and clear the guard
    rows of the run's resources (``<name>/...``)."""
    sql.run(f"DROP TABLE IF EXISTS {COUNTER_TABLE}")
    sql.run(
        f"CREATE TABLE {COUNTER_TABLE} (key TEXT PRIMARY KEY, value BIGINT NOT NULL,"
        f" fencing_token BIGINT, {_ROWS_LEASE_KEY} TEXT)"
    )
    db.create_guard_table(sql.conn)
    sql.run(
        f"DELETE FROM {db.DEFAULT_GUARD_TABLE} WHERE resource LIKE ? ESCAPE '\\'",  # noqa: S608
        (_like_prefix(sql.spec.name),),
    )


def _fingerprint(lease: Lease) -> str:
    return owner_fingerprint(lease.owner_token)


def _like_prefix(name: str) -> str:
    """A ``LIKE`` pattern (escape ``\\``) matching ``<name>/`` and anything after it."""
    escaped = name.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return escaped + "/%"


def ensure_row(sql: SqlConnection, key: str) -> None:
    sql.run(
        f"INSERT INTO {COUNTER_TABLE} (key, value) VALUES (?, 0) ON CONFLICT (key) DO NOTHING",  # noqa: S608
        (key,),
    )


def select_counter(sql: SqlConnection, key: str) -> int:
    rows = sql.run(f"SELECT value FROM {COUNTER_TABLE} WHERE key = ?", (key,))  # noqa: S608
    return int(rows[0][0])


class SqlCounterStore:
    """The counters of an SQL resource (module docstring); ``rows``: fenced by the counter
    rows themselves, else by the guard table."""

    def __init__(self, spec: ResourceSpec) -> None:
        self.spec = spec
        self.rows = spec.kind.endswith("-rows")
        self.strict = spec.kind.endswith("-strict")
        self.sql = SqlConnection(spec)
        # key -> (token, owner fingerprint) of the lease whose fenced access of it was last
        # accepted here: that lease's next access is not its first (rows and strict only).
        self._admitted: dict[str, tuple[int | None, str]] = {}

    def _first_access(self, lease: Lease, key: str) -> bool:
        return self._admitted.get(key) != (lease.fencing_token, _fingerprint(lease))

    def _row_read(self, lease: Lease, key: str) -> int:
        strict = self._first_access(lease, key)
        found = db.fenced_read(
            self.sql.conn, COUNTER_TABLE, {"key": key}, lease,
            columns=["value"], lease_key_column=_ROWS_LEASE_KEY, strict=strict,
        )  # fmt: skip
        self._admitted[key] = (lease.fencing_token, _fingerprint(lease))
        return int(found[0]["value"])

    def _row_write(self, value: int, lease: Lease, key: str) -> None:
        strict = self._first_access(lease, key)
        db.fenced_update(
            self.sql.conn, COUNTER_TABLE, {"value": value}, {"key": key}, lease,
            lease_key_column=_ROWS_LEASE_KEY, strict=strict,
        )  # fmt: skip
        self._admitted[key] = (lease.fencing_token, _fingerprint(lease))

    def prepare(self) -> None:
        _create_counters(self.sql)

    def guard(self, lease: Lease, key: str) -> None:
        """Fence the open transaction on the guard row of ``key`` (strict kind: strict for the
        lease's first access of ``key``)."""
        strict = self.strict and self._first_access(lease, key)
        db.fence_guard(self.sql.conn, self.spec.resource_name(key), lease, strict=strict)
        if self.strict:
            self._admitted[key] = (lease.fencing_token, _fingerprint(lease))

    def strict_key(self, key: str) -> bool:
        """Whether ``key``'s store accepts each token once (the strict kind)."""
        return self.strict

    def recheck(self, lease: Lease, key: str | None = None) -> bool:
        """The strict guard of ``key`` (the lease's) once more with ``lease``, whose token it
        has accepted already: True when it accepted it again (a strict store must not), False
        when refused; nothing else is done (the transaction is rolled back)."""
        name = access_key(lease, key)
        try:
            with self.sql.transaction():
                db.fence_guard(self.sql.conn, self.spec.resource_name(name), lease, strict=True)
                raise _Undo
        except _Undo:
            return True
        except StaleTokenError:
            return False

    def read(self, lease: Lease, *, fenced: bool, key: str | None = None) -> int:
        name = access_key(lease, key)
        with self.sql.transaction():
            ensure_row(self.sql, name)
            if fenced and self.rows:
                return self._row_read(lease, name)
            if fenced:
                self.guard(lease, name)
            return select_counter(self.sql, name)

    def write(self, value: int, lease: Lease, *, fenced: bool, key: str | None = None) -> None:
        name = access_key(lease, key)
        with self.sql.transaction():
            self._write(value, lease, fenced, name)
            self.also_in_write()

    def also_in_write(self) -> None:
        """What else a write does in its transaction, after the fence and the counter: nothing
        here (the list-append store appends)."""

    def _write(self, value: int, lease: Lease, fenced: bool, name: str) -> None:
        ensure_row(self.sql, name)
        if fenced and self.rows:
            self._row_write(value, lease, name)
            return
        if fenced:
            self.guard(lease, name)
        self.sql.run(
            f"UPDATE {COUNTER_TABLE} SET value = ? WHERE key = ?",  # noqa: S608
            (value, name),
        )

    def finals(self) -> dict[str, int]:
        rows = self.sql.run(f"SELECT key, value FROM {COUNTER_TABLE} ORDER BY key")  # noqa: S608
        return {str(k): int(v) for k, v in rows}

    def close(self) -> None:
        self.sql.close()


class _Undo(Exception):
    """Rolls a recheck's transaction back once the guard accepted."""


def open_sql_store(spec: ResourceSpec) -> SqlCounterStore:
    """The store of an SQL ``spec`` (``sqlite``, ``postgres``, ``*-rows``, ``sqlite-strict``)."""
    return SqlCounterStore(spec)
