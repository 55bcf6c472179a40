# GENERATED from src/fencedlease/_async/manager.py by `python scripts/unasync.py`:
# do not edit. Edit that source, then run it again (CI runs it with --check, failing while
# stale).
"""The lease manager of each face: [`LeaseManager`][fencedlease.LeaseManager].

Everything that is not I/O is shared: validation (`fencedlease._core.validate`), the acquire
loop's rules ([`AcquireAttempt`][]), restore ([`restored_state`][]), the loss rules
([`LeaseState`][]) and the renewal schedule. What is here is the waiting; what threads and tasks
do differently is in ``.primitives`` (the caller's thread or task, the spawned releases, the
bounded release, the cancelling of a body).

The releases, point by point:

- An acquire that fails or is interrupted (at any wait: connecting, sending, reading, or between
  retries) never leaves a key held that nobody can release. When an acquire command of the call
  may have landed, the same owner token releases it. A store error: in the background, so the
  failing call keeps its time bound (a stalled Redis would stall the clean-up too), and
  [`close`][fencedlease.LeaseManager.close] waits for it. An interrupt (a
  ``KeyboardInterrupt``, a cancellation of the asyncio face's task): before it goes on, on the
  asyncio face in a task of the manager's that cancelling the caller again does not stop.
- On loss, the asyncio face cancels the task that entered ``hold`` (the body's task) and ``hold``
  raises [`LeaseLostError`][fencedlease.LeaseLostError] instead of the ``CancelledError``, as
  `asyncio.timeout` turns its own cancellation into ``TimeoutError`` (on Python 3.11+ a
  cancellation from elsewhere is told apart with ``Task.uncancel`` and still propagates); the
  sync face's body reads ``lease.lost``. A body that goes on after the loss still ends in
  ``LeaseLostError``: the deadline and the release are checked when it ends.
- ``hold``'s final release is bounded: it waits until the lease's deadline at most (at least
  100 ms; [`release_bound_s`][]), so a hung store cannot hold the caller past it. A release with
  no reply in time is given up and the lease lapses at its TTL. ``release()`` itself is not
  bounded: a cancelled or failed ``release()`` keeps the owner token and can be called again.
- Nothing lives in a ``threading.local`` or in a task: a lease is an object, and every hold keeps
  its own state.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, TypeVar

import redis

from fencedlease._core.backend import LeaseBackend
from fencedlease._core.context import WithOnly
from fencedlease._core.decisions import CLEANUP_WORKERS, close_releases
from fencedlease._core.errors import (
    LeaseNotAcquiredError,
    ManagerClosedError,
    NestedHoldError,
)
from fencedlease._core.reentry import NOT_REENTRANT, Reentry
from fencedlease._core.shutdown import (
    ShutdownReport,
    close_bound_ms,
    later_close_report,
    log_incomplete,
)
from fencedlease._core.validate import HoldArgs, check_key, check_limit
from fencedlease._redis.caller import caller_releases_for
from fencedlease._sync import redis_backend as sync_redis
from fencedlease.backends.memory import MemoryBackend
from fencedlease.backends.sqlite import SqliteBackend

from .cluster_backend import RedisClusterBackend
from .handoff import release_waiter_for
from .hold import _Hold
from .lease import Lease, LeaseOutcome
from .manager_base import _ManagerBase
from .operations import Operations
from .primitives import (
    FORK_INERT,
    Call,
    Detached,
    Event,
    FinalReleases,
    Lock,
    Slots,
    Spawns,
    call_body,
    check_lease_backend,
    close_waiter,
    current_caller,
    drop_unused,
    waiter_after_fork,
)
from .redis_backend import RedisBackend
from .releases import _Releasing, report_unreleased
from .renewer import Renewer
from .semaphore import Semaphore, _SlotManager, slot_manager_for

__all__ = ["LeaseManager"]

# The library's sync backends: given to the asyncio face's manager, a mistake to name.
_SYNC_BACKENDS: tuple[type, ...] = (MemoryBackend, SqliteBackend, sync_redis.RedisBackend)

T = TypeVar("T")

RELEASE_WORKERS = 8
"""Releases a manager runs at once off its caller's path besides its clean-ups (the sync face's
threads)."""


class LeaseManager(WithOnly, _Releasing, _ManagerBase, Operations):
    """Leases with fencing tokens on one Redis (or another
    [`LeaseBackend`][fencedlease.LeaseBackend]), with the same arguments, defaults,
    validation, errors, scripts and key layout on both faces.

    ``client``: a ``redis.Redis`` (``decode_responses`` either way), a
    ``redis.RedisCluster`` (see
    [`RedisClusterBackend`][fencedlease.RedisClusterBackend]) or a backend object.
    ``prefix``: the key namespace; keys are ``<prefix>:{<key>}`` and ``<prefix>:{<key>}:fence``.
    ``clock``: where time is read and waited on (tests inject a fake one, such as
    [`FakeClock`][fencedlease.testing.FakeClock]): the wait between acquire attempts on a store
    without release notifications is the clock's ``sleep`` (`asyncio.sleep` on the asyncio
    face for a clock without one, such as [`SystemClock`][fencedlease.SystemClock]).
    ``renew_batch_size``: the most renewals sent in one pipeline. ``on_event(event)``: called
    (never waited for) with a [`LeaseEvent`][fencedlease.LeaseEvent] for each acquire, background
    renewal, release and loss (see `fencedlease._core.events`); an `Exception` it raises is logged
    and ignored.

    One manager runs one renewer (a task on the asyncio face, two threads on the sync face,
    started on the first [`hold`][fencedlease.LeaseManager.hold]) for all its leases.
    Close it with [`close`][fencedlease.LeaseManager.close] or use it as a context manager
    (``with``); afterwards a client it made from a URL is closed.

    Fork: a lease made before ``os.fork`` is the parent's in the child (lost there, reason
    "forked", never renewed nor released from there). On the sync face the child may go on using
    the manager (fresh threads renew its own leases). An event loop and its connections do not
    survive a fork, so on the asyncio face the inherited manager is inert: every call raises
    [`ManagerClosedError`][fencedlease.ManagerClosedError], and
    [`close`][fencedlease.LeaseManager.close] does no I/O and leaves the inherited client
    alone (make a new manager in the child's own event loop). See `fencedlease._core.fork`.

    ``replica_acks``, ``replica_ack_timeout_ms`` (milliseconds) and ``fencing`` (``"counter"``
    or ``"clock"``): how a Redis store grants and renews across a failover
    (`fencedlease._redis.replication`): ``WAIT`` for that many replicas after each acquire and
    renewal (a grant they did not acknowledge is taken back and, failing fast, raises
    [`ReplicationError`][fencedlease.ReplicationError]), and tokens that never repeat after a
    counter rolled back. Only for a Redis client or URL.

    ``lock_delay_ms`` (milliseconds, default 0: none): the lock-delay of every grant that does not
    give its own (``acquire``/``hold``/``with_lease``'s ``lock_delay_ms``): a lease that ends
    without a release keeps its key from being granted for that long past its deadline; a
    released one frees it at once (docs/lock-delay.md, after Chubby's lock-delay).

    Raises:
        ValidationError: ``prefix`` is not a non-empty str, ``renew_batch_size`` < 1, ``clock``
            lacks ``monotonic()``/``time()``, ``lock_delay_ms`` not an int in 0..2,147,483,647,
            a replication option out of bounds (or given with a backend object), ``on_event``
            is not a plain callable, or ``client`` is neither a ``redis.Redis`` nor a
            lease backend of this face (a client or backend of the other face raises it as a
            subclass that is also a ``TypeError``).
    """

    _with_what = "LeaseManager"
    # A hold of a key the caller's thread or task already holds through this manager would wait
    # for itself; a semaphore's slot manager turns this off (a semaphore has many holders of one
    # name).
    _refuse_nested: bool = True

    def _backend_for(
        self,
        client: redis.Redis | redis.RedisCluster | LeaseBackend,
        prefix: str,
        owns_client: bool,
    ) -> LeaseBackend:
        if isinstance(client, redis.Redis):
            return RedisBackend(client, prefix, owns_client=owns_client)
        if isinstance(client, redis.RedisCluster):
            return RedisClusterBackend(client, prefix, owns_client=owns_client)
        check_lease_backend(client, _SYNC_BACKENDS)
        return client

    @staticmethod
    def _drop_unused(backend: LeaseBackend) -> None:
        drop_unused(backend)

    def _init_face(self) -> None:
        # Waiting acquirers are woken by the release where the backend can (see _handoff);
        # other stores are polled on the manager's clock.
        self._release_waiter = release_waiter_for(self._backend, self._clock)
        self._lock = Lock()  # guards _closed, _holds and _slots
        self._holds: set[_Hold] = set()
        # The releases and clean-ups off the caller's path, which close() waits for.
        self._chores = Spawns("fencedlease-release", RELEASE_WORKERS + CLEANUP_WORKERS)
        self._cleanups = Slots(CLEANUP_WORKERS)  # release_abandoned's slots
        # Or on the caller's own thread, for the sync face's plain Redis (see _redis.caller).
        self._releases = FinalReleases(self._backend, caller_releases_for(self._backend))
        self._close_done = Event()  # set once close() has its report
        self._close_task: Detached[ShutdownReport] | None = None
        self._close_caller: object = None  # the thread or task that called close()
        self._slots: _SlotManager | None = None  # its semaphores' slots

    @property
    def renewer(self) -> Renewer:
        """The background renewer (for introspection: ``len()`` leases, ``round_trips``)."""
        return self._renewer

    def __enter__(self) -> LeaseManager:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self, timeout_ms: int | None = None) -> ShutdownReport:
        """Stop renewing, release every lease still held in
        [`hold`][fencedlease.LeaseManager.hold]/
        [`with_lease`][fencedlease.LeaseManager.with_lease], and close the client if the
        manager made it. Idempotent.

        Each such lease is first marked lost (reason: the manager was closed), so its body sees
        ``lease.lost`` (on the asyncio face it is cancelled), ``lease.wait_lost()`` returns, and
        the block ends in [`LeaseLostError`][fencedlease.LeaseLostError]; then it is released with
        its owner token. The releases, the clean-ups and the renewer get ``timeout_ms``
        milliseconds at most (default 1,000, or ``FENCEDLEASE_SHUTDOWN_TIMEOUT_MS`` for a manager
        made by [`from_env`][fencedlease.LeaseManager.from_env]): a lease whose release
        got no reply in time lapses at its TTL (the asyncio face cancels the release; a sync
        thread blocked on a hung store ends at the client's socket timeout). Leases taken with
        [`acquire`][fencedlease.LeaseManager.acquire] are the caller's and are left
        alone. In a process forked from the one that made the manager, no lease of the parent's
        is touched.

        The teardown runs to its end whatever happens to the caller: on the asyncio face
        ``close()`` inside a [`hold`][fencedlease.LeaseManager.hold] body is cancelled
        with that body (its lease is marked lost), yet the releases and the closing of the
        client still run to the end, and the block ends after them.

        Returns:
            [`ShutdownReport`][fencedlease.ShutdownReport]: the leases not released and the
            workers not ended in time (threads still running, or clean-up tasks cancelled at the
            bound; ``complete`` when none; each lease not released is also logged as a warning).
            A later call returns the first call's report (waiting ``timeout_ms`` at most for it;
            still under way then: one with ``unfinished=1``).

        Raises:
            ValidationError: ``timeout_ms`` is not an int in 0..2,147,483,647.
            BackendError: closing the client failed.
        """
        bound_ms = close_bound_ms(timeout_ms, self._shutdown_timeout_ms)
        with self._lock:
            closing = self._closed
            self._closed = True
        if closing:
            if self._forked:  # an inert child: nothing of its own to close
                return self._shutdown or ShutdownReport(timeout_ms=bound_ms)
            if self._shutdown is None:  # another call closes it: its report, once there
                self._close_done.wait(bound_ms / 1000)
            return later_close_report(self._shutdown, bound_ms)
        self._close_caller = current_caller()
        # The teardown must not stop half-way (an owned client left open, a second close()
        # doing nothing) when the caller is cancelled: inside a hold body whose lease it marks
        # lost, for one.
        self._close_task = teardown = Detached(
            "fencedlease-close", lambda: self._teardown(bound_ms)
        )
        return teardown.result()

    def _teardown(self, bound_ms: int) -> ShutdownReport:
        """close()'s work: stop the renewer, release the holds, close the hand-off and the
        backend; `_close_done` is set at the end, whatever happened."""
        start = time.monotonic()
        until = start + bound_ms / 1000
        try:
            with self._lock:
                holds, self._holds = list(self._holds), set()
                slots = self._slots
            if slots is not None:
                slots.close(round(max(0.0, until - time.monotonic()) * 1000))
            unfinished = self._renewer.close(until)
            releases: dict[Call[Any], str] = {}
            for hold in holds:
                lease = hold.lease
                if lease is not None and close_releases(lease._state):
                    releases[self._spawn("fencedlease-release", lease.release)] = lease.key
            late, running = self._chores.finish(until, releases)
            unreleased = report_unreleased(releases, late, bound_ms)
            unfinished += running + self._releases.close(until)
            close_waiter(self._release_waiter, until)
            elapsed_ms = (time.monotonic() - start) * 1000
            self._shutdown = report = ShutdownReport(unreleased, unfinished, elapsed_ms, bound_ms)
            log_incomplete(report)
            self._backend.close()
            return report
        finally:
            self._close_done.set()

    def _after_fork_in_child(self) -> None:
        """In a forked child (see `fencedlease._core.fork`): no holds, no workers (the parent's
        leases are the parent's), and no I/O. On the asyncio face the manager is inert there: the
        loop, the tasks and the connections are the parent's, and nothing of theirs is touched
        (a cancel would close the parent's sockets in a selector shared with the parent)."""
        self._lock = Lock()
        self._holds = set()
        self._renewer._after_fork_in_child()
        self._chores._after_fork_in_child()
        if FORK_INERT:
            self._forked = self._closed = True
            self._close_task = None
            return
        self._close_done = Event()  # a report made before the fork is kept
        self._releases._after_fork_in_child()
        waiter_after_fork(self._release_waiter)

    def semaphore(self, name: str, *, limit: int) -> Semaphore:
        """An [`Semaphore`][fencedlease.Semaphore]: at most ``limit`` holders of
        ``name`` at once, each slot a fenced lease under
        [`hold`][fencedlease.LeaseManager.hold]'s policy. The slots of every semaphore of
        the manager share one renewer; closed with the manager.

        Raises:
            ValidationError: ``name`` not a non-empty str, ``limit`` not an int in 1..10,000, or
                a backend with no semaphore store. BackendError: SQLite could not make its tables.
            ManagerClosedError: the manager is closed.
        """
        self._check_open()
        key = (check_key(name, "name"), check_limit(limit))
        with self._lock:  # one slot manager, and none made once close() has begun
            if self._slots is None and not self._closed:
                self._slots = slot_manager_for(self)  # SQLite makes its tables here
            slots = self._slots
        if slots is None or self._closed:
            raise ManagerClosedError()
        return Semaphore(slots, *key)

    def _hold(self, args: HoldArgs, reentry: Reentry = NOT_REENTRANT) -> _Hold:
        return _Hold(self, args, reentry=reentry)

    def _in_hold(self, lease: Lease) -> bool:
        with self._lock:
            return any(hold.lease is lease for hold in self._holds)

    def _keep_alive_block(self, lease: Lease, args: HoldArgs) -> _Hold:
        return _Hold(self, args, lease)

    def _with_lease(
        self,
        key: str,
        fn: Callable[[Lease], T],
        hold: AbstractContextManager[Lease],
    ) -> LeaseOutcome[T]:
        held = False  # set once the body is entered: later errors are fn's own
        try:
            with hold as lease:
                held = True
                value = call_body(fn, lease)
        except LeaseNotAcquiredError as exc:
            if held or isinstance(exc, NestedHoldError):  # fn's own, or a mistake: not skipped
                raise
            return LeaseOutcome(key, False)
        return LeaseOutcome(key, True, value, lease)
