"""The slot stores of the backends in this host (memory and SQLite): each step of
`fencedlease._async.semaphore_stores` (the same steps, the same replies as Redis's scripts) as one
plain call, shared by both faces. `fencedlease._async.semaphore_stores.AsyncLocalSlots` runs them
where the backend runs its own operations: inline, or on a worker thread for the asyncio face's
SQLite.

Memory: the backend's clock (a [`FakeClock`][fencedlease.testing.FakeClock] drives it). SQLite:
two tables in the backend's file, on its wall clock, one transaction per step.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Sequence
from typing import Final

from fencedlease._core.backend import RenewItem
from fencedlease._core.errors import BackendError
from fencedlease._core.protocol import MAX_FENCING_TOKEN, AcquireReply
from fencedlease._redis.keys import semaphore_keys

from ._clock import clock_ms
from ._sqlite_file import stored_token
from .memory import MemoryBackend
from .sqlite import SqliteBackend

__all__ = ["MemorySlots", "SlotSteps", "SqliteSlots", "scope_of"]


def scope_of(prefix: str, name: str) -> str:
    """The name of a semaphore's counter, ``<prefix>:{<escaped name>}:semaphore:fence``."""
    return semaphore_keys(prefix, name)[2]


# -- memory ----------------------------------------------------------------------------------


class _MemoryState:
    """The slots kept for one `MemoryBackend`: name -> owner -> (token, expiry ms)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.slots: dict[str, dict[str, tuple[int, int]]] = {}
        self.counters: dict[str, int] = {}


_MEMORY: weakref.WeakKeyDictionary[MemoryBackend, _MemoryState] = weakref.WeakKeyDictionary()
_MEMORY_LOCK = threading.Lock()


class MemorySlots:
    """Slots beside a [`MemoryBackend`][fencedlease.MemoryBackend]'s leases, on its clock; every
    store made for one backend object shares them (and they live as long as it does)."""

    def __init__(self, backend: MemoryBackend) -> None:
        with _MEMORY_LOCK:
            state = _MEMORY.get(backend)
            if state is None:
                state = _MEMORY[backend] = _MemoryState()
        self._state = state
        self._backend = backend
        self._clock = backend._clock

    def fencing_scope(self, name: str) -> str:
        return scope_of(self._backend._scope_prefix, name)

    def _live(self, name: str, now_ms: int) -> dict[str, tuple[int, int]]:
        slots = self._state.slots.setdefault(name, {})
        for owner in [o for o, (_, expires) in slots.items() if now_ms >= expires]:
            del slots[owner]
        return slots

    def acquire(self, name: str, owner_token: str, ttl_ms: int, limit: int) -> AcquireReply:
        state = self._state
        with state.lock:
            now, start = clock_ms(self._clock.monotonic())
            slots = self._live(name, now)
            held = slots.get(owner_token)
            if held is not None:
                slots[owner_token] = (held[0], start + ttl_ms)
                return AcquireReply(True, held[0], ttl_ms, retried=True)
            if len(slots) >= limit:
                return AcquireReply(False, 0, min(e for _, e in slots.values()) - now)
            last = state.counters.get(name, 0)
            if last >= MAX_FENCING_TOKEN:
                raise BackendError(
                    f"semaphore acquire {name!r}: the fencing counter is at 2**63-1, the largest"
                    " token"
                )
            state.counters[name] = last + 1
            slots[owner_token] = (last + 1, start + ttl_ms)
            return AcquireReply(True, last + 1, ttl_ms)

    def renew_many(self, items: Sequence[RenewItem]) -> list[int | BaseException]:
        results: list[int | BaseException] = []
        with self._state.lock:
            now, start = clock_ms(self._clock.monotonic())
            for name, owner_token, ttl_ms in items:
                slots = self._live(name, now)
                held = slots.get(owner_token)
                if held is None:
                    results.append(0)
                    continue
                slots[owner_token] = (held[0], start + ttl_ms)
                results.append(held[0])
        return results

    def release(self, name: str, owner_token: str) -> bool:
        with self._state.lock:
            slots = self._live(name, clock_ms(self._clock.monotonic())[0])
            return slots.pop(owner_token, None) is not None

    def count(self, name: str) -> int:
        with self._state.lock:
            return len(self._live(name, clock_ms(self._clock.monotonic())[0]))

    def clear(self, name: str) -> bool:
        with self._state.lock:
            live = self._live(name, clock_ms(self._clock.monotonic())[0])
            self._state.slots.pop(name, None)
            return bool(live)


# -- SQLite ----------------------------------------------------------------------------------

_SQLITE_SCHEMA: Final = (
    """CREATE TABLE IF NOT EXISTS fencedlease_semaphore_slots (
        prefix TEXT NOT NULL,
        name TEXT NOT NULL,
        owner_token TEXT NOT NULL,
        fencing_token INTEGER NOT NULL,
        expires_ms INTEGER NOT NULL,
        PRIMARY KEY (prefix, name, owner_token)
    ) WITHOUT ROWID""",
    """CREATE TABLE IF NOT EXISTS fencedlease_semaphore_fences (
        prefix TEXT NOT NULL,
        name TEXT NOT NULL,
        last_token INTEGER NOT NULL,
        PRIMARY KEY (prefix, name)
    ) WITHOUT ROWID""",
)


class SqliteSlots:
    """Slots in a [`SqliteBackend`][fencedlease.SqliteBackend]'s file (tables
    ``fencedlease_semaphore_slots`` and ``fencedlease_semaphore_fences``, made on first use), on
    its wall clock, each step one ``BEGIN IMMEDIATE`` transaction.

    Raises:
        BackendError: the tables cannot be made (the database is busy, closed or read-only).
    """

    def __init__(self, backend: SqliteBackend) -> None:
        self._backend = backend
        with backend._transaction("set up semaphores") as conn:
            for statement in _SQLITE_SCHEMA:
                conn.execute(statement)

    def fencing_scope(self, name: str) -> str:
        return scope_of(self._backend.prefix, name)

    def acquire(self, name: str, owner_token: str, ttl_ms: int, limit: int) -> AcquireReply:
        backend, prefix = self._backend, self._backend.prefix
        what = f"semaphore acquire {name!r}"
        with backend._transaction(what) as conn:
            now, start = clock_ms(backend._clock.time())
            conn.execute(
                "DELETE FROM fencedlease_semaphore_slots"
                " WHERE prefix = ? AND name = ? AND expires_ms <= ?",
                (prefix, name, now),
            )
            row = conn.execute(
                "SELECT fencing_token FROM fencedlease_semaphore_slots"
                " WHERE prefix = ? AND name = ? AND owner_token = ?",
                (prefix, name, owner_token),
            ).fetchone()
            if row is not None:
                token = stored_token(row[0], f"{what}: the slot's fencing_token")
                conn.execute(
                    "UPDATE fencedlease_semaphore_slots SET expires_ms = ?"
                    " WHERE prefix = ? AND name = ? AND owner_token = ?",
                    (start + ttl_ms, prefix, name, owner_token),
                )
                return AcquireReply(True, token, ttl_ms, retried=True)
            live, first = conn.execute(
                "SELECT COUNT(*), MIN(expires_ms) FROM fencedlease_semaphore_slots"
                " WHERE prefix = ? AND name = ?",
                (prefix, name),
            ).fetchone()
            if live >= limit:
                return AcquireReply(False, 0, int(first) - now)
            counter = conn.execute(
                "SELECT last_token FROM fencedlease_semaphore_fences WHERE prefix = ? AND name = ?",
                (prefix, name),
            ).fetchone()
            last = 0 if counter is None else stored_token(counter[0], f"{what}: the counter", 0)
            if last == MAX_FENCING_TOKEN:
                raise BackendError(f"{what}: the counter is at 2**63-1, the largest fencing token")
            conn.execute(
                "INSERT OR REPLACE INTO fencedlease_semaphore_fences (prefix, name, last_token)"
                " VALUES (?, ?, ?)",
                (prefix, name, last + 1),
            )
            conn.execute(
                "INSERT INTO fencedlease_semaphore_slots"
                " (prefix, name, owner_token, fencing_token, expires_ms) VALUES (?, ?, ?, ?, ?)",
                (prefix, name, owner_token, last + 1, start + ttl_ms),
            )
            return AcquireReply(True, last + 1, ttl_ms)

    def renew_many(self, items: Sequence[RenewItem]) -> list[int | BaseException]:
        backend, prefix = self._backend, self._backend.prefix
        results: list[int | BaseException] = []
        with backend._transaction(f"semaphore renew {len(items)} slots") as conn:
            now, start = clock_ms(backend._clock.time())
            for name, owner_token, ttl_ms in items:
                row = conn.execute(
                    "SELECT fencing_token FROM fencedlease_semaphore_slots WHERE prefix = ?"
                    " AND name = ? AND owner_token = ? AND expires_ms > ?",
                    (prefix, name, owner_token, now),
                ).fetchone()
                if row is None:
                    results.append(0)
                    continue
                try:
                    token = stored_token(row[0], f"semaphore renew {name!r}: the slot's token")
                except BackendError as exc:  # a malformed row fails its own item only
                    results.append(exc)
                    continue
                conn.execute(
                    "UPDATE fencedlease_semaphore_slots SET expires_ms = ?"
                    " WHERE prefix = ? AND name = ? AND owner_token = ?",
                    (start + ttl_ms, prefix, name, owner_token),
                )
                results.append(token)
        return results

    def _drop(self, what: str, name: str, owner_token: str | None) -> int:
        """Delete ``name``'s slots, ``owner_token``'s or (None) every one, in one transaction; how
        many of them were live. An expired one goes too: it is gone as far as anyone can tell."""
        backend = self._backend
        whose = (backend.prefix, name, owner_token, owner_token)  # a None owner matches every slot
        with backend._transaction(what) as conn:
            now = clock_ms(backend._clock.time())[0]
            live = conn.execute(
                "DELETE FROM fencedlease_semaphore_slots WHERE prefix = ? AND name = ?"
                " AND (? IS NULL OR owner_token = ?) AND expires_ms > ?",
                (*whose, now),
            ).rowcount
            conn.execute(
                "DELETE FROM fencedlease_semaphore_slots WHERE prefix = ? AND name = ?"
                " AND (? IS NULL OR owner_token = ?)",
                whose,
            )
        return int(live)

    def release(self, name: str, owner_token: str) -> bool:
        return self._drop(f"semaphore release {name!r}", name, owner_token) == 1

    def count(self, name: str) -> int:
        backend = self._backend
        with backend._transaction(f"semaphore count {name!r}", write=False) as conn:
            row = conn.execute(
                "SELECT COUNT(*) FROM fencedlease_semaphore_slots"
                " WHERE prefix = ? AND name = ? AND expires_ms > ?",
                (backend.prefix, name, clock_ms(backend._clock.time())[0]),
            ).fetchone()
        return int(row[0])

    def clear(self, name: str) -> bool:
        return self._drop(f"semaphore clear {name!r}", name, None) > 0


SlotSteps = MemorySlots | SqliteSlots
"""The steps of a store in this host, either kind."""
