"""The face-neutral half of a lease handle (`LeaseView`): its facts and the loss check;
and [`LeaseInfo`][fencedlease.LeaseInfo], a lease as the store holds it (what ``inspect`` returns on
both faces).

[`Lease`][fencedlease.Lease] and [`AsyncLease`][fencedlease.aio.AsyncLease] add the I/O on top.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

import attrs

from fencedlease._core.clock import Clock
from fencedlease._core.errors import LeaseLostError
from fencedlease._core.events import emit, renewal_event
from fencedlease._core.protocol import InspectReply, owner_fingerprint
from fencedlease._core.state import LeaseState, LossReason
from fencedlease._core.validate import check_ms

__all__ = ["LeaseInfo", "LeaseView"]


class LeaseView:
    """The face-neutral half of a lease handle: its facts and the loss check, no I/O.

    [`Lease`][fencedlease.Lease] and [`AsyncLease`][fencedlease.aio.AsyncLease] add ``renew``,
    ``release`` and ``wait_lost`` (blocking or awaited) on top, so every attribute below is
    defined once for both faces.

    ``owner_token`` proves ownership to the store; it is a secret and never appears in ``repr``.
    ``fencing_token`` is the grant's number, strictly larger than every earlier grant's of the key;
    hand it to the storage you write to (see [`FencedResource`][fencedlease.FencedResource]). It is
    None only for a lease restored without one (the first successful ``renew()`` learns it from the
    store).
    """

    __slots__ = ("_clock", "_state")

    def __init__(self, state: LeaseState, clock: Clock) -> None:
        self._state = state
        self._clock = clock

    def __repr__(self) -> str:
        state = self._state
        status = "lost" if state.lost else "released" if state.released else "held"
        return (
            f"<{type(self).__name__} key={state.key!r} fencing_token={state.fencing_token}"
            f" owner_fingerprint={owner_fingerprint(state.owner_token)}"
            f" ttl_ms={state.ttl_ms} {status}>"
        )

    @property
    def key(self) -> str:
        """The caller's key (without the store's prefix)."""
        return self._state.key

    @property
    def fencing_scope(self) -> str | None:
        """The identity of the counter that issued `fencing_token`, not a secret: the store
        and key it counts for, ``"<prefix>:{<escaped key>}:fence"`` (for Redis the counter's own
        key, [`redis_keys`][fencedlease.redis_keys] ``(prefix, key).fence``; for SQLite the same
        string of the backend's prefix; for a [`MemoryBackend`][fencedlease.MemoryBackend]
        ``memory:<id>`` of the backend object in place of the prefix). Set by the backend that
        granted the lease (a restored lease by its manager's); ``None`` for a backend that names no
        scope.

        Tokens compare only within one counter: fenced stores record the scope of the leases that
        fence them and refuse a lease of another
        ([`LeaseKeyMismatchError`][fencedlease.LeaseKeyMismatchError]), so two managers with
        different prefixes never mix tokens in one store.
        """
        return self._state.fencing_scope

    @property
    def owner_token(self) -> str:
        """The secret that proves ownership; persist it to ``restore()`` the lease later."""
        return self._state.owner_token

    @property
    def fencing_token(self) -> int | None:
        """The grant's fencing token (see the class docstring)."""
        return self._state.fencing_token

    @property
    def owner_fingerprint(self) -> str:
        """A non-secret name for the owner token (16 hex characters)."""
        return owner_fingerprint(self._state.owner_token)

    @property
    def ttl_ms(self) -> int:
        """The TTL in milliseconds set by the last acquire or renewal."""
        return self._state.ttl_ms

    @property
    def expires_at(self) -> datetime | None:
        """Client-side estimate of the expiry (UTC, aware), for persisting; None when unknown.

        It is counted from when the last confirming command was sent, so it is never later than
        the store's own expiry by more than clock drift. Only the store knows whether the lease is
        still held: ``renew()`` asks it.
        """
        return self._state.expires_at

    @property
    def lost(self) -> bool:
        """True once the lease is known to be gone (renewal refused, or ``ttl_ms`` passed since the
        last confirmation). A deliberate ``release()`` is not a loss."""
        return self._state.check_deadline(self._clock.monotonic())

    @property
    def lost_reason(self) -> str | None:
        """Why the lease was lost, or None."""
        return self._state.lost_reason

    def check(self) -> None:
        """Raise [`LeaseLostError`][fencedlease.LeaseLostError] if the lease is lost; call it
        between steps of long work.

        Raises:
            LeaseLostError: the lease is lost.
        """
        if self.lost:
            raise self._lost_error()

    def _lost_message(self) -> str:
        state = self._state
        return f"lease {state.key!r} (fencing token {state.fencing_token}) was lost: " + (
            state.lost_reason or "unknown"
        )

    def _lost_error(self) -> LeaseLostError:
        return LeaseLostError(self._state.key, self._lost_message())

    # The two halves of renew() and release() around the I/O, shared by both faces.

    def _renew_ttl(self, ttl_ms: int | None) -> int | None:
        """The TTL a renewal must send, or None when the lease must not be renewed (lost, or a
        release has begun). Raises ValidationError for a bad ``ttl_ms``."""
        state = self._state
        ttl = state.ttl_ms if ttl_ms is None else check_ms("ttl_ms", ttl_ms, 1)
        if self.lost or state.releasing:
            return None
        return ttl

    def _renewed(self, token: int, sent_mono: float, sent_wall: float, ttl_ms: int) -> bool:
        """Apply a renewal's reply (sent at ``sent_mono``): confirm, or mark lost (rule 1)."""
        state = self._state
        if token > 0:
            confirmed = state.confirm(sent_mono, sent_wall, ttl_ms, token)
            if confirmed and state.deadline_moved is not None:
                state.deadline_moved()
            if state.on_event is not None:
                now = self._clock.monotonic()
                emit(state.on_event, renewal_event(state, token, confirmed, sent_mono, now))
            return confirmed
        if state.on_event is not None:
            now = self._clock.monotonic()
            emit(state.on_event, renewal_event(state, 0, False, sent_mono, now))
        if not state.releasing:
            state.mark_lost(LossReason.RENEW_REFUSED)
        return False

    def _released(self, released: bool) -> bool:
        """Apply a release's reply: released, or refused (the lease had moved on: a loss)."""
        state = self._state
        if released:
            state.released = True
        else:
            state.mark_lost(LossReason.RELEASE_REFUSED)
        return released


@attrs.frozen
class LeaseInfo:
    """A lease as the store holds it: ``fencing_token``, ``ttl_ms`` remaining (milliseconds),
    ``owner_fingerprint`` (not the secret owner token), ``last_issued_token`` (the counter),
    ``metadata`` (what the holder said of itself when it was granted the lease, ``metadata=`` of
    ``acquire``/``hold``/``with_lease``: str to str; empty when it said nothing).

    On Redis also ``primary_id``, the replication id of the primary that answered, and
    ``promoted_from``, the id of the primary it was promoted from when it was a replica once
    (None: never promoted since it started, or a store without replication). A ``promoted_from``
    says a failover happened: grants the old primary made and had not replicated are gone, and
    with ``fencing="counter"`` and ``replica_acks=0`` their tokens may be issued again.
    """

    key: str
    fencing_token: int
    ttl_ms: int
    owner_fingerprint: str
    last_issued_token: int | None = None
    # Not compared (nor hashed): facts about the store's primary, not about the lease.
    primary_id: str | None = attrs.field(default=None, eq=False)
    promoted_from: str | None = attrs.field(default=None, eq=False)
    metadata: Mapping[str, str] = attrs.field(factory=dict)

    @classmethod
    def from_reply(cls, key: str, reply: InspectReply | None) -> LeaseInfo | None:
        """The info for ``key`` from the store's inspect reply (None: nobody holds it)."""
        if reply is None:
            return None
        return cls(
            key=key,
            fencing_token=reply.fencing_token,
            ttl_ms=reply.ttl_ms,
            owner_fingerprint=reply.owner_fingerprint,
            last_issued_token=reply.last_issued_token,
            primary_id=reply.primary_id,
            promoted_from=reply.promoted_from,
            metadata=dict(reply.metadata),
        )
