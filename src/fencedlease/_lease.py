"""The sync lease handle and the small result types of the manager."""

from __future__ import annotations

import threading
from datetime import datetime
from typing import TYPE_CHECKING, Generic, TypeVar

import attrs

from ._backend import LeaseBackend
from ._core import Clock, LeaseState, LossReason
from ._errors import LeaseLostError
from ._protocol import owner_fingerprint
from ._validate import check_ms

if TYPE_CHECKING:
    from ._core import RenewalEntry
    from ._renewer import Renewer

__all__ = ["AcquireResult", "Lease", "LeaseInfo", "LeaseOutcome"]

T = TypeVar("T")


class Lease:
    """A held (or once held) lease on ``key``.

    ``owner_token`` proves ownership to the store; it is a secret and never appears in ``repr``.
    ``fencing_token`` is the grant's number, strictly larger than every earlier grant's of the key;
    hand it to the storage you write to (see :class:`~fencedlease.FencedResource`). It is None only
    for a lease restored without one (the first successful :meth:`renew` learns it from Redis).

    Thread-safe: the body may call :meth:`check` while the manager's renewer updates the lease.
    """

    __slots__ = ("_backend", "_clock", "_entry", "_lost_event", "_renewer", "_state")

    def __init__(self, state: LeaseState, backend: LeaseBackend, clock: Clock) -> None:
        self._state = state
        self._backend = backend
        self._clock = clock
        self._entry: RenewalEntry | None = None
        self._renewer: Renewer | None = None
        self._lost_event: threading.Event | None = None

    def __repr__(self) -> str:
        state = self._state
        status = "lost" if state.lost else "released" if state.released else "held"
        return (
            f"<Lease key={state.key!r} fencing_token={state.fencing_token}"
            f" owner={owner_fingerprint(state.owner_token)} ttl_ms={state.ttl_ms} {status}>"
        )

    @property
    def key(self) -> str:
        """The caller's key (without the store's prefix)."""
        return self._state.key

    @property
    def owner_token(self) -> str:
        """The secret that proves ownership; persist it to :meth:`LeaseManager.restore` later."""
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
        Redis's own expiry by more than clock drift. Only the store knows whether the lease is
        still held: :meth:`renew` asks it.
        """
        return self._state.expires_at

    @property
    def lost(self) -> bool:
        """True once the lease is known to be gone (renewal refused, or ``ttl_ms`` passed since the
        last confirmation). A deliberate :meth:`release` is not a loss."""
        return self._state.check_deadline(self._clock.monotonic())

    @property
    def lost_reason(self) -> str | None:
        """Why the lease was lost, or None."""
        return self._state.lost_reason

    def check(self) -> None:
        """Raise :class:`LeaseLostError` if the lease is lost; call it between steps of long work.

        Raises:
            LeaseLostError: the lease is lost.
        """
        if self.lost:
            raise LeaseLostError(self._state.key, self._lost_message())

    def wait_lost(self, timeout_ms: int | None = None) -> bool:
        """Block until the lease is lost or ``timeout_ms`` passes; return whether it is lost.

        Useful in a watcher thread that stops work the moment the lease goes. A lease not renewed
        in the background learns of its loss only through :meth:`renew`, :meth:`check`, or here
        at its deadline.

        Raises:
            ValidationError: ``timeout_ms`` is not an int in 0..2,147,483,647.
        """
        limit = None if timeout_ms is None else check_ms("timeout_ms", timeout_ms, 0) / 1000
        clock = self._clock
        started = clock.monotonic()
        event = self._lost_event
        if event is None:
            event = self._lost_event = threading.Event()
            self._state.add_listener(lambda _: event.set())
        while not self.lost:
            now = clock.monotonic()
            slices = [] if limit is None else [started + limit - now]
            if self._state.deadline is not None:
                # Wake at the deadline too: nobody else may be watching this lease.
                slices.append(self._state.deadline - now)
            if limit is not None and slices[0] <= 0:
                return False
            event.wait(max(0.0, min(slices)) if slices else None)
        return True

    def _lost_message(self) -> str:
        state = self._state
        return f"lease {state.key!r} (fencing token {state.fencing_token}) was lost: " + (
            state.lost_reason or "unknown"
        )

    def renew(self, ttl_ms: int | None = None) -> bool:
        """Reset the TTL to ``ttl_ms`` (default: the current one) if this owner still holds the key.

        Returns False, and marks the lease lost, when the key is gone or another owner's; a lost
        lease is never renewed back to life. Returns False for a released lease.

        Raises:
            ValidationError: ``ttl_ms`` out of 1..2,147,483,647.
            BackendError: the store could not be reached (not a loss by itself).
        """
        state = self._state
        ttl = state.ttl_ms if ttl_ms is None else check_ms("ttl_ms", ttl_ms, 1)
        if self.lost or state.releasing:
            return False
        clock = self._clock
        sent_mono, sent_wall = clock.monotonic(), clock.time()
        token = self._backend.renew(state.key, state.owner_token, ttl)
        if token > 0:
            return state.confirm(sent_mono, sent_wall, ttl, token)
        if not state.releasing:
            state.mark_lost(LossReason.RENEW_REFUSED)
        return False

    def release(self) -> bool:
        """Delete the key if this owner still holds it; return whether it did.

        A False reply means the lease had already moved on: the lease is then marked lost. After a
        release the background renewal (if any) stops and never touches the key again. If the store
        cannot be reached, :class:`BackendError` is raised and the lease keeps its owner token, so
        ``release()`` can be called again.

        Raises:
            BackendError: the store could not be reached.
        """
        state = self._state
        state.releasing = True
        self._stop_renewal()
        released = self._backend.release(state.key, state.owner_token)
        if released:
            state.released = True
        else:
            state.mark_lost(LossReason.RELEASE_REFUSED)
        return released

    def _stop_renewal(self) -> None:
        entry, renewer = self._entry, self._renewer
        if entry is not None and renewer is not None:
            renewer.remove(entry)
            self._entry = None


@attrs.frozen
class AcquireResult:
    """What :meth:`LeaseManager.acquire` got: ``acquired`` and the ``lease`` (None when not
    acquired). ``bool(result)`` is ``result.acquired``. ``holder_ttl_ms`` is the current holder's
    remaining TTL in milliseconds when not acquired (None when acquired)."""

    key: str
    lease: Lease | None
    holder_ttl_ms: int | None = None

    @property
    def acquired(self) -> bool:
        return self.lease is not None

    def __bool__(self) -> bool:
        return self.lease is not None


@attrs.frozen
class LeaseOutcome(Generic[T]):
    """What :meth:`LeaseManager.with_lease` did: ran ``fn`` under the lease (``value`` is its
    return value), or skipped it because the lease was not acquired (``value`` is None)."""

    key: str
    acquired: bool
    value: T | None = None
    lease: Lease | None = None

    @property
    def skipped(self) -> bool:
        return not self.acquired


@attrs.frozen
class LeaseInfo:
    """A lease as the store holds it: ``fencing_token``, ``ttl_ms`` remaining (milliseconds),
    ``owner_fingerprint`` (not the secret owner token), ``last_issued_token`` (the counter)."""

    key: str
    fencing_token: int
    ttl_ms: int
    owner_fingerprint: str
    last_issued_token: int | None = None
