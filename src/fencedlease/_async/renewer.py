"""The renewer: one owner per manager (a thread, or a task), for every lease held through
``hold``/``with_lease``/``keep_alive``.

The owner drives the `RenewalSchedule`: the due leases (and those due within a round trip) go out
as one batch ([`renew_many`][fencedlease.aio.AsyncLeaseBackend.renew_many]), up to
`MAX_IN_FLIGHT` batches in flight at once, the replies are applied by the schedule, and leases
are marked lost at their deadlines by the schedule. Each batch runs off the owner (`Chores`,
``fencedlease-renew-io``: a thread of a small pool, or a task of its own), and the owner waits
for "a batch finished, or the next deadline came, or something changed", whichever is first, so
a renewal that hangs (a paused Redis, a black-holed connection) cannot stop losses from being
marked: silence is loss.

A batch still unanswered when the earliest deadline among its leases passes is given up
(`abandon`: a task is cancelled and redis-py drops its connection; a thread cannot be, it stays
blocked until its socket gives up and its late reply is ignored), so the leases that are still
alive are retried at once on another connection instead of waiting behind a dead one. For them
that is one failed round trip, reported to ``on_renew_error``, not a loss. `IO_THREADS` bounds
the sync face's batch threads, the ones given up included.

Releases of abandoned acquires are the manager's (its ``fencedlease-cleanup`` calls), never the
renewer's: one waiting for a connection of the caller's pool never holds the renewals back.
"""

from __future__ import annotations

import logging
import math

from fencedlease._core.backend import AsyncLeaseBackend
from fencedlease._core.clock import Clock, SendTime, marking_sends
from fencedlease._core.decisions import (
    BatchOutcome,
    apply_batch,
    call_renew_error_hooks,
)
from fencedlease._core.errors import BackendError
from fencedlease._core.events import deferred
from fencedlease._core.schedule import (
    MAX_IN_FLIGHT,
    RenewalEntry,
    RenewalSchedule,
    RenewerCore,
    renewal_items,
)
from fencedlease._core.state import LossReason

from .primitives import Call, Chores, Event, Lock, Runner, abandon, is_cancellation

__all__ = ["IO_THREADS", "AsyncRenewer"]

log = logging.getLogger("fencedlease.renewer")

_BatchResult = tuple[float, float, list[int | BaseException]]

IO_THREADS = 2 * MAX_IN_FLIGHT
"""The sync face's batch threads at most: `MAX_IN_FLIGHT` batches in flight, and as many again
for batches given up at their deadline whose thread is still blocked on the store."""

OWNER = "fencedlease-renewer"
"""The name of the owner's thread or task."""


class AsyncRenewer(RenewerCore):
    """Renews every lease registered with ``add`` until it is removed or lost.

    ``batch_size`` caps the renewals sent in one batch (one round trip). ``round_trips`` counts
    the batches sent. The owner starts on the first ``add`` (on the asyncio face, inside the
    running loop) and is stopped by ``close``.
    """

    def __init__(self, backend: AsyncLeaseBackend, clock: Clock, *, batch_size: int = 500) -> None:
        self._backend = backend
        self._clock = clock
        self._batch_size = batch_size
        self._closed = False
        self.round_trips = 0
        self._reset()

    def _reset(self) -> None:
        """A renewer with no owner, no batch and no lease (made, or forked)."""
        self._guard = Lock()  # the schedule, the flights and _closed: the owner's and callers'
        self._schedule = RenewalSchedule()
        self._owner = Runner(OWNER)
        self._wakeup = Event()
        self._io = Chores("fencedlease-renew-io", IO_THREADS)
        # Batches sent and not applied yet (at most MAX_IN_FLIGHT), each with its leases and the
        # earliest deadline among them (when it is given up).
        self._flights: dict[Call[_BatchResult], tuple[list[RenewalEntry], float]] = {}

    def __len__(self) -> int:
        with self._guard:
            return len(self._schedule)

    def _ensure_running(self) -> bool:
        if self._owner.running:
            return False
        # First lease, or the owner died of an unexpected error (its leases were failed loudly
        # then): a new lease gets a live owner, never a dead one.
        self._flights = {}
        self._asleep_until = -math.inf
        self._wakeup = Event()  # (an asyncio one belongs to the loop that first waits on it)
        self._owner.start(self._run, _owner_died)
        return True

    def _wake(self) -> None:
        self._wakeup.set()

    def wake(self) -> None:
        """Make the owner look at the clock and the schedule now (after an add, at close, or in a
        test that moved an injected clock). On the asyncio face, from the loop's thread."""
        self._wake()

    def remove(self, entry: RenewalEntry) -> None:
        """Stop renewing ``entry``; a batch already in flight for it is ignored when it lands."""
        with self._guard:
            self._schedule.remove(entry)
            entry.state.deadline_moved = None

    def _deadline_moved(self, entry: RenewalEntry) -> None:
        with self._guard:
            self._schedule.deadline_moved(entry)
            self._wakeup.set()

    def renew_now(self) -> None:
        """Renew every lease not in flight now (a new Redis primary). Any thread on the sync
        face; the loop's thread on the asyncio face."""
        with self._guard:
            self._schedule.all_due(self._clock.monotonic())
            self._wakeup.set()

    async def close(self, until: float | None = None) -> int:
        """Stop the owner, give up the batches in flight, and wait for them until the monotonic
        instant ``until`` at most (None: no bound; a task ends once cancelled, a thread blocked on
        the store at its client's socket timeout, its reply ignored). Leases still registered are
        marked lost (their renewal stops here), except those being released (the release's reply
        decides). Returns how many of the renewer's threads are still running (none on the
        asyncio face). Idempotent."""
        with self._guard:
            self._closed = True
            self._wakeup.set()
            owner = self._owner
        # The owner never waits on the store, so it stops at once.
        await owner.stop(until, self._wakeup.set)
        left = int(owner.running)
        left += await self._io.close(until)
        with self._guard:
            entries = self._schedule.drain()
        for entry in entries:
            entry.state.renewal_stopped(LossReason.CLOSED)
        return left

    def _after_fork_in_child(self) -> None:
        """In a forked child (see `fencedlease._core.fork`): forget the parent's owner, batches,
        lock and leases without touching them (they are the parent's; each lease finds that out
        itself, see ``LeaseState.inherited``). No I/O. The next ``add`` starts a fresh owner; a
        parent's task the child's loop goes on running ends at its next wake-up without sending
        anything (the schedule it drives is no longer the renewer's)."""
        self._reset()

    async def _run(self) -> None:
        schedule = self._schedule
        try:
            await self._loop(schedule)
        except BaseException as exc:  # never die silently: fail every lease loudly
            with self._guard:
                if self._schedule is not schedule:
                    raise  # a parent's owner in a forked child: the parent's leases are its own
                # The next add starts a new owner, even before this one has ended.
                self._owner = Runner(OWNER)
                entries = schedule.drain()
            # A failure is logged by _owner_died; a task cancelled (with its loop) stops renewal
            # as a close does.
            reason = (
                LossReason.CLOSED
                if is_cancellation(exc)
                else f"{LossReason.RENEWER_FAILED}: {exc!r}"
            )
            for entry in entries:
                entry.state.renewal_stopped(reason)
            raise

    async def _loop(self, schedule: RenewalSchedule) -> None:
        clock = self._clock
        while True:
            hooks: list[tuple[RenewalEntry, BaseException]] = []
            # The lease events of this turn go out once the lock is released.
            with deferred() as events, self._guard:
                if self._closed or self._schedule is not schedule:
                    return
                # Cleared before the schedule is read: whatever changes it from now on wakes
                # the wait below.
                self._wakeup.clear()
                now = clock.monotonic()
                for call in [call for call in self._flights if call.done()]:
                    hooks += self._apply(call, now)
                schedule.pop_expired(now)
                for call, (_, deadline) in list(self._flights.items()):
                    if now >= deadline:
                        hooks += self._abandon(call, now)
                while len(self._flights) < MAX_IN_FLIGHT:
                    batch = schedule.pop_batch(now, self._batch_size)
                    if not batch:
                        break
                    self._start(batch)
                wake = schedule.next_wakeup(len(self._flights))
                for _, deadline in self._flights.values():
                    if deadline < math.inf:  # (a lease restored without one has none)
                        wake = deadline if wake is None else min(wake, deadline)
                self._asleep_until = math.inf if wake is None else wake
                busy = bool(hooks or events)
            call_renew_error_hooks(hooks)  # outside the lock: a hook may add or release leases
            if busy:
                continue  # a hook or an event may have added or released leases: look again
            await self._wakeup.wait(None if wake is None else max(0.0, wake - clock.monotonic()))

    def _start(self, batch: list[RenewalEntry]) -> None:
        deadlines = [e.state.deadline for e in batch if e.state.deadline is not None]
        self.round_trips += 1
        call = self._io.submit(self._send, batch)
        self._flights[call] = (batch, min(deadlines, default=math.inf))
        call.on_done(lambda _: self._wakeup.set())

    async def _send(self, batch: list[RenewalEntry]) -> _BatchResult:
        items = renewal_items(batch)
        sent = SendTime(self._clock)
        with marking_sends(sent.mark):  # the backend marks the real send (after connecting)
            replies = await self._backend.renew_many(items)
        return sent.mono, sent.wall, replies

    def _apply(
        self, call: Call[_BatchResult], now: float
    ) -> list[tuple[RenewalEntry, BaseException]]:
        batch, _ = self._flights.pop(call)
        outcome: BatchOutcome
        if call.cancelled():
            outcome = BackendError("renewal round trip cancelled")
        else:
            try:
                outcome = call.result()
            except BaseException as exc:  # the round trip's error: the schedule's to judge
                outcome = exc
        return apply_batch(self._schedule, batch, outcome, now)

    def _abandon(
        self, call: Call[_BatchResult], now: float
    ) -> list[tuple[RenewalEntry, BaseException]]:
        """Give up on ``call``'s batch: a lease in it reached its deadline unanswered."""
        batch, _ = self._flights.pop(call)
        abandon(call)
        failure = BackendError(
            f"renew {len(batch)} leases: no reply before the earliest deadline in the batch"
        )
        return apply_batch(self._schedule, batch, failure, now)


def _owner_died() -> None:
    """The owner ended on an error (being handled): say so."""
    log.exception("fencedlease renewer stopped")
