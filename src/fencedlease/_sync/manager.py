"""The sync face: [`LeaseManager`][fencedlease.LeaseManager]."""

from __future__ import annotations

import inspect
import logging
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import wait as wait_futures
from contextlib import AbstractContextManager, contextmanager
from typing import Literal, TypeVar

import redis

from fencedlease._core.backend import LeaseBackend
from fencedlease._core.context import WithOnly, with_only
from fencedlease._core.decisions import close_releases, hold_outcome, hold_releases
from fencedlease._core.errors import (
    BackendError,
    LeaseNotAcquiredError,
    ManagerClosedError,
    NestedHoldError,
)
from fencedlease._core.shutdown import (
    ShutdownReport,
    close_bound_ms,
    later_close_report,
    log_incomplete,
)
from fencedlease._core.state import release_bound_s, release_wait_more_s
from fencedlease._core.threads import BoundedCalls
from fencedlease._core.validate import (
    ArgumentTypeError,
    HoldArgs,
    check_backend,
    check_key,
    check_limit,
)
from fencedlease._redis.caller import CallerReleases

from .cluster_backend import RedisClusterBackend
from .handoff import release_waiter_for
from .lease import Lease, LeaseOutcome
from .manager_base import _ManagerBase
from .operations import Operations
from .redis_backend import RedisBackend
from .renewer import Renewer
from .semaphore import Semaphore, _SlotManager, slot_manager_for

__all__ = ["LeaseManager"]

log = logging.getLogger("fencedlease")

T = TypeVar("T")


class LeaseManager(WithOnly, _ManagerBase, Operations):
    """Leases with fencing tokens on one Redis (or another
    [`LeaseBackend`][fencedlease.LeaseBackend]).

    ``client``: a ``redis.Redis`` (``decode_responses`` either way), a ``redis.RedisCluster`` (a
    [`RedisClusterBackend`][fencedlease.RedisClusterBackend]) or a backend object.
    ``prefix``: the key namespace; keys are ``<prefix>:{<key>}`` and ``<prefix>:{<key>}:fence``.
    ``clock``: where time is read and waited on (tests inject a fake one): the wait between
    acquire attempts on a store without release notifications is its ``sleep``.
    ``renew_batch_size``: the most renewals sent in one pipeline. ``on_event(event)``: called
    with a [`LeaseEvent`][fencedlease.LeaseEvent] for each acquire, background renewal, release
    and loss (see `fencedlease._core.events`); an `Exception` it raises is logged and ignored.

    One manager runs one renewer (two threads, started on the first
    [`hold`][fencedlease.LeaseManager.hold]) for all its leases. Close it with
    [`close`][fencedlease.LeaseManager.close] or use it as a context manager.

    Fork: a child made by ``os.fork`` may go on using the manager (fresh threads renew its own
    leases), but every lease made before the fork is the parent's: lost in the child (reason
    "forked"), never renewed nor released from there. See `fencedlease._core.fork`.

    ``replica_acks``, ``replica_ack_timeout_ms`` (milliseconds) and ``fencing`` (``"counter"``
    or ``"clock"``): how a Redis store grants and renews across a failover
    (`fencedlease._redis.replication`): ``WAIT`` for that many replicas after each acquire and
    renewal (a grant they did not acknowledge is taken back and, failing fast, raises
    [`ReplicationError`][fencedlease.ReplicationError]), and tokens that never repeat after a
    counter rolled back. Only for a Redis client or URL.

    Raises:
        ValidationError: ``prefix`` is not a non-empty str, ``renew_batch_size`` < 1, ``clock``
            lacks ``monotonic()``/``time()``, a replication option out of bounds (or given with
            a backend object), ``on_event`` is not a plain callable, or
            ``client`` is neither a ``redis.Redis`` nor a lease backend (a ``TypeError`` too when
            it is one of the asyncio face's).
    """

    _with_what = "LeaseManager"
    # A hold of a key this thread already holds through this manager would wait for itself; a
    # semaphore's slot manager turns this off (a semaphore has many holders of one name).
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
        check_backend(client, asyncio=False)
        return client

    @staticmethod
    def _drop_unused(backend: LeaseBackend) -> None:
        backend.close()

    def _init_face(self) -> None:
        # Waiting acquirers are woken by the release where the backend can (see _handoff);
        # other stores are polled on the manager's clock.
        self._release_waiter = release_waiter_for(self._backend, self._clock)
        # Final releases (hold's end, close) run here, so a hung store cannot hold the caller.
        self._releases = BoundedCalls("fencedlease-release")
        # ... or on the caller's thread, on a connection of the manager's own (a plain Redis).
        backend = self._backend
        self._caller = (
            CallerReleases.for_backend(backend) if isinstance(backend, RedisBackend) else None
        )
        self._lock = threading.Lock()  # guards _closed and _holds
        self._holds: dict[Lease, int] = {}  # leases inside hold() now -> the holding thread
        self._close_done = threading.Event()  # set once close() has its report
        self._slots: _SlotManager | None = None  # its semaphores' slots (the first semaphore())

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
        [`hold`][fencedlease.LeaseManager.hold]/[`with_lease`][fencedlease.LeaseManager.with_lease],
        and close the client if the manager made it. Idempotent.

        Each such lease is first marked lost (reason: the manager was closed), so its body sees
        ``lease.lost``, ``lease.wait_lost()`` returns, and the ``with`` block ends in
        [`LeaseLostError`][fencedlease.LeaseLostError]; then it is released with its owner token.
        The releases and the joining of the renewer's threads take ``timeout_ms`` milliseconds at
        most (default: 1,000, or ``FENCEDLEASE_SHUTDOWN_TIMEOUT_MS`` for a manager made by
        [`from_env`][fencedlease.LeaseManager.from_env]): a lease whose release got no reply in
        time lapses at its TTL, and a thread blocked on a hung store ends at the client's socket
        timeout. Leases taken with [`acquire`][fencedlease.LeaseManager.acquire] are the caller's
        and are left alone. In a process forked from the one that made the manager, no lease of
        the parent's is touched.

        Returns:
            [`ShutdownReport`][fencedlease.ShutdownReport]: the leases not released and the
            threads not ended in time (``complete`` when none; each lease not released is
            also logged as a warning). A later call returns the first call's report (waiting
            ``timeout_ms`` at most for it; still under way then: one with ``unfinished=1``).

        Raises:
            ValidationError: ``timeout_ms`` is not an int in 0..2,147,483,647.
            BackendError: closing the client failed.
        """
        bound_ms = close_bound_ms(timeout_ms, self._shutdown_timeout_ms)
        with self._lock:
            closing = self._closed
            self._closed = True
            if not closing:
                holds, self._holds = list(self._holds), {}
        if closing:  # another call closes (or closed) it: its report, once there
            if self._shutdown is None:
                self._close_done.wait(bound_ms / 1000)
            return later_close_report(self._shutdown, bound_ms)
        start = time.monotonic()
        until = start + bound_ms / 1000
        if self._slots is not None:
            self._slots.close(round(max(0.0, until - time.monotonic()) * 1000))
        unfinished = self._renewer.close(until)
        pending = []
        for lease in holds:
            if close_releases(lease._state):
                pending.append((lease.key, self._releases.submit(lease.release)))
        if pending:
            wait_futures([f for _, f in pending], timeout=max(0.0, until - time.monotonic()))
        unreleased = []
        for key, future in pending:
            error = future.exception(0) if future.done() else f"no reply within {bound_ms} ms"
            if error is not None:
                unreleased.append(key)
                log.warning("fencedlease: close() could not release %r (it lapses at its ttl): %s",
                            key, error)  # fmt: skip
        unfinished += self._releases.close(until)
        if self._caller is not None:
            unfinished += self._caller.close(until)
        self._release_waiter.close(until)
        elapsed_ms = (time.monotonic() - start) * 1000
        self._shutdown = report = ShutdownReport(
            tuple(unreleased), unfinished, elapsed_ms, bound_ms
        )
        log_incomplete(report)
        self._close_done.set()
        self._backend.close()
        return report

    def _after_fork_in_child(self) -> None:
        """In a forked child (see `fencedlease._core.fork`): new locks, no threads, no holds
        (the parent's leases are the parent's). No I/O."""
        self._lock = threading.Lock()
        self._close_done = threading.Event()  # a report made before the fork is kept
        self._holds = {}
        self._renewer._after_fork_in_child()
        self._releases._after_fork_in_child()
        if self._caller is not None:
            self._caller._after_fork_in_child()
        self._release_waiter._after_fork_in_child()

    def semaphore(self, name: str, *, limit: int) -> Semaphore:
        """A [`Semaphore`][fencedlease.Semaphore]: at most ``limit`` holders of ``name`` at once,
        each slot a fenced lease under [`hold`][fencedlease.LeaseManager.hold]'s policy. The slots
        of every semaphore of the manager share one renewer; closed with the manager.

        Raises:
            ValidationError: ``name`` not a non-empty str, ``limit`` not an int in 1..10,000, or
                a backend with no semaphore store. BackendError: SQLite could not make its tables.
            ManagerClosedError: the manager is closed.
        """
        self._check_open()
        key = (check_key(name, "name"), check_limit(limit))
        if self._slots is None:
            made = slot_manager_for(self)  # outside the lock: SQLite makes its tables here
            with self._lock:
                if self._slots is None and not self._closed:
                    self._slots = made
            if self._slots is not made:
                made.close()  # another thread's came first, or close() ran: it started nothing
        if self._slots is None or self._closed:
            raise ManagerClosedError()
        return Semaphore(self._slots, *key)

    # -- acquiring --------------------------------------------------------------------------

    def _release_later(self, key: str, owner_token: str) -> None:
        self._renewer.submit_release(key, owner_token)

    def _abandon(self, key: str, owner_token: str, exc: BaseException) -> None:
        """Release what a failed or interrupted acquire may hold under ``owner_token``.

        A store error: in the background, so the failing call keeps its time bound (a stalled
        Redis would stall the cleanup too). An interrupt: right here, since the process may be
        on its way out."""
        if isinstance(exc, Exception):
            self._renewer.submit_release(key, owner_token)
            return
        if self._closed:
            return  # the client is closed; such a grant lapses at its TTL
        try:
            self._backend.release(key, owner_token)
        except BackendError as cleanup:
            add_note = getattr(exc, "add_note", None)  # Python 3.11+
            if add_note is not None:
                add_note(f"fencedlease: release after the interrupt failed: {cleanup}")

    def _hold(self, args: HoldArgs) -> AbstractContextManager[Lease]:
        return with_only(self._held(args), "LeaseManager.hold()")

    @contextmanager
    def _held(self, args: HoldArgs) -> Iterator[Lease]:
        if self._closed:
            raise ManagerClosedError()
        if self._refuse_nested and self._holds_here(args.key):
            raise NestedHoldError(args.key)
        lease = self._acquire(
            args.key, args.ttl_ms, args.wait_ms, args.retry_delay_ms, args.heartbeat
        ).lease
        if lease is None:
            raise LeaseNotAcquiredError(args.key)
        with self._renewed(lease, args.heartbeat, args.on_renew_error):
            yield lease

    def _in_hold(self, lease: Lease) -> bool:
        with self._lock:
            return lease in self._holds

    def _keep_alive_block(self, lease: Lease, args: HoldArgs) -> AbstractContextManager[Lease]:
        return with_only(self._kept_alive(lease, args), "LeaseManager.keep_alive()")

    @contextmanager
    def _kept_alive(self, lease: Lease, args: HoldArgs) -> Iterator[Lease]:
        self._check_open()
        if lease._state.check_deadline(self._clock.monotonic()):
            raise lease._lost_error()
        with self._renewed(lease, args.heartbeat, args.on_renew_error):
            yield lease

    def _holds_here(self, key: str) -> bool:
        """Whether this thread is inside a hold (or keep_alive) of ``key`` whose lease is held."""
        me = threading.get_ident()
        with self._lock:
            return any(
                thread == me
                and lease.key == key
                and not (lease._state.lost or lease._state.released)
                for lease, thread in self._holds.items()
            )

    @contextmanager
    def _renewed(
        self,
        lease: Lease,
        heartbeat: int | Literal[False],
        on_renew_error: Callable[[BaseException], object] | None,
    ) -> Iterator[None]:
        """``lease`` among the holds and under the renewer for the block, then released and its
        outcome raised (`hold_outcome`)."""
        state = lease._state
        with self._lock:
            closed = self._closed
            if not closed:
                self._holds[lease] = threading.get_ident()
        if closed:
            self._release_now(lease)  # closed meanwhile: never leave the lease held for nobody
            raise ManagerClosedError()
        if heartbeat is not False:
            try:
                lease._entry = self._renewer.add(state, heartbeat, on_renew_error)
            except BaseException:
                with self._lock:
                    self._holds.pop(lease, None)
                self._release_now(lease)
                raise
            lease._renewer = self._renewer
        try:
            yield
        except BaseException:
            self._finish(lease, body_failed=True)
            raise
        self._finish(lease, body_failed=False)

    def _release_now(self, lease: Lease) -> bool:
        """Release ``lease``, waiting `release_bound_s`, and on while
        renewals still move the lease's deadline (`release_wait_more_s`).

        Raises:
            BackendError: the store failed or did not answer in time (the lease lapses at its
                TTL then).
        """
        state = lease._state
        if state.inherited():
            return False  # no I/O on the parent's lease (see _fork)
        clock = self._clock
        what = f"release {state.key!r}"

        def more_s() -> float | None:
            return release_wait_more_s(state, clock.monotonic())

        caller = self._caller
        conn = caller.take() if caller is not None else None
        if caller is None or conn is None:
            return self._releases.run(
                lease.release, release_bound_s(state, clock.monotonic()), what, more_s
            )
        # One give-up instant for the whole release: the caller's read, then the worker's.
        started = clock.monotonic()
        give_up = started + release_bound_s(state, started)

        def on_worker(key: str, owner_token: str) -> bool:
            left, backend = max(0.0, give_up - clock.monotonic()), self._backend
            return self._releases.run(lambda: backend.release(key, owner_token), left, what, more_s)

        return lease._release_on(caller.release(conn, give_up, clock.monotonic, more_s, on_worker))

    def _finish(self, lease: Lease, *, body_failed: bool) -> None:
        state = lease._state
        with self._lock:
            self._holds.pop(lease, None)
            closed = self._closed
        release_error = None
        if hold_releases(state, closed, self._clock.monotonic()):
            try:
                self._release_now(lease)
            except BackendError as exc:
                release_error = exc
        error = hold_outcome(lease, body_failed, release_error)
        if error is release_error and error is not None:
            raise error
        if error is not None:
            raise error from None

    def _with_lease(
        self, key: str, fn: Callable[[Lease], T], hold: AbstractContextManager[Lease]
    ) -> LeaseOutcome[T]:
        held = False  # set once the body is entered: later errors are fn's own
        try:
            with hold as lease:
                held = True
                value = fn(lease)
        except LeaseNotAcquiredError as exc:
            if held or isinstance(exc, NestedHoldError):  # fn's own, or a mistake: not skipped
                raise
            return LeaseOutcome(key, False)
        if inspect.isawaitable(value):
            if inspect.iscoroutine(value):
                value.close()  # never awaited: close it rather than leave a warning behind
            raise ArgumentTypeError(
                "fn",
                "fn returned an awaitable that LeaseManager.with_lease cannot await; use"
                " fencedlease.aio.AsyncLeaseManager.with_lease",
            )
        return LeaseOutcome(key, True, value, lease)
