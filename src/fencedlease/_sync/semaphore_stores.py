"""Where a semaphore's slots live, one store per backend kind (sync face); the adapter that lets
the lease machinery (acquire loop, renewer, loss rules) run slots as leases is
`fencedlease._sync.slot_backend.SlotBackend`.

A semaphore ``name`` with ``limit`` N has at most N live *slots*; each slot is a lease of its own
(owner token, fencing token, deadline), so every rule of single leases applies to it unchanged:
fail fast or a bounded wait, background renewal, loss by a refused renewal or by the deadline.

The store's steps, each atomic:

- ``acquire(name, owner, ttl_ms, limit)``: drop the slots whose deadline has come, then, if the
  owner holds a live slot, move its deadline (the same token: a retried acquire); else, with fewer
  than ``limit`` live slots, grant one with the next token of the name's counter (one counter per
  semaphore name, incremented in the same step); else report the milliseconds until the first
  slot expires. The limit is the caller's: the store keeps no limit, each acquire compares the
  live slots with its own (callers that disagree are each held to their own number, so the
  semaphore never holds more slots than the largest limit in use).
- ``renew_many(items)``: for each ``(name, owner, ttl_ms)``, move the deadline of a live slot;
  its token, or 0 when the slot is gone or expired.
- ``release(name, owner)``: drop the owner's slot; whether it was live.
- ``count(name)``: the live slots.
- ``clear(name)``: delete every slot, whoever holds it (the counter is kept); whether one was live.

A slot is live while ``now < deadline``. Redis: a sorted set scored by deadline (server ``TIME``,
ms) and a hash of tokens, both with a TTL up to the latest deadline (``semaphore_*.lua``). Memory:
the backend's clock (a [`FakeClock`][fencedlease.testing.FakeClock] drives it). SQLite: two
tables in the backend's file, on its wall clock, one transaction per step.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Sequence
from typing import Final, Protocol

from fencedlease._core.backend import RenewItem
from fencedlease._core.errors import BackendError, ValidationError
from fencedlease._core.protocol import MAX_FENCING_TOKEN, AcquireReply
from fencedlease._redis.keys import semaphore_keys
from fencedlease.backends._clock import clock_ms
from fencedlease.backends.memory import MemoryBackend
from fencedlease.backends.sqlite import SqliteBackend, _stored_token

from .redis_backend import RedisBackend
from .redis_slots import RedisSlots

__all__ = [
    "MemorySlots",
    "SlotStore",
    "SqliteSlots",
    "scope_of",
    "slot_store_for",
]


def scope_of(prefix: str, name: str) -> str:
    """The name of a semaphore's counter, ``<prefix>:{<escaped name>}:semaphore:fence``."""
    return semaphore_keys(prefix, name)[2]


class SlotStore(Protocol):
    """The semaphore steps of one backend (see the module docstring); every method atomic."""

    def fencing_scope(self, name: str) -> str: ...

    def acquire(self, name: str, owner_token: str, ttl_ms: int, limit: int) -> AcquireReply: ...

    def renew_many(self, items: Sequence[RenewItem]) -> list[int | BaseException]: ...

    def release(self, name: str, owner_token: str) -> bool: ...

    def count(self, name: str) -> int: ...

    def clear(self, name: str) -> bool: ...


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
                token = _stored_token(row[0], f"{what}: the slot's fencing_token")
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
            last = 0 if counter is None else _stored_token(counter[0], f"{what}: the counter", 0)
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
                    token = _stored_token(row[0], f"semaphore renew {name!r}: the slot's token")
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

    def release(self, name: str, owner_token: str) -> bool:
        backend = self._backend
        with backend._transaction(f"semaphore release {name!r}") as conn:
            now = clock_ms(backend._clock.time())[0]
            live = conn.execute(
                "DELETE FROM fencedlease_semaphore_slots WHERE prefix = ? AND name = ?"
                " AND owner_token = ? AND expires_ms > ?",
                (backend.prefix, name, owner_token, now),
            ).rowcount
            conn.execute(  # an expired slot of the owner's goes too (it is gone anyway)
                "DELETE FROM fencedlease_semaphore_slots"
                " WHERE prefix = ? AND name = ? AND owner_token = ?",
                (backend.prefix, name, owner_token),
            )
            return live == 1

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
        backend = self._backend
        with backend._transaction(f"semaphore clear {name!r}") as conn:
            now = clock_ms(backend._clock.time())[0]
            live = conn.execute(
                "DELETE FROM fencedlease_semaphore_slots"
                " WHERE prefix = ? AND name = ? AND expires_ms > ?",
                (backend.prefix, name, now),
            ).rowcount
            conn.execute(
                "DELETE FROM fencedlease_semaphore_slots WHERE prefix = ? AND name = ?",
                (backend.prefix, name),
            )
            return live > 0


def slot_store_for(backend: object) -> SlotStore:
    """The slot store beside ``backend`` (the manager's).

    Raises:
        ValidationError: a backend with no semaphore store (only the library's Redis, memory and
            SQLite backends have one); argument ``client``, the manager's.
    """
    if isinstance(backend, RedisBackend):
        return RedisSlots(backend)
    if isinstance(backend, MemoryBackend):
        return MemorySlots(backend)
    if isinstance(backend, SqliteBackend):
        return SqliteSlots(backend)
    raise ValidationError(
        "client",
        f"semaphores need a RedisBackend, MemoryBackend or SqliteBackend; the manager's backend"
        f" is a {type(backend).__name__}",
    )
