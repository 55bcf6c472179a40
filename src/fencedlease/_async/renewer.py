"""The asyncio renewer: one task per manager, for every lease held through ``hold``/``with_lease``.

It drives the same `RenewalSchedule` as the sync renewer's thread, by the
same rule: the due leases (and those due within a round trip) go out as one batch
([`renew_many`][fencedlease.AsyncLeaseBackend.renew_many]), up to
`MAX_IN_FLIGHT` batches in flight at once, the replies are applied by
the schedule, and leases are marked lost at their deadlines by the schedule. Only the waiting
differs. Each batch runs in a task of its own and the scheduler waits for "the
batch finished, or the next deadline came, or something changed", whichever is first, so a renewal
that hangs (a paused Redis, a black-holed connection) cannot stop losses from being marked:
silence is loss.

A batch still unanswered when the earliest deadline among its leases passes is abandoned
(cancelled; redis-py drops the connection), so the leases that are still alive are retried on a
fresh connection instead of waiting behind a dead one. For them that is one failed round trip,
reported to ``on_renew_error``, not a loss.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from typing import Any

from fencedlease._core.backend import AsyncLeaseBackend
from fencedlease._core.clock import Clock, SendTime, marking_sends
from fencedlease._core.decisions import BatchOutcome, apply_batch, call_renew_error_hooks
from fencedlease._core.errors import BackendError
from fencedlease._core.schedule import (
    MAX_IN_FLIGHT,
    RenewalEntry,
    RenewalSchedule,
    RenewerCore,
    renewal_items,
)
from fencedlease._core.state import LossReason

from .primitives import retrieve

__all__ = ["AsyncRenewer"]

log = logging.getLogger("fencedlease.renewer")

_BatchResult = tuple[float, float, list[int | BaseException]]


class AsyncRenewer(RenewerCore):
    """Renews every lease registered with [`add`][fencedlease.aio.AsyncRenewer.add] until it is
    removed or lost.

    ``batch_size`` caps the renewals sent in one pipeline (one round trip). ``round_trips`` counts
    the batches sent. The task starts on the first [`add`][fencedlease.aio.AsyncRenewer.add] (it
    needs a running loop) and is stopped by [`close`][fencedlease.aio.AsyncRenewer.close].
    """

    def __init__(self, backend: AsyncLeaseBackend, clock: Clock, *, batch_size: int = 500) -> None:
        self._backend = backend
        self._clock = clock
        self._batch_size = batch_size
        self._guard = contextlib.nullcontext()  # one thread: nothing to lock
        self._schedule = RenewalSchedule()
        self._task: asyncio.Task[None] | None = None
        self._waker: asyncio.Future[None] | None = None
        # Batches in flight (at most MAX_IN_FLIGHT): each with its leases and the earliest
        # deadline among them, when it is abandoned.
        self._flights: dict[asyncio.Task[_BatchResult], tuple[list[RenewalEntry], float]] = {}
        self._abandoned: set[asyncio.Task[_BatchResult]] = set()
        self._closed = False
        self.round_trips = 0

    def __len__(self) -> int:
        return len(self._schedule)

    def _ensure_running(self) -> bool:
        if self._task is not None and not self._task.done():
            return False
        self._task = asyncio.get_running_loop().create_task(self._run(), name="fencedlease-renewer")
        return True

    def _wake(self) -> None:
        self.wake()

    def remove(self, entry: RenewalEntry) -> None:
        """Stop renewing ``entry``; a batch already in flight for it is ignored when it lands."""
        self._schedule.remove(entry)
        entry.state.deadline_moved = None

    def _deadline_moved(self, entry: RenewalEntry) -> None:
        self._schedule.deadline_moved(entry)
        self.wake()

    def renew_now(self) -> None:
        """Renew every lease not in flight now (a new Redis primary); from the loop's thread."""
        self._schedule.all_due(self._clock.monotonic())
        self.wake()

    def wake(self) -> None:
        """Make the task look at the clock and the schedule now (after an add, at close, or in a
        test that moved an injected clock)."""
        waker = self._waker
        if waker is not None and not waker.done():
            waker.set_result(None)

    async def close(self) -> list[RenewalEntry]:
        """Stop the task and abandon a batch in flight; wait for both. Leases still registered are
        marked lost (their renewal stops here), except those being released (the release's reply
        decides), and returned. Idempotent."""
        self._closed = True
        self.wake()
        task = self._task
        waits: set[asyncio.Task[Any]] = set(self._abandoned)
        for flight in self._flights:
            flight.cancel()
            waits.add(flight)
        if task is not None:
            waits.add(task)
        if waits:
            await asyncio.wait(waits)
        for done in waits:
            retrieve(done)
        entries = self._schedule.drain()
        for entry in entries:
            entry.state.renewal_stopped(LossReason.CLOSED)
        return entries

    def _after_fork_in_child(self) -> None:
        """In a forked child (the manager is inert there, see `fencedlease._core.fork`): forget
        the parent's task, batch and leases without touching them (they belong to the parent's
        loop). If the child goes on running that loop anyway, the task ends at its next wake-up
        without sending anything."""
        self._closed = True
        self._schedule = RenewalSchedule()
        self._task, self._waker, self._flights = None, None, {}
        self._abandoned = set()

    async def _run(self) -> None:
        try:
            await self._loop()
        except BaseException as exc:  # never die silently: report, and fail every lease loudly
            if not isinstance(exc, asyncio.CancelledError):
                log.exception("fencedlease renewer stopped")
            entries = self._schedule.entries()
            for entry in entries:
                self._schedule.remove(entry)
            reason = (
                LossReason.CLOSED
                if isinstance(exc, asyncio.CancelledError)
                else f"{LossReason.RENEWER_FAILED}: {exc!r}"
            )
            for entry in entries:
                entry.state.renewal_stopped(reason)
            raise

    async def _loop(self) -> None:
        schedule, clock = self._schedule, self._clock
        loop = asyncio.get_running_loop()
        while not self._closed:
            now = clock.monotonic()
            hooks: list[tuple[RenewalEntry, BaseException]] = []
            for flight in [flight for flight in self._flights if flight.done()]:
                hooks += self._apply(flight, now)
            schedule.pop_expired(now)
            for flight, (_, deadline) in list(self._flights.items()):
                if now >= deadline:
                    hooks += self._abandon(flight, now)
            while len(self._flights) < MAX_IN_FLIGHT:
                batch = schedule.pop_batch(now, self._batch_size)
                if not batch:
                    break
                self._start(loop, batch)
            call_renew_error_hooks(hooks)
            if hooks:
                continue  # a hook may have added or released leases: look again before sleeping
            wake = schedule.next_wakeup(len(self._flights))
            for _, deadline in self._flights.values():
                wake = deadline if wake is None else min(wake, deadline)
            self._asleep_until = math.inf if wake is None else wake
            await self._sleep(loop, None if wake is None else max(0.0, wake - clock.monotonic()))

    async def _sleep(self, loop: asyncio.AbstractEventLoop, timeout: float | None) -> None:
        self._waker = waker = loop.create_future()
        timer = None if timeout is None else loop.call_later(timeout, _wake, waker)
        try:
            await waker
        finally:
            self._waker = None
            if timer is not None:
                timer.cancel()

    def _start(self, loop: asyncio.AbstractEventLoop, batch: list[RenewalEntry]) -> None:
        deadlines = [e.state.deadline for e in batch if e.state.deadline is not None]
        self.round_trips += 1
        flight = loop.create_task(self._send(batch), name="fencedlease-renew-batch")
        flight.add_done_callback(lambda _: self.wake())
        self._flights[flight] = (batch, min(deadlines, default=float("inf")))

    async def _send(self, batch: list[RenewalEntry]) -> _BatchResult:
        items = renewal_items(batch)
        sent = SendTime(self._clock)
        with marking_sends(sent.mark):  # the backend marks the real send (after connecting)
            replies = await self._backend.renew_many(items)
        return sent.mono, sent.wall, replies

    def _apply(
        self, flight: asyncio.Task[_BatchResult], now: float
    ) -> list[tuple[RenewalEntry, BaseException]]:
        batch, _ = self._flights.pop(flight)
        if flight.cancelled():
            outcome: BatchOutcome = BackendError("renewal round trip cancelled")
        else:
            outcome = flight.exception() or flight.result()
        return apply_batch(self._schedule, batch, outcome, now)

    def _abandon(
        self, flight: asyncio.Task[_BatchResult], now: float
    ) -> list[tuple[RenewalEntry, BaseException]]:
        """Give up on ``flight``: a lease in it reached its deadline unanswered."""
        batch, _ = self._flights.pop(flight)
        flight.cancel()
        self._abandoned.add(flight)
        flight.add_done_callback(self._abandoned.discard)
        flight.add_done_callback(retrieve)
        failure = BackendError(
            f"renew {len(batch)} leases: no reply before the earliest deadline in the batch"
        )
        return apply_batch(self._schedule, batch, failure, now)


def _wake(waker: asyncio.Future[None]) -> None:
    if not waker.done():
        waker.set_result(None)
