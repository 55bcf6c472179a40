"""The sync renewer: one scheduler thread and its I/O threads per manager, for every held lease.

The scheduler thread owns the `RenewalSchedule`: it sends the due leases
as one batch to the I/O threads, applies the replies, and marks leases lost at their deadlines. Up
to `MAX_IN_FLIGHT` batches are in flight at once (an I/O thread and
a connection each), so a lease that comes due during a slow round trip is not held back by it (the
schedule's rule). The I/O is on threads of their own so that a renewal which hangs (a paused
Redis, a black-holed connection) cannot stop the deadlines from being enforced: silence is loss.

A batch still unanswered when the earliest deadline among its leases passes is abandoned, as on
the asyncio face (`fencedlease._async.renewer`): its slot is freed, and the leases that are still
alive are retried at once on another I/O thread (another connection of the pool) instead of
waiting behind a dead one until the client's socket timeout. For them that is one failed round
trip, reported to ``on_renew_error``, not a loss. A thread cannot be cancelled: the abandoned one
stays blocked until the socket gives up, and its late reply is ignored (a batch not started yet
is cancelled).

A scheduler and at most `IO_THREADS` I/O threads per manager, whatever the number of leases; they
are started on the first lease and joined by `Renewer.close`. Others (``fencedlease-cleanup``, up
to `CLEANUP_WORKERS`, started as `Renewer.submit_release` needs them) run the releases of
abandoned acquires, so that one waiting for a connection of the caller's pool never holds the
renewals back.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeoutError
from typing import TypeVar

from fencedlease._core.backend import LeaseBackend
from fencedlease._core.clock import Clock, SendTime, marking_sends
from fencedlease._core.decisions import CLEANUP_WORKERS, apply_batch, call_renew_error_hooks
from fencedlease._core.errors import BackendError, no_reply
from fencedlease._core.events import deferred
from fencedlease._core.schedule import (
    MAX_IN_FLIGHT,
    RenewalEntry,
    RenewalSchedule,
    RenewerCore,
    renewal_items,
)
from fencedlease._core.state import LossReason
from fencedlease._core.threads import DaemonThreadPool, shutdown_pool

__all__ = ["IO_THREADS", "BoundedCalls", "Renewer"]

log = logging.getLogger("fencedlease.renewer")

_BatchResult = tuple[float, float, list[int | BaseException]]

T = TypeVar("T")

IO_THREADS = 2 * MAX_IN_FLIGHT
"""The renewer's I/O threads at most: `MAX_IN_FLIGHT` batches in flight, and as many again for
batches abandoned at their deadline whose thread is still blocked on the store."""


class BoundedCalls:
    """Store calls run on a few worker threads (named ``<name>_<n>``), so that the caller waits
    for each at most a bound: a hung store (a paused Redis, a black-holed connection) cannot hold
    it past that, whatever the client's socket timeout. Started on the first call. The workers
    are daemon threads (`DaemonThreadPool`): one still blocked on a
    hung store with no socket timeout never keeps the process from exiting."""

    def __init__(self, name: str, workers: int = 8) -> None:
        self._name = name
        self._workers = workers
        self._lock = threading.Lock()
        self._pool: DaemonThreadPool | None = None

    def submit(self, fn: Callable[[], T]) -> Future[T]:
        """Start ``fn()`` on a worker; its future. Works while the interpreter exits too
        (``close()`` in an atexit handler): the pool is the library's own."""
        with self._lock:
            if self._pool is None:
                self._pool = DaemonThreadPool(self._workers, thread_name_prefix=self._name)
            return self._pool.submit(fn)

    def run(
        self,
        fn: Callable[[], T],
        bound_s: float,
        what: str,
        more_s: Callable[[], float | None] = lambda: None,
    ) -> T:
        """``fn()``'s result, waiting ``bound_s`` seconds, then as long as ``more_s()`` allows
        (asked each time a slice ran out; None: no longer).

        Raises:
            BackendError: no result within the bound (``what`` names the call; ``timed_out``, it
                may have run; a builtin ``TimeoutError`` is the cause; the call goes on in the
                background), or the one ``fn`` raised.
        """
        future = self.submit(fn)
        waited, wait = 0.0, bound_s
        while True:
            try:
                return future.result(timeout=wait)
            except FutureTimeoutError:
                waited += wait
            more = more_s()
            if more is None:
                break
            wait = more
        raise no_reply(what, waited)

    def close(self, until: float | None = None) -> int:
        """Stop the workers, joining them until the monotonic instant ``until`` at most; how
        many are still running."""
        with self._lock:
            pool, self._pool = self._pool, None
        return shutdown_pool(pool, until)

    def _after_fork_in_child(self) -> None:
        """Forget the parent's workers (they do not exist here); the next call starts new ones."""
        self._lock = threading.Lock()
        self._pool = None


class Renewer(RenewerCore):
    """Renews every lease registered with `add` until it is removed or lost.

    ``batch_size`` caps the renewals sent in one batch (one round trip).
    """

    def __init__(self, backend: LeaseBackend, clock: Clock, *, batch_size: int = 500) -> None:
        self._backend = backend
        self._clock = clock
        self._batch_size = batch_size
        self._cond = threading.Condition()
        self._guard = self._cond
        self._schedule = RenewalSchedule()
        self._thread: threading.Thread | None = None
        self._io: DaemonThreadPool | None = None
        # Clean-up releases go to a thread of their own: waiting for a connection of the caller's
        # (blocking) pool, they must not hold the renewals back.
        self._cleanup: DaemonThreadPool | None = None
        # Batches sent and not yet applied (at most MAX_IN_FLIGHT), each with its leases and the
        # earliest deadline among them (when it is abandoned), and those whose reply came.
        self._flights: dict[Future[_BatchResult], tuple[list[RenewalEntry], float]] = {}
        self._done: list[Future[_BatchResult]] = []
        self._closed = False
        self.round_trips = 0

    def _ensure_running(self) -> bool:
        if self._thread is not None and self._thread.is_alive():
            return False
        # First lease, or the thread died of an unexpected error (its leases were failed loudly
        # then): a new lease gets a live renewer, never a dead one.
        self._start_io()
        self._flights, self._done = {}, []
        self._asleep_until = -math.inf
        self._thread = threading.Thread(target=self._run, name="fencedlease-renewer", daemon=True)
        self._thread.start()
        return True

    def _wake(self) -> None:
        self._cond.notify()

    def _start_io(self) -> DaemonThreadPool:
        if self._io is None:
            self._io = DaemonThreadPool(IO_THREADS, thread_name_prefix="fencedlease-renew-io")
        return self._io

    def _deadline_moved(self, entry: RenewalEntry) -> None:
        with self._cond:
            self._schedule.deadline_moved(entry)
            self._cond.notify()

    def renew_now(self) -> None:
        """Renew every lease not in flight now (a new Redis primary); thread-safe."""
        with self._cond:
            self._schedule.all_due(self._clock.monotonic())
            self._cond.notify()

    def remove(self, entry: RenewalEntry) -> None:
        """Stop renewing ``entry``; a batch already in flight for it is ignored when it lands."""
        with self._cond:
            self._schedule.remove(entry)
            entry.state.deadline_moved = None

    def submit_release(self, key: str, owner_token: str) -> None:
        """Release ``key`` for ``owner_token`` on the I/O thread, without waiting: the cleanup of
        an acquire that failed after it may have been granted. A failure is logged (the grant then
        lapses at its TTL)."""
        with self._cond:
            if self._closed:
                return
            if self._cleanup is None:
                self._cleanup = DaemonThreadPool(
                    CLEANUP_WORKERS, thread_name_prefix="fencedlease-cleanup"
                )
            future = self._cleanup.submit(self._backend.release, key, owner_token)
        future.add_done_callback(_log_cleanup_failure)

    def __len__(self) -> int:
        with self._cond:
            return len(self._schedule)

    def close(self, until: float | None = None) -> int:
        """Stop both threads and wait for them, until the monotonic instant ``until`` at most
        (None: no bound). Leases still registered are marked lost (their renewal stops here),
        except those being released: the release's reply decides. A round trip in flight that
        outlasts ``until`` is left to end at the client's socket timeout (its reply is ignored).
        Returns how many of the renewer's threads are still running."""
        with self._cond:
            self._closed = True
            self._cond.notify()
            thread, io, cleanup = self._thread, self._io, self._cleanup
        left = 0
        if thread is not None:
            # The scheduler never waits on the store, so it stops at once.
            thread.join(None if until is None else max(0.0, until - time.monotonic()))
            left += thread.is_alive()
        for executor in (io, cleanup):
            left += shutdown_pool(executor, until)
        with self._cond:
            entries = self._schedule.drain()
        for entry in entries:
            entry.state.renewal_stopped(LossReason.CLOSED)
        return left

    def _after_fork_in_child(self) -> None:
        """In a forked child: forget the parent's threads, lock and leases (they are the
        parent's; each lease finds that out itself, see ``LeaseState.inherited``). The next
        `add` starts fresh threads. No I/O."""
        self._cond = self._guard = threading.Condition()
        self._schedule = RenewalSchedule()
        self._thread, self._io, self._cleanup = None, None, None
        self._flights, self._done = {}, []

    def _send(self, batch: list[RenewalEntry]) -> _BatchResult:
        items = renewal_items(batch)
        sent = SendTime(self._clock)
        with marking_sends(sent.mark):  # the backend marks the real send (after connecting)
            replies = self._backend.renew_many(items)
        return sent.mono, sent.wall, replies

    def _on_done(self, future: Future[_BatchResult]) -> None:
        with self._cond:
            self._done.append(future)
            self._cond.notify()

    def _run(self) -> None:
        try:
            self._loop()
        except BaseException as exc:  # never die silently: report, and fail every lease loudly
            log.exception("fencedlease renewer stopped")
            with self._cond:
                self._thread = None  # the next add() starts a new thread, even before this ends
                entries = self._schedule.entries()
                for entry in entries:
                    self._schedule.remove(entry)
            for entry in entries:
                entry.state.renewal_stopped(f"{LossReason.RENEWER_FAILED}: {exc!r}")
            raise

    def _loop(self) -> None:
        schedule, clock, cond = self._schedule, self._clock, self._cond
        while True:
            hooks: list[tuple[RenewalEntry, BaseException]] = []
            # The lease events of this turn go out once the lock is released.
            with deferred() as events, cond:
                while True:
                    if self._closed:
                        return
                    now = clock.monotonic()
                    while self._done:
                        hooks += self._apply(self._done.pop(0), now)
                    schedule.pop_expired(now)
                    for future, (_, deadline) in list(self._flights.items()):
                        if now >= deadline:
                            hooks += self._abandon(future, now)
                    while len(self._flights) < MAX_IN_FLIGHT:
                        batch = schedule.pop_batch(now, self._batch_size)
                        if not batch:
                            break
                        self._start(batch)
                    if hooks or events:
                        break
                    if self._done:
                        continue  # a batch finished before its callback could wake a waiter
                    wake = schedule.next_wakeup(len(self._flights))
                    for _, deadline in self._flights.values():
                        if deadline < math.inf:  # (a lease restored without one has none)
                            wake = deadline if wake is None else min(wake, deadline)
                    self._asleep_until = math.inf if wake is None else wake
                    cond.wait(None if wake is None else max(0.0, wake - clock.monotonic()))
            call_renew_error_hooks(hooks)  # outside the lock: a hook may add or release leases

    def _start(self, batch: list[RenewalEntry]) -> None:
        deadlines = [e.state.deadline for e in batch if e.state.deadline is not None]
        self.round_trips += 1
        assert self._io is not None
        future = self._io.submit(self._send, batch)
        self._flights[future] = (batch, min(deadlines, default=math.inf))
        future.add_done_callback(self._on_done)

    def _apply(
        self, done: Future[_BatchResult], now: float
    ) -> list[tuple[RenewalEntry, BaseException]]:
        flight = self._flights.pop(done, None)
        if flight is None:  # abandoned at its deadline: the late reply changes nothing
            return []
        error = done.exception()
        outcome = done.result() if error is None else error
        return apply_batch(self._schedule, flight[0], outcome, now)

    def _abandon(
        self, future: Future[_BatchResult], now: float
    ) -> list[tuple[RenewalEntry, BaseException]]:
        """Give up on ``future``'s batch: a lease in it reached its deadline unanswered."""
        batch, _ = self._flights.pop(future)
        future.cancel()  # only a batch still queued for a thread: a running one cannot be
        failure = BackendError(
            f"renew {len(batch)} leases: no reply before the earliest deadline in the batch"
        )
        return apply_batch(self._schedule, batch, failure, now)


def _log_cleanup_failure(future: Future[bool]) -> None:
    error = future.exception()
    if error is not None:
        log.warning("fencedlease: releasing an abandoned acquire failed: %r", error)
