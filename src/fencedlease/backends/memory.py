"""Leases in this process's memory: [`MemoryBackend`][fencedlease.MemoryBackend] and its asyncio
twin.

For unit tests and for threads of one process. Nothing is shared with other processes and nothing
survives the process. Expiry is read on the injected clock's ``monotonic()`` (milliseconds, whole),
so a [`FakeClock`][fencedlease.testing.FakeClock] makes it deterministic: a lease acquired with
``ttl_ms=100`` is held while less than 100 ms have passed and free from the 100th millisecond on
(with ``lock_delay_ms=50`` and no release: from the 150th).
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

from fencedlease._core.backend import RenewItem
from fencedlease._core.clock import SYSTEM_CLOCK, Clock
from fencedlease._core.errors import BackendError
from fencedlease._core.protocol import (
    MAX_FENCING_TOKEN,
    AcquireReply,
    GrantExtras,
    InspectReply,
    owner_fingerprint,
)
from fencedlease._core.validate import check_clock, check_key, check_lease_args

from .._redis.keys import fence_key
from ._clock import clock_ms

__all__ = ["AsyncMemoryBackend", "MemoryBackend"]

T = TypeVar("T")


class _Held:
    """One stored lease: its fencing token, owner token (secret), expiry in clock ms, metadata and
    lock-delay (ms past the expiry during which, unreleased, it still blocks the key)."""

    __slots__ = ("expires_ms", "fencing_token", "lock_delay_ms", "metadata", "owner_token")

    def __init__(
        self,
        fencing_token: int,
        owner_token: str,
        expires_ms: int,
        extras: GrantExtras | None = None,
    ) -> None:
        self.fencing_token = fencing_token
        self.owner_token = owner_token
        self.expires_ms = expires_ms
        self.metadata: Mapping[str, str] = {}
        self.lock_delay_ms = 0
        self.store(extras)

    def store(self, extras: GrantExtras | None) -> None:
        """Keep ``extras`` (None: the plain grant's, none)."""
        if extras is not None:
            self.metadata, self.lock_delay_ms = dict(extras.metadata), extras.lock_delay_ms


class MemoryBackend:
    """A [`LeaseBackend`][fencedlease.LeaseBackend] in a dict, per process; thread-safe.

    ``clock``: where expiry is read (its ``monotonic()``, seconds; compared in whole
    milliseconds); tests pass a [`FakeClock`][fencedlease.testing.FakeClock]. Every method runs
    under one lock, so each is atomic. Fencing counters live as long as the backend object and are
    never reset by a release or an expiry. Keys need no prefix: the store is private to this object.

    A key is held while ``now_ms < expires_ms``, as the manager's own deadline is (a lease is lost
    at its deadline, not one millisecond after).

    Raises (every method):
        ValidationError: ``key`` or ``owner_token`` is not a non-empty str, or ``ttl_ms`` is not an
            int in 1..2,147,483,647.
        BackendError: ``acquire`` when the key's counter is at 2**63-1 (no next token exists;
            nothing changed).
    """

    def __init__(self, *, clock: Clock = SYSTEM_CLOCK) -> None:
        check_clock(clock)
        self._clock = clock
        self._lock = threading.Lock()
        self._leases: dict[str, _Held] = {}
        self._counters: dict[str, int] = {}
        # Names this object's counters in fencing scopes: another MemoryBackend counts apart.
        self._scope_prefix = f"memory:{secrets.token_hex(6)}"

    def __repr__(self) -> str:
        with self._lock:
            return f"<MemoryBackend keys={len(self._leases)} counters={len(self._counters)}>"

    def fencing_scope(self, key: str) -> str:
        """The name of ``key``'s fencing counter, given to its leases
        ([`fencing_scope`][fencedlease.Lease.fencing_scope]):
        ``memory:<id>:{<escaped key>}:fence``, ``<id>`` naming this backend object (its
        counters are its own). No I/O."""
        return fence_key(self._scope_prefix, key)

    # The two calls through which a store beside this backend (the semaphore's slots) runs its
    # steps, as it does through the SQLite backends': inline, on both faces (one short lock).

    def _backend(self, operation: str) -> MemoryBackend:
        return self

    @staticmethod
    def _run(fn: Callable[..., T], *args: object) -> T:
        return fn(*args)

    def _live(self, key: str, now_ms: int) -> _Held | None:
        """The unexpired lease on ``key`` (dropping an expired one once its lock-delay is over);
        call with the lock held."""
        held = self._leases.get(key)
        if held is not None and now_ms >= held.expires_ms:
            if now_ms >= held.expires_ms + held.lock_delay_ms:
                del self._leases[key]
            return None
        return held

    def acquire(self, key: str, owner_token: str, ttl_ms: int) -> AcquireReply:
        """Grant ``key`` to ``owner_token`` for ``ttl_ms`` milliseconds if it is free, with the next
        fencing token; if ``owner_token`` holds it already, reset its TTL and return the same token
        (``retried=True``); else change nothing and report the holder's remaining TTL in ms (of
        an expired lease still in its lock-delay: the delay left)."""
        return self.acquire_with_extras(key, owner_token, ttl_ms, None)

    def acquire_with_extras(
        self, key: str, owner_token: str, ttl_ms: int, extras: GrantExtras | None
    ) -> AcquireReply:
        """[`acquire`][fencedlease.MemoryBackend.acquire], the grant storing ``extras`` (its
        metadata and lock-delay; None: none) with the lease (see `fencedlease._core.backend`)."""
        check_lease_args(key, owner_token, ttl_ms)
        with self._lock:
            now, start = clock_ms(self._clock.monotonic())
            held = self._live(key, now)
            ended = self._leases.get(key)
            if held is None and ended is not None:  # expired, unreleased: its lock-delay
                return AcquireReply(False, 0, ended.expires_ms + ended.lock_delay_ms - now)
            if held is None:
                last = self._counters.get(key, 0)
                if last >= MAX_FENCING_TOKEN:
                    raise BackendError(
                        f"acquire {key!r}: the fencing counter is at 2**63-1, the largest token"
                    )
                token = last + 1
                self._counters[key] = token
                self._leases[key] = _Held(token, owner_token, start + ttl_ms, extras)
                return AcquireReply(True, token, ttl_ms)
            if held.owner_token == owner_token:
                held.expires_ms = start + ttl_ms
                held.store(extras)
                return AcquireReply(True, held.fencing_token, ttl_ms, retried=True)
            return AcquireReply(False, 0, held.expires_ms - now)

    def renew(self, key: str, owner_token: str, ttl_ms: int) -> int:
        """Reset the TTL to ``ttl_ms`` ms if ``owner_token`` holds ``key``; return its fencing
        token, else 0. Never recreates an expired or released lease."""
        check_lease_args(key, owner_token, ttl_ms)
        with self._lock:
            return self._renew(key, owner_token, ttl_ms, clock_ms(self._clock.monotonic()))

    def _renew(self, key: str, owner_token: str, ttl_ms: int, reading: tuple[int, int]) -> int:
        now, start = reading
        held = self._live(key, now)
        if held is None or held.owner_token != owner_token:
            return 0
        held.expires_ms = start + ttl_ms
        return held.fencing_token

    def renew_many(self, items: Sequence[RenewItem]) -> list[int | BaseException]:
        """[`renew`][fencedlease.MemoryBackend.renew] for each ``(key, owner_token, ttl_ms)``, all
        at one instant; an invalid item gets its [`ValidationError`][fencedlease.ValidationError] in
        its place."""
        results: list[int | BaseException] = []
        with self._lock:
            reading = clock_ms(self._clock.monotonic())
            for key, owner_token, ttl_ms in items:
                try:
                    check_lease_args(key, owner_token, ttl_ms)
                except ValueError as exc:
                    results.append(exc)
                    continue
                results.append(self._renew(key, owner_token, ttl_ms, reading))
        return results

    def release(self, key: str, owner_token: str) -> bool:
        """Delete the lease on ``key`` if ``owner_token`` holds it; return whether it did. The
        fencing counter is kept."""
        check_key(key)
        check_key(owner_token, "owner_token")
        with self._lock:
            held = self._live(key, clock_ms(self._clock.monotonic())[0])
            if held is None or held.owner_token != owner_token:
                return False
            del self._leases[key]
            return True

    def inspect(self, key: str) -> InspectReply | None:
        """The unexpired lease on ``key`` (token, remaining TTL in ms, owner fingerprint, last
        issued token), or None."""
        check_key(key)
        with self._lock:
            now = clock_ms(self._clock.monotonic())[0]
            held = self._live(key, now)
            if held is None:
                return None
            return InspectReply(
                fencing_token=held.fencing_token,
                ttl_ms=held.expires_ms - now,
                owner_fingerprint=owner_fingerprint(held.owner_token),
                last_issued_token=self._counters.get(key),
                metadata=dict(held.metadata),
            )

    def force_release(self, key: str) -> bool:
        """Delete the lease on ``key`` whoever holds it, and end a lock-delay; return whether an
        unexpired lease existed. The fencing counter is kept."""
        check_key(key)
        with self._lock:
            held = self._live(key, clock_ms(self._clock.monotonic())[0])
            self._leases.pop(key, None)
            return held is not None

    def close(self) -> None:
        """Nothing to release; the leases stay readable (a memory store has no connection)."""


class AsyncMemoryBackend:
    """The asyncio twin of [`MemoryBackend`][fencedlease.MemoryBackend]: the same store, awaited.

    Every method is the sync one run inline: it never blocks (one short lock, no I/O), so it needs
    no thread. ``sync`` is the wrapped [`MemoryBackend`][fencedlease.MemoryBackend]; pass one to
    share its leases between a sync and an async manager in one process.
    """

    def __init__(self, *, clock: Clock = SYSTEM_CLOCK, sync: MemoryBackend | None = None) -> None:
        self.sync = MemoryBackend(clock=clock) if sync is None else sync

    def __repr__(self) -> str:
        return f"<AsyncMemoryBackend of {self.sync!r}>"

    def fencing_scope(self, key: str) -> str:
        """As [`MemoryBackend.fencing_scope`][fencedlease.MemoryBackend.fencing_scope] (the wrapped
        backend's). No I/O."""
        return self.sync.fencing_scope(key)

    @property
    def _scope_prefix(self) -> str:
        return self.sync._scope_prefix

    async def _backend(self, operation: str) -> MemoryBackend:
        return self.sync

    @staticmethod
    async def _run(fn: Callable[..., T], *args: object) -> T:
        return fn(*args)

    async def acquire(self, key: str, owner_token: str, ttl_ms: int) -> AcquireReply:
        """As [`MemoryBackend.acquire`][fencedlease.MemoryBackend.acquire]."""
        return self.sync.acquire(key, owner_token, ttl_ms)

    async def acquire_with_extras(
        self, key: str, owner_token: str, ttl_ms: int, extras: GrantExtras | None
    ) -> AcquireReply:
        """As `MemoryBackend.acquire_with_extras`."""
        return self.sync.acquire_with_extras(key, owner_token, ttl_ms, extras)

    async def renew(self, key: str, owner_token: str, ttl_ms: int) -> int:
        """As [`MemoryBackend.renew`][fencedlease.MemoryBackend.renew]."""
        return self.sync.renew(key, owner_token, ttl_ms)

    async def renew_many(self, items: Sequence[RenewItem]) -> list[int | BaseException]:
        """As [`MemoryBackend.renew_many`][fencedlease.MemoryBackend.renew_many]."""
        return self.sync.renew_many(items)

    async def release(self, key: str, owner_token: str) -> bool:
        """As [`MemoryBackend.release`][fencedlease.MemoryBackend.release]."""
        return self.sync.release(key, owner_token)

    async def inspect(self, key: str) -> InspectReply | None:
        """As [`MemoryBackend.inspect`][fencedlease.MemoryBackend.inspect]."""
        return self.sync.inspect(key)

    async def force_release(self, key: str) -> bool:
        """As [`MemoryBackend.force_release`][fencedlease.MemoryBackend.force_release]."""
        return self.sync.force_release(key)

    async def close(self) -> None:
        """As [`MemoryBackend.close`][fencedlease.MemoryBackend.close]."""
        self.sync.close()
