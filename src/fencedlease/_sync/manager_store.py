# GENERATED from src/fencedlease/_async/manager_store.py by `python scripts/unasync.py`:
# do not edit. Edit that source, then run it again (CI runs it with --check, failing while
# stale).
"""The calls of [`LeaseManager`][fencedlease.LeaseManager] on the store that take no
lease of the manager's: ``restore``, ``inspect``, ``force_release``, and what the manager's acquires
saw of a Redis primary.
"""

from __future__ import annotations

from datetime import datetime

from fencedlease._core.backend import LeaseBackend, fencing_scope_of
from fencedlease._core.clock import Clock
from fencedlease._core.events import EventHook, watch
from fencedlease._core.state import restored_state
from fencedlease._core.validate import check_key
from fencedlease._core.view import LeaseInfo
from fencedlease._redis.replication import PrimaryWatch

from .lease import Lease

__all__ = ["_StoreCalls"]


class _StoreCalls:
    """A base of the manager: its store calls that hold no lease of its own."""

    _backend: LeaseBackend
    _clock: Clock
    _on_event: EventHook | None

    @property
    def backend(self) -> LeaseBackend:
        """The store the leases live in."""
        return self._backend

    @property
    def primary_id(self) -> str | None:
        """The replication id (``master_replid``) of the Redis primary that answered this
        manager's last acquire; None before the first, or for a store without one."""
        watch = getattr(self._backend, "primary", None)
        return watch.primary_id if isinstance(watch, PrimaryWatch) else None

    @property
    def primary_changes(self) -> int:
        """How many times this manager's acquires found a new Redis primary (a failover; each is
        also logged as a warning). After one, with ``fencing="counter"`` and ``replica_acks=0``,
        a grant the old primary had not replicated may have its token handed out again: check
        [`inspect`][fencedlease.LeaseManager.inspect]'s ``promoted_from``, and use
        ``replica_acks`` or ``fencing="clock"`` so it cannot happen. 0 for other stores."""
        watch = getattr(self._backend, "primary", None)
        return watch.changes if isinstance(watch, PrimaryWatch) else 0

    def restore(
        self,
        key: str,
        owner_token: str,
        *,
        ttl_ms: int,
        expires_at: datetime | None = None,
        fencing_token: int | None = None,
    ) -> Lease:
        """Rebuild a lease from values persisted by an earlier process; no I/O.

        Invents nothing: without ``expires_at`` the lease has no local deadline until its first
        [`Lease.renew`][fencedlease.Lease.renew]; without ``fencing_token`` its token
        is None until a renewal learns it from the store. The store still checks ``owner_token`` on
        every renew and release. The restored lease is not renewed in the background until
        [`keep_alive`][fencedlease.LeaseManager.keep_alive] puts it under the renewer.

        Raises:
            ValidationError: ``key``/``owner_token`` not non-empty strings, ``ttl_ms`` out of
                bounds, ``expires_at`` naive, ``fencing_token`` not an int in 1..2**63-1.
        """
        state = restored_state(key, owner_token, ttl_ms, expires_at, fencing_token, self._clock)
        state.fencing_scope = fencing_scope_of(self._backend, key)
        watch(state, self._on_event, self._clock)
        return Lease(state, self._backend, self._clock)

    def inspect(self, key: str) -> LeaseInfo | None:
        """The lease on ``key`` as the store holds it now, or None when nobody holds it.

        Raises:
            ValidationError: ``key`` is not a non-empty str.
            BackendError: the store failed.
        """
        check_key(key)
        return LeaseInfo.from_reply(key, self._backend.inspect(key))

    def force_release(self, key: str) -> bool:
        """Delete the lease on ``key`` whoever holds it; the operator's escape hatch. The fencing
        counter is kept, so the next grant still gets a larger token. Returns whether a lease was
        held.

        Raises:
            ValidationError: ``key`` is not a non-empty str.
            BackendError: the store failed.
        """
        check_key(key)
        return self._backend.force_release(key)
