"""Leases in one SQLite file shared by the processes of one host:
[`SqliteBackend`][fencedlease.SqliteBackend] (its asyncio twin,
[`AsyncSqliteBackend`][fencedlease.backends.AsyncSqliteBackend], runs it on worker threads).

Every operation is one ``BEGIN IMMEDIATE`` transaction: SQLite's write lock serialises it against
every other connection to the file, in this process or another, so each is atomic. The database
runs in WAL mode (readers never block the writer) with ``synchronous=FULL``: a committed fencing
counter survives a power cut, so a token is never issued twice.

Layout: two tables, shared by every prefix (the prefix is a column):

```
fencedlease_leases(prefix, key, fencing_token, owner_token, expires_ms)   -- one row per lease
fencedlease_fences(prefix, key, last_token)     -- the fencing counter; never deleted
fencedlease_grants(prefix, key, fencing_token, metadata, lock_delay_ms)   -- a grant's extras
```

A grant with metadata or a lock-delay has a ``fencedlease_grants`` row, valid only while its
``fencing_token`` is the lease row's (a newer grant replaces it, a release deletes it); an
expired lease row whose grant has ``lock_delay_ms`` keeps the key from being granted until
``expires_ms + lock_delay_ms``.

Time: ``expires_ms`` is wall-clock milliseconds since the epoch, read from ``clock.time()``,
because the wall clock is the only clock two processes share (``time.monotonic`` counts from an
arbitrary point per boot and, on some systems, per process). The consequence: **expiry relies on
the host's clock not jumping.** A clock stepped forward by *n* ms expires every lease *n* ms early
(a second holder can be granted the key while the first still works, and only the fencing token
tells them apart); a clock stepped back keeps leases *n* ms too long. Run NTP in slewing mode (the
default of chrony and systemd-timesyncd), not stepping. The managers' own loss deadlines stay on the
monotonic clock, as for Redis.

Busy database: a connection waits up to ``busy_timeout_ms`` for the write lock (SQLite's busy
handler, plus the wait for this object's own connection lock, within one budget), then the
operation fails with [`BackendError`][fencedlease.BackendError] naming the budget; nothing was
changed.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Final, TypeVar

from fencedlease._core.backend import RenewItem
from fencedlease._core.clock import SYSTEM_CLOCK, Clock
from fencedlease._core.errors import BackendError, ValidationError
from fencedlease._core.protocol import (
    MAX_FENCING_TOKEN,
    AcquireReply,
    GrantExtras,
    InspectReply,
    metadata_json,
    owner_fingerprint,
    stored_metadata,
)
from fencedlease._core.validate import (
    check_clock,
    check_key,
    check_lease_args,
    check_ms,
    check_prefix,
)

from .._redis.keys import fence_key
from ._clock import clock_ms
from ._sqlite_file import DEFAULT_BUSY_TIMEOUT_MS, SqliteFile, check_path, stored_token

__all__ = ["DEFAULT_BUSY_TIMEOUT_MS", "SqliteBackend"]

T = TypeVar("T")


_SCHEMA: Final = (
    """CREATE TABLE IF NOT EXISTS fencedlease_leases (
        prefix TEXT NOT NULL,
        key TEXT NOT NULL,
        fencing_token INTEGER NOT NULL,
        owner_token TEXT NOT NULL,
        expires_ms INTEGER NOT NULL,
        PRIMARY KEY (prefix, key)
    ) WITHOUT ROWID""",
    """CREATE TABLE IF NOT EXISTS fencedlease_fences (
        prefix TEXT NOT NULL,
        key TEXT NOT NULL,
        last_token INTEGER NOT NULL,
        PRIMARY KEY (prefix, key)
    ) WITHOUT ROWID""",
    """CREATE TABLE IF NOT EXISTS fencedlease_grants (
        prefix TEXT NOT NULL,
        key TEXT NOT NULL,
        fencing_token INTEGER NOT NULL,
        metadata TEXT NOT NULL,
        lock_delay_ms INTEGER NOT NULL,
        PRIMARY KEY (prefix, key)
    ) WITHOUT ROWID""",
)


class SqliteBackend:
    """A [`LeaseBackend`][fencedlease.LeaseBackend] in the SQLite file at ``path``; thread-safe.

    ``path``: the database file (created if missing; a local filesystem: SQLite's locks and WAL do
    not work over network filesystems). ``":memory:"`` makes a private database that lives and
    dies with this object (one process, like [`MemoryBackend`][fencedlease.MemoryBackend], but
    through the same SQL). ``prefix``: the namespace; managers with different prefixes share a file
    without meeting. ``clock``: its ``time()`` (seconds since the epoch) dates every expiry; see the
    module docstring for why the wall clock and what that needs of the host. ``busy_timeout_ms``:
    how long one operation may wait for the write lock before it fails.

    One connection per object, used under a lock by every thread; make one backend per process
    (never carry one across ``fork``).

    Raises:
        ValidationError: ``path``, ``prefix``, ``busy_timeout_ms`` (an int in 0..2,147,483,647) or,
            on every method, ``key`` / ``owner_token`` / ``ttl_ms`` out of bounds.
        BackendError: the database cannot be opened or set up, or (on every method) stayed busy
            past ``busy_timeout_ms``, or failed; the ``sqlite3.Error`` is in ``__cause__``.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        prefix: str = "fencedlease",
        clock: Clock = SYSTEM_CLOCK,
        busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS,
    ) -> None:
        self.path = check_path(path)
        self.prefix = check_prefix(prefix)
        self.busy_timeout_ms = check_ms("busy_timeout_ms", busy_timeout_ms, 0)
        check_clock(clock)
        self._clock = clock
        self._file = SqliteFile(self.path, self.busy_timeout_ms)
        try:
            with self._transaction("set up") as conn:
                for statement in _SCHEMA:
                    conn.execute(statement)
        except BaseException:
            self.close()
            raise

    def __repr__(self) -> str:
        return f"<SqliteBackend path={self.path!r} prefix={self.prefix!r}>"

    def fencing_scope(self, key: str) -> str:
        """The name of ``key``'s fencing counter, given to its leases
        ([`fencing_scope`][fencedlease.Lease.fencing_scope]):
        ``<prefix>:{<escaped key>}:fence``, as the Redis backend names it. No I/O."""
        return fence_key(self.prefix, key)

    # The two calls through which a store beside this backend (the semaphore's slots) runs its
    # steps, as it does through the asyncio twin's: here inline, there on a worker thread.

    @property
    def _scope_prefix(self) -> str:
        return self.prefix

    def _backend(self, operation: str) -> SqliteBackend:
        """This backend, open.

        Raises:
            BackendError: it is closed; ``operation`` names the step.
        """
        if self._file.closed:
            raise BackendError(f"{operation}: the SQLite backend is closed")
        return self

    @staticmethod
    def _run(fn: Callable[..., T], *args: object) -> T:
        return fn(*args)

    def _transaction(
        self, operation: str, *, write: bool = True
    ) -> AbstractContextManager[sqlite3.Connection]:
        """The file's transaction (`SqliteFile.transaction`): one ``BEGIN IMMEDIATE`` when
        ``write``, within the busy budget, every failure a BackendError naming ``operation``."""
        return self._file.transaction(operation, write=write)

    def _now(self) -> int:
        return clock_ms(self._clock.time())[0]

    def acquire(self, key: str, owner_token: str, ttl_ms: int) -> AcquireReply:
        """Grant ``key`` to ``owner_token`` for ``ttl_ms`` milliseconds if it is free (or expired,
        past its lock-delay), with the next fencing token; if ``owner_token`` holds it already,
        reset its TTL and return the same token (``retried=True``); else change nothing and report
        the holder's remaining TTL in ms (of an expired lease in its lock-delay: the delay left).
        One transaction."""
        return self.acquire_with_extras(key, owner_token, ttl_ms, None)

    def acquire_with_extras(
        self, key: str, owner_token: str, ttl_ms: int, extras: GrantExtras | None
    ) -> AcquireReply:
        """[`acquire`][fencedlease.SqliteBackend.acquire], the grant storing ``extras`` (its
        metadata and lock-delay; None: none) in the same transaction (see
        `fencedlease._core.backend`)."""
        check_lease_args(key, owner_token, ttl_ms)
        prefix = self.prefix
        with self._transaction(f"acquire {key!r}") as conn:
            now, start = clock_ms(self._clock.time())
            row = conn.execute(
                # the grant row counts only while it is this lease row's grant's
                "SELECT l.fencing_token, l.owner_token, l.expires_ms, g.lock_delay_ms"
                " FROM fencedlease_leases AS l LEFT JOIN fencedlease_grants AS g"
                " ON g.prefix = l.prefix AND g.key = l.key AND g.fencing_token = l.fencing_token"
                " WHERE l.prefix = ? AND l.key = ?",
                (prefix, key),
            ).fetchone()
            if row is not None and now < row[2]:
                if row[1] == owner_token:
                    conn.execute(
                        "UPDATE fencedlease_leases SET expires_ms = ? WHERE prefix = ? AND key = ?",
                        (start + ttl_ms, prefix, key),
                    )
                    token = stored_token(row[0], f"acquire {key!r}: the lease's fencing_token")
                    self._store_extras(conn, key, token, extras)
                    return AcquireReply(True, token, ttl_ms, retried=True)
                return AcquireReply(False, 0, int(row[2]) - now)
            if row is not None and row[3] and now < int(row[2]) + int(row[3]):
                return AcquireReply(False, 0, int(row[2]) + int(row[3]) - now)
            counter = conn.execute(
                "SELECT last_token FROM fencedlease_fences WHERE prefix = ? AND key = ?",
                (prefix, key),
            ).fetchone()
            if counter is None:
                token = 1
            else:
                what = f"acquire {key!r}: the fencing counter (last_token)"
                last = stored_token(counter[0], what, minimum=0)
                if last == MAX_FENCING_TOKEN:
                    raise BackendError(f"{what} is at 2**63-1, the largest fencing token")
                token = last + 1
            conn.execute(
                "INSERT OR REPLACE INTO fencedlease_fences (prefix, key, last_token)"
                " VALUES (?, ?, ?)",
                (prefix, key, token),
            )
            conn.execute(
                "INSERT OR REPLACE INTO fencedlease_leases"
                " (prefix, key, fencing_token, owner_token, expires_ms) VALUES (?, ?, ?, ?, ?)",
                (prefix, key, token, owner_token, start + ttl_ms),
            )
            self._store_extras(conn, key, token, extras)
            return AcquireReply(True, token, ttl_ms)

    def _store_extras(
        self, conn: sqlite3.Connection, key: str, token: int, extras: GrantExtras | None
    ) -> None:
        """Keep the grant row of ``key``'s grant ``token`` (None: the plain grant's, none).

        A plain grant leaves an older grant's row: its token no longer matches the lease's, so it
        counts for nothing, and the next grant with extras replaces it."""
        if extras is not None:
            conn.execute(
                "INSERT OR REPLACE INTO fencedlease_grants"
                " (prefix, key, fencing_token, metadata, lock_delay_ms) VALUES (?, ?, ?, ?, ?)",
                (self.prefix, key, token, metadata_json(extras.metadata), extras.lock_delay_ms),
            )

    def _renew(self, conn: sqlite3.Connection, key: str, owner_token: str, ttl_ms: int) -> int:
        now, start = clock_ms(self._clock.time())
        row = conn.execute(
            "SELECT fencing_token FROM fencedlease_leases"
            " WHERE prefix = ? AND key = ? AND owner_token = ? AND expires_ms > ?",
            (self.prefix, key, owner_token, now),
        ).fetchone()
        if row is None:
            return 0
        token = stored_token(row[0], f"renew {key!r}: the lease's fencing_token")
        conn.execute(
            "UPDATE fencedlease_leases SET expires_ms = ? WHERE prefix = ? AND key = ?",
            (start + ttl_ms, self.prefix, key),
        )
        return token

    def renew(self, key: str, owner_token: str, ttl_ms: int) -> int:
        """Reset the TTL to ``ttl_ms`` ms if ``owner_token`` holds ``key``; return its fencing
        token, else 0. Never recreates an expired or released lease."""
        check_lease_args(key, owner_token, ttl_ms)
        with self._transaction(f"renew {key!r}") as conn:
            return self._renew(conn, key, owner_token, ttl_ms)

    def renew_many(self, items: Sequence[RenewItem]) -> list[int | BaseException]:
        """[`renew`][fencedlease.SqliteBackend.renew] for each ``(key, owner_token, ttl_ms)`` in one
        transaction. An invalid item gets its [`ValidationError`][fencedlease.ValidationError] in
        its place; a failed transaction (busy past the budget) raises
        [`BackendError`][fencedlease.BackendError] and renews nothing."""
        results: list[int | BaseException] = []
        valid: list[tuple[int, RenewItem]] = []
        for index, item in enumerate(items):
            key, owner_token, ttl_ms = item
            try:
                check_lease_args(key, owner_token, ttl_ms)
            except ValidationError as exc:
                results.append(exc)
                continue
            results.append(0)
            valid.append((index, item))
        if not valid:
            return results
        with self._transaction(f"renew {len(valid)} leases") as conn:
            for index, (key, owner_token, ttl_ms) in valid:
                try:
                    results[index] = self._renew(conn, key, owner_token, ttl_ms)
                except BackendError as exc:  # a malformed row fails its own item only
                    results[index] = exc
        return results

    def release(self, key: str, owner_token: str) -> bool:
        """Delete the lease on ``key`` if ``owner_token`` holds it; return whether it did. The
        fencing counter is kept."""
        check_key(key)
        check_key(owner_token, "owner_token")
        with self._transaction(f"release {key!r}") as conn:
            cursor = conn.execute(
                "DELETE FROM fencedlease_leases"
                " WHERE prefix = ? AND key = ? AND owner_token = ? AND expires_ms > ?",
                (self.prefix, key, owner_token, self._now()),
            )
            if cursor.rowcount != 1:
                return False
            # A release frees the key at once: no lock-delay outlives it.
            conn.execute(
                "DELETE FROM fencedlease_grants WHERE prefix = ? AND key = ?", (self.prefix, key)
            )
            return True

    def inspect(self, key: str) -> InspectReply | None:
        """The unexpired lease on ``key`` (token, remaining TTL in ms, owner fingerprint, last
        issued token), or None. One statement: a consistent snapshot, never waiting for a
        writer."""
        check_key(key)
        with self._transaction(f"inspect {key!r}", write=False) as conn:
            now = self._now()
            row = conn.execute(
                "SELECT l.fencing_token, l.expires_ms, l.owner_token, f.last_token, g.metadata"
                " FROM fencedlease_leases AS l LEFT JOIN fencedlease_fences AS f"
                " ON f.prefix = l.prefix AND f.key = l.key LEFT JOIN fencedlease_grants AS g"
                " ON g.prefix = l.prefix AND g.key = l.key AND g.fencing_token = l.fencing_token"
                " WHERE l.prefix = ? AND l.key = ? AND l.expires_ms > ?",
                (self.prefix, key, now),
            ).fetchone()
        if row is None:
            return None
        return InspectReply(
            fencing_token=stored_token(row[0], f"inspect {key!r}: the lease's fencing_token"),
            ttl_ms=int(row[1]) - now,
            owner_fingerprint=owner_fingerprint(str(row[2])),
            last_issued_token=None
            if row[3] is None
            else stored_token(row[3], f"inspect {key!r}: the fencing counter", minimum=0),
            metadata={} if row[4] is None else stored_metadata(row[4], f"inspect {key!r}"),
        )

    def force_release(self, key: str) -> bool:
        """Delete the lease on ``key`` whoever holds it; return whether an unexpired one existed.
        The fencing counter is kept."""
        check_key(key)
        with self._transaction(f"force_release {key!r}") as conn:
            live = conn.execute(
                "DELETE FROM fencedlease_leases WHERE prefix = ? AND key = ? AND expires_ms > ?",
                (self.prefix, key, self._now()),
            ).rowcount
            # An expired row is gone as far as anyone can tell; tidy it away too, and its grant
            # row (the operator frees the key: a lock-delay ends with it).
            conn.execute(
                "DELETE FROM fencedlease_leases WHERE prefix = ? AND key = ?", (self.prefix, key)
            )
            conn.execute(
                "DELETE FROM fencedlease_grants WHERE prefix = ? AND key = ?", (self.prefix, key)
            )
            return live == 1

    def close(self) -> None:
        """Close the connection (idempotent). Later calls raise
        [`BackendError`][fencedlease.BackendError]. Leases stay in the file until they expire."""
        self._file.close()
