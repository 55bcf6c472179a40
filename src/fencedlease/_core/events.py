"""Lease events: what a manager tells an ``on_event`` hook, and how it is called. No I/O.

Both faces ([`LeaseManager`][fencedlease.LeaseManager],
[`AsyncLeaseManager`][fencedlease.aio.AsyncLeaseManager]) make the same
[`LeaseEvent`][fencedlease.LeaseEvent] at the same points: the end of an acquire call, each wait of
an acquire for a release, a grant handed over by a release, each lease's outcome in a background
renewal batch, a release going out and its reply, and a loss. The hook is
called synchronously, on the thread (or in the task) that saw the event, never while the sync
renewer holds its lock (`deferred`): keep it short, it delays what comes after it. An ``Exception``
it raises is logged and ignored; anything else (``KeyboardInterrupt``, ``SystemExit``) propagates,
as with ``on_renew_error``.

Logging (logger ``"fencedlease"``): a loss is a warning (one caused by ``close()`` or a fork: debug)
and so is a failed renewal round trip (`log_renew_errors`), whether or not there is a hook; with the
logger enabled for ``DEBUG`` when the manager is made, every event is logged at ``DEBUG`` too
(`with_logging`). Keys, fencing tokens and owner fingerprints are logged; owner tokens and passwords
never are.

The idea of recording every step a client was told, with its timing, for a checker to judge
afterwards is Jepsen's history (Kingsbury); the claim a lease holder may make from it (from the
grant to the last confirmed deadline) is the one of Kleppmann, "How to do distributed locking"
(2016).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Literal

import attrs

from fencedlease._core.errors import ValidationError
from fencedlease._core.protocol import owner_fingerprint
from fencedlease._core.state import LossReason
from fencedlease._core.validate import check_callback, is_coroutine_callable

if TYPE_CHECKING:
    from fencedlease._core.clock import Clock
    from fencedlease._core.state import LeaseState

__all__ = [
    "EventHook",
    "LeaseEvent",
    "check_event_hook",
    "deferred",
    "emit",
    "log_event",
    "log_renew_errors",
    "renewal_event",
    "wait_ended",
    "watch",
    "with_logging",
]

log = logging.getLogger("fencedlease")

EventKind = Literal["acquire", "wait", "handoff", "renew", "release", "lost", "failover"]


@attrs.frozen
class LeaseEvent:
    """One thing a manager did with a lease, as handed to its ``on_event`` hook.

    ``kind`` and ``status``:

    - ``"acquire"``: one per acquire call (``acquire``, ``hold``, ``with_lease``), when it ends:
      ``"granted"``, ``"not-granted"`` (held by another owner until the wait ran out) or
      ``"error"`` (the call raised: a store error, a cancellation, the manager closed);
    - ``"wait"``: ``"waited"``, one per wait of an acquire call between two attempts (for a release
      to wake it, or the retry delay); ``sent_monotonic`` is when it began, ``duration_ms`` how long
      it lasted; ``owner_fingerprint`` names the waiting call's owner token;
    - ``"handoff"``: ``"granted"``, when a waiting acquire finds the key handed to it by a release
      (Redis hand-off queue), just before its ``"acquire"`` event;
    - ``"renew"``: one per lease of a background renewal batch whose reply was applied, and one
      per answered ``lease.renew()``:
      ``"confirmed"`` (the TTL was reset; ``deadline_monotonic`` is the new deadline),
      ``"refused"`` (a 0 reply: the key is gone or another owner's), ``"error"`` (the round
      trip failed; the renewer retries, not a loss by itself) or ``"late"`` (a confirmation
      that came after the lease was declared lost: a lost lease stays lost);
    - ``"release"``: ``"sent"`` when a release goes out (the holder gives the lease up from
      here), then its reply: ``"released"``, ``"refused"`` (the lease had moved on) or
      ``"error"`` (no reply: the lease lapses at its TTL);
    - ``"lost"``: ``"lost"``, once, when the lease is declared lost; ``reason`` says why;
    - ``"failover"``: ``"primary-changed"``, when an acquire's reply came from a Redis primary
      other than the one before (its replication id changed: a failover, after which a counter
      may have rolled back); ``key`` is that acquire's, ``reason`` names both replication ids.

    ``key``: the caller's key. ``fencing_token``: the grant's token (None when not granted).
    ``owner_fingerprint``: a non-secret name of the grant's owner token (16 hex characters; the
    token itself never appears), to tell the grants of one key apart. Times are on the
    manager's clock: ``at_monotonic`` (seconds) when the event was seen; ``sent_monotonic``
    (seconds) when the command it reports was sent (for a renewal batch that failed as a whole
    and a loss: None); ``duration_ms`` (milliseconds, float) from that send to the reply.
    ``deadline_monotonic`` (seconds): the lease's last confirmed deadline as of the event, the
    send of the last confirmed acquire or renewal plus its TTL (None when unknown or not
    granted). ``reason``: the loss reason, or the error's type and message for an ``"error"``
    (never an owner token or a password: library errors carry neither).
    """

    kind: EventKind
    status: str
    key: str
    fencing_token: int | None
    owner_fingerprint: str | None
    at_monotonic: float
    sent_monotonic: float | None = None
    duration_ms: float | None = None
    deadline_monotonic: float | None = None
    reason: str | None = None


EventHook = Callable[[LeaseEvent], object]
"""The ``on_event`` hook's type: called with each [`LeaseEvent`][fencedlease.LeaseEvent]; its result
is ignored."""


def check_event_hook(value: object) -> EventHook | None:
    """``value`` if it is None or a plain callable.

    Raises:
        ValidationError: naming ``on_event``, when it is not callable or is an ``async def``
            function (the hook is called, never awaited).
    """
    hook = check_callback(value, "on_event")
    if hook is not None and is_coroutine_callable(hook):
        raise ValidationError(
            "on_event", "on_event must be a plain callable; it is called, never awaited"
        )
    return hook


_pending: ContextVar[list[tuple[EventHook, LeaseEvent]] | None] = ContextVar(
    "fencedlease_pending_events", default=None
)


def emit(hook: EventHook | None, event: LeaseEvent) -> None:
    """Hand ``event`` to ``hook`` (nothing when None), or to the `deferred` block around
    this call. An ``Exception`` the hook raises is logged and ignored."""
    if hook is None:
        return
    pending = _pending.get()
    if pending is not None:
        pending.append((hook, event))
        return
    try:
        hook(event)
    except Exception:
        log.exception("on_event hook raised; ignored")


@contextmanager
def deferred() -> Iterator[list[tuple[EventHook, LeaseEvent]]]:
    """Hold back the events emitted inside the block (in this thread or task), and emit them
    when it ends, in order (or to an enclosing block). The block may reorder the yielded list.
    The sync renewer runs its locked section inside one, so no hook runs under its lock."""
    pending: list[tuple[EventHook, LeaseEvent]] = []
    token = _pending.set(pending)
    try:
        yield pending
    finally:
        _pending.reset(token)
        for hook, event in pending:
            emit(hook, event)


def lease_event(
    state: LeaseState,
    kind: EventKind,
    status: str,
    now_mono: float,
    sent_mono: float | None = None,
    reason: str | None = None,
) -> LeaseEvent:
    """The event of ``kind``/``status`` about ``state`` seen at ``now_mono``."""
    return LeaseEvent(
        kind,
        status,
        state.key,
        state.fencing_token,
        owner_fingerprint(state.owner_token),
        now_mono,
        sent_mono,
        None if sent_mono is None else (now_mono - sent_mono) * 1000,
        state.deadline,
        reason,
    )


def describe(error: BaseException) -> str:
    """An error as an event's ``reason``: its type and message."""
    return f"{type(error).__name__}: {error}"


def _log_loss(state: LeaseState) -> None:
    """A loss at ``INFO``: the caller is told of it anyway (``renew()`` returns False, ``hold``
    raises ``LeaseLostError``, ``lease.lost``), so it is an expected outcome, not a warning; one
    the program asked for (``close()``, a fork) is routine (``DEBUG``)."""
    routine = state.lost_reason in (LossReason.CLOSED, LossReason.FORKED)
    log.log(
        logging.DEBUG if routine else logging.INFO,
        "fencedlease: lease %r lost (fencing token %s, owner %s): %s",
        state.key, state.fencing_token, owner_fingerprint(state.owner_token), state.lost_reason,
    )  # fmt: skip


def watch(state: LeaseState, hook: EventHook | None, clock: Clock) -> None:
    """Make ``state`` report to ``hook``: its releases (see `release_sent`), its renewals,
    and its loss (a listener on the state). Its loss is logged (`_log_loss`), hook or not."""
    state.add_listener(_log_loss)
    if hook is None:
        return
    state.on_event = hook
    state.add_listener(
        lambda s: emit(
            hook, lease_event(s, "lost", "lost", clock.monotonic(), reason=s.lost_reason)
        )
    )


def acquire_ended(
    hook: EventHook | None,
    key: str,
    state: LeaseState | None,
    sent_mono: float,
    clock: Clock,
    error: BaseException | None = None,
    *,
    handed: bool = False,
) -> None:
    """Report the end of an acquire call: granted (``state``, which then reports to ``hook``,
    `watch`; ``handed``: by a release's hand-off), not granted, or ``error``."""
    if hook is None:
        if state is not None:
            watch(state, None, clock)
        return
    now = clock.monotonic()
    if state is not None:
        watch(state, hook, clock)
        if handed:
            emit(hook, lease_event(state, "handoff", "granted", now, sent_mono))
        emit(hook, lease_event(state, "acquire", "granted", now, sent_mono))
        return
    emit(
        hook,
        LeaseEvent(
            "acquire", "not-granted" if error is None else "error", key, None, None, now,
            sent_mono, (now - sent_mono) * 1000, None,
            None if error is None else describe(error),
        ),
    )  # fmt: skip


def release_sent(state: LeaseState, clock: Clock) -> float:
    """Report that a release of ``state`` goes out now; the send time (monotonic seconds)."""
    now = clock.monotonic()
    if state.on_event is not None:  # no event built on the release path of an unwatched lease
        emit(state.on_event, lease_event(state, "release", "sent", now, now))
    return now


def release_ended(
    state: LeaseState, clock: Clock, sent_mono: float, reply: bool | BaseException
) -> None:
    """Report a release's reply (``reply``: whether it released, or the error it raised)."""
    if state.on_event is None:
        return
    if isinstance(reply, BaseException):
        status, reason = "error", describe(reply)
    else:
        status, reason = ("released" if reply else "refused"), None
    emit(
        state.on_event, lease_event(state, "release", status, clock.monotonic(), sent_mono, reason)
    )


def renewal_event(
    state: LeaseState,
    reply: int | BaseException,
    confirmed: bool,
    sent_mono: float | None,
    now_mono: float,
) -> LeaseEvent:
    """The ``"renew"`` event of one lease of a batch sent at ``sent_mono`` (None: the round trip
    failed as a whole), once its ``reply`` was applied (``confirmed``: the state took it)."""
    if isinstance(reply, BaseException):
        return lease_event(state, "renew", "error", now_mono, sent_mono, describe(reply))
    if reply > 0:
        return lease_event(
            state, "renew", "confirmed" if confirmed else "late", now_mono, sent_mono
        )
    return lease_event(state, "renew", "refused", now_mono, sent_mono)


def wait_ended(
    hook: EventHook | None, key: str, owner_token: str, began_mono: float, clock: Clock
) -> None:
    """Report a wait of an acquire call that began at ``began_mono`` and has just ended."""
    if hook is None:
        return
    now = clock.monotonic()
    emit(
        hook,
        LeaseEvent(
            "wait", "waited", key, None, owner_fingerprint(owner_token), now, began_mono,
            (now - began_mono) * 1000,
        ),
    )  # fmt: skip


def primary_changed(
    hook: EventHook | None, key: str, before: str, after: str, clock: Clock
) -> None:
    """Report that the acquire of ``key`` found a new Redis primary (replication id ``before``
    then ``after``)."""
    if hook is not None:
        reason = f"replication id {before} -> {after}"
        event = LeaseEvent("failover", "primary-changed", key, None, None, clock.monotonic())
        emit(hook, attrs.evolve(event, reason=reason))


def log_event(event: LeaseEvent) -> None:
    """Log ``event`` at ``DEBUG`` on the ``"fencedlease"`` logger (no owner token: its
    fingerprint)."""
    log.debug(
        "fencedlease event: %s %s key=%r fencing_token=%s owner=%s duration_ms=%s reason=%s",
        event.kind, event.status, event.key, event.fencing_token, event.owner_fingerprint,
        None if event.duration_ms is None else round(event.duration_ms, 3), event.reason,
    )  # fmt: skip


def with_logging(hook: EventHook | None) -> EventHook | None:
    """``hook``, preceded by `log_event` when the ``"fencedlease"`` logger is enabled for
    ``DEBUG`` now (a manager asks when it is made: building events costs, so they are built only
    for a hook or a debug log)."""
    if not log.isEnabledFor(logging.DEBUG):
        return hook
    if hook is None:
        return log_event
    user_hook = hook

    def logged(event: LeaseEvent) -> None:
        log_event(event)
        user_hook(event)

    return logged


def log_renew_errors(errors: list[tuple[str, BaseException]]) -> None:
    """Log a warning per failed renewal round trip in ``errors`` (``(key, error)`` pairs; the
    leases of one round trip share its error): retried, not a loss by itself."""
    failed: dict[int, tuple[BaseException, list[str]]] = {}
    for key, error in errors:
        failed.setdefault(id(error), (error, []))[1].append(key)
    for error, keys in failed.values():
        log.warning(
            "fencedlease: renewing %d lease(s) failed (retried; not a loss by itself): %s;"
            " keys %r",
            len(keys), describe(error), keys[:10],
        )  # fmt: skip
