"""The asyncio face: [`AsyncLeaseManager`][fencedlease.aio.AsyncLeaseManager].

Everything that is not I/O is the sync face's code: validation (`fencedlease._core.validate`),
the acquire loop's rules ([`AcquireAttempt`][]), restore
([`restored_state`][]), the loss rules ([`LeaseState`][])
and the renewal schedule. What is here is the awaiting, and what only asyncio has: cancellation.

Cancellation, point by point:

- A cancelled ``acquire`` (at any await: connecting, sending, reading, or between retries) never
  leaves a key held that nobody can release. When an acquire command of the call may have landed,
  the same owner token releases it before the ``CancelledError`` goes on. That release runs in a
  task of the manager's and is shielded: cancelling the caller again stops the waiting, not the
  release, and [`AsyncLeaseManager.close`][fencedlease.aio.AsyncLeaseManager.close] waits for it.
- On loss, the task that entered ``hold`` (the body's task) is cancelled and ``hold`` raises
  [`LeaseLostError`][fencedlease.LeaseLostError] instead of the ``CancelledError``, as
  `asyncio.timeout` turns its own cancellation into ``TimeoutError`` (on Python 3.11+ a cancellation
  from elsewhere is told apart with ``Task.uncancel`` and still propagates). A body that swallows
  the cancellation still ends in ``LeaseLostError``: the deadline and the release are checked when
  it ends.
- ``hold``'s final release is shielded like the acquire's cleanup, and bounded: it waits until the
  lease's deadline at most (at least 100 ms; [`release_bound_s`][], the same
  rule as the sync face), so a hung store cannot hold the caller past it. A release with no reply
  in time is cancelled and the lease lapses at its TTL. ``AsyncLease.release`` itself is not
  shielded: a cancelled ``release()`` keeps the owner token and can be awaited again.
- Nothing lives in a ``threading.local`` or in a task: a lease is an object, and every hold keeps
  its own state.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import sys
from collections.abc import Awaitable, Callable, Coroutine
from contextlib import AbstractAsyncContextManager
from typing import Any, TypeVar

import redis
import redis.asyncio

from fencedlease._core.backend import AsyncLeaseBackend
from fencedlease._core.context import AsyncWithOnly
from fencedlease._core.decisions import (
    CLEANUP_WORKERS,
    close_releases,
)
from fencedlease._core.errors import BackendError, LeaseNotAcquiredError, NestedHoldError
from fencedlease._core.shutdown import (
    ShutdownReport,
    close_bound_ms,
    later_close_report,
    log_incomplete,
)
from fencedlease._core.validate import (
    ArgumentTypeError,
    HoldArgs,
    check_backend,
    check_key,
    check_limit,
)
from fencedlease._sync.redis_backend import RedisBackend
from fencedlease.backends.memory import MemoryBackend
from fencedlease.backends.sqlite import SqliteBackend

from .cluster_backend import AsyncRedisClusterBackend
from .handoff import async_release_waiter_for
from .hold import _Hold
from .lease import AsyncLease, AsyncLeaseOutcome
from .manager_base import _AsyncManagerBase
from .operations import Operations
from .primitives import retrieve
from .redis_backend import AsyncRedisBackend
from .releases import release_abandoned, release_within, report_unreleased
from .renewer import AsyncRenewer
from .semaphore import AsyncSemaphore, _AsyncSlotManager, async_slot_manager_for

__all__ = ["AsyncLeaseManager"]

# The library's sync backends: given to AsyncLeaseManager, a mistake to name.
_SYNC_BACKENDS: tuple[type, ...] = (MemoryBackend, SqliteBackend, RedisBackend)

log = logging.getLogger("fencedlease.aio")


T = TypeVar("T")


class AsyncLeaseManager(AsyncWithOnly, _AsyncManagerBase, Operations):
    """Leases with fencing tokens on one Redis (or another
    [`AsyncLeaseBackend`][fencedlease.AsyncLeaseBackend]), for asyncio: the twin of
    [`LeaseManager`][fencedlease.LeaseManager], with the same arguments, defaults, validation,
    errors, scripts and key layout.

    ``client``: a ``redis.asyncio.Redis`` (``decode_responses`` either way), a
    ``redis.asyncio.RedisCluster`` (an
    [`AsyncRedisClusterBackend`][fencedlease.aio.AsyncRedisClusterBackend]) or a backend object.
    ``prefix``: the key namespace; keys are ``<prefix>:{<key>}`` and ``<prefix>:{<key>}:fence``.
    ``clock``: where time is read and waited on (tests inject a fake one): between acquire
    attempts the manager awaits its ``async_sleep`` (an [`AsyncClock`][fencedlease.aio.AsyncClock],
    such as [`FakeClock`][fencedlease.testing.FakeClock]), or `asyncio.sleep` for a clock
    without one ([`SystemClock`][fencedlease.SystemClock]). ``renew_batch_size``: the most renewals
    sent in one pipeline. ``on_event(event)``: called (in the loop, never awaited) with a
    [`LeaseEvent`][fencedlease.LeaseEvent] for each acquire, background renewal, release and loss,
    as on the sync face.

    One manager runs one renewal task (started on the first
    [`hold`][fencedlease.aio.AsyncLeaseManager.hold]) for all its leases. Close it with
    [`close`][fencedlease.aio.AsyncLeaseManager.close] or use it as an async context manager;
    afterwards no task of the manager's is left and a client it made from a URL is closed.

    Fork: an event loop and its connections do not survive ``os.fork``, so in a forked child the
    inherited manager is inert: its leases are the parent's (lost in the child, reason "forked",
    never renewed nor released from there), every call raises
    [`ManagerClosedError`][fencedlease.ManagerClosedError], and
    [`close`][fencedlease.aio.AsyncLeaseManager.close] does no I/O and leaves the inherited client
    alone. Make a new manager in the child's own event loop. See `fencedlease._core.fork`.

    ``replica_acks``, ``replica_ack_timeout_ms`` (milliseconds) and ``fencing``: how a Redis
    store grants and renews across a failover, as for
    [`LeaseManager`][fencedlease.LeaseManager] (replicas acknowledge each acquire and renewal;
    tokens never repeat after a rollback). Only for a Redis client or URL.

    Raises:
        ValidationError: ``prefix`` is not a non-empty str, ``renew_batch_size`` < 1, ``clock``
            lacks ``monotonic()``/``time()``, a replication option out of bounds (or given with
            a backend object), ``on_event`` is not a plain callable, or ``client``
            is neither a ``redis.asyncio.Redis`` nor an asyncio lease backend; a sync
            ``redis.Redis`` or sync backend (use [`LeaseManager`][fencedlease.LeaseManager]) raises
            it as a subclass that is also a ``TypeError``.
    """

    _with_what = "AsyncLeaseManager"
    # A hold of a key this task already holds through this manager would wait for itself; a
    # semaphore's slot manager turns this off (a semaphore has many holders of one name).
    _refuse_nested: bool = True

    def _backend_for(
        self,
        client: redis.asyncio.Redis | redis.asyncio.RedisCluster | AsyncLeaseBackend,
        prefix: str,
        owns_client: bool,
    ) -> AsyncLeaseBackend:
        if isinstance(client, redis.asyncio.Redis):
            return AsyncRedisBackend(client, prefix, owns_client=owns_client)
        if isinstance(client, redis.asyncio.RedisCluster):
            return AsyncRedisClusterBackend(client, prefix, owns_client=owns_client)
        if isinstance(client, (redis.Redis, redis.RedisCluster)):
            raise ArgumentTypeError(
                "client",
                "AsyncLeaseManager needs a redis.asyncio.Redis; a redis.Redis goes to LeaseManager",
            )
        check_backend(client, asyncio=True, sync_classes=_SYNC_BACKENDS)
        return client

    @staticmethod
    def _drop_unused(backend: AsyncLeaseBackend) -> None:
        pass  # a backend from a URL opens its connections on the first command

    def _init_face(self) -> None:
        # Waiting acquirers are woken by the release where the backend can (see _handoff);
        # other stores are polled on the manager's clock.
        self._release_waiter = async_release_waiter_for(self._backend, self._clock)
        self._holds: set[_Hold] = set()
        self._chores: set[asyncio.Task[Any]] = set()
        self._cleanups = asyncio.Semaphore(CLEANUP_WORKERS)  # release_abandoned's slots
        self._close_done: asyncio.Event | None = None
        self._close_task: asyncio.Task[ShutdownReport] | None = None
        self._close_caller: asyncio.Task[Any] | None = None  # the task that called close()
        self._slots: _AsyncSlotManager | None = None  # its semaphores' slots

    @property
    def renewer(self) -> AsyncRenewer:
        """The renewal task's owner (for introspection: ``len()`` leases, ``round_trips``)."""
        return self._renewer

    async def __aenter__(self) -> AsyncLeaseManager:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self, timeout_ms: int | None = None) -> ShutdownReport:
        """Stop the renewal task, release every lease still held in
        [`hold`][fencedlease.aio.AsyncLeaseManager.hold]/
        [`with_lease`][fencedlease.aio.AsyncLeaseManager.with_lease], and close the client if the
        manager made it. Idempotent.

        Each such lease is first marked lost (reason: the manager was closed), so its body is
        cancelled and the block ends in [`LeaseLostError`][fencedlease.LeaseLostError]
        (``lease.lost`` and ``wait_lost()`` say so too); then it is released with its owner token.
        The releases and the clean-ups the manager started get ``timeout_ms`` milliseconds at most
        (default 1,000, or ``FENCEDLEASE_SHUTDOWN_TIMEOUT_MS`` for a manager made by
        [`from_env`][fencedlease.aio.AsyncLeaseManager.from_env]), as on the sync face: one still
        without a reply then is cancelled and its lease lapses at its TTL. Leases taken with
        [`acquire`][fencedlease.aio.AsyncLeaseManager.acquire] are the caller's and are left alone.

        The teardown runs as a task of its own, shielded: ``await close()`` inside a
        [`hold`][fencedlease.aio.AsyncLeaseManager.hold] body is cancelled with that body (its lease
        is marked lost), yet the releases and the closing of the client still run to the end.

        Returns:
            [`ShutdownReport`][fencedlease.ShutdownReport]: the leases not released and the clean-up
            tasks cancelled at the bound (``complete`` when none; each lease not released is also
            logged as a warning). A later call returns the first call's report (waiting
            ``timeout_ms`` at most for it; still under way then: one with ``unfinished=1``).

        Raises:
            ValidationError: ``timeout_ms`` is not an int in 0..2,147,483,647.
            BackendError: closing the client failed.
        """
        bound_ms = close_bound_ms(timeout_ms, self._shutdown_timeout_ms)
        if self._closed:
            if self._close_done is None:  # a forked child: inert, nothing of its own to close
                return self._shutdown or ShutdownReport(timeout_ms=bound_ms)
            if self._shutdown is None:  # another call closes it: its report, once there
                with contextlib.suppress(asyncio.TimeoutError):  # builtin TimeoutError on 3.11+
                    await asyncio.wait_for(self._close_done.wait(), bound_ms / 1000)
            return later_close_report(self._shutdown, bound_ms)
        self._closed = True
        self._close_done = done = asyncio.Event()
        # The teardown is a task of its own, shielded: close() awaited inside a hold body is
        # cancelled when the lease it closes is marked lost, and the teardown must not stop
        # half-way there (an owned client left open, a second close() doing nothing).
        teardown = asyncio.get_running_loop().create_task(
            self._teardown(bound_ms, done), name="fencedlease-close"
        )
        self._close_task = teardown
        self._close_caller = asyncio.current_task()
        teardown.add_done_callback(retrieve)  # a caller cancelled meanwhile never sees it
        return await asyncio.shield(teardown)

    async def _teardown(self, bound_ms: int, done: asyncio.Event) -> ShutdownReport:
        """close()'s work: stop the renewer, release the holds, close the hand-off and the
        backend; ``done`` is set at the end, whatever happened."""
        loop = asyncio.get_running_loop()
        start = loop.time()
        until = start + bound_ms / 1000
        try:
            if self._slots is not None:
                await self._slots.close(round(max(0.0, until - loop.time()) * 1000))
            await self._renewer.close()
            releases: dict[asyncio.Task[Any], str] = {}
            for hold in list(self._holds):
                lease = hold.lease
                if lease is None:
                    continue
                if close_releases(lease._state):
                    releases[self._spawn(lease.release(), "fencedlease-release")] = lease.key
            while self._chores and (left := until - loop.time()) > 0:
                await asyncio.wait(set(self._chores), timeout=left)
            late = set(self._chores)
            for task in late:
                task.cancel()
            if late:
                await asyncio.wait(late)
            unreleased = report_unreleased(releases, late, bound_ms)
            await self._release_waiter.aclose()
            unfinished = len(late) - len(set(releases) & late)
            elapsed_ms = (loop.time() - start) * 1000
            self._shutdown = report = ShutdownReport(unreleased, unfinished, elapsed_ms, bound_ms)
            log_incomplete(report)
            await self._backend.close()
            return report
        finally:
            done.set()

    def _after_fork_in_child(self) -> None:
        """In a forked child (see `fencedlease._core.fork`): inert. The loop, the tasks and the
        connections are the parent's; nothing of theirs is touched (no I/O, no cancel: a cancel
        would close the parent's sockets in a selector shared with the parent)."""
        self._forked = True
        self._closed = True
        self._close_done = None
        self._close_task = None
        self._close_caller = None
        self._holds = set()
        self._chores = set()
        self._renewer._after_fork_in_child()

    def _spawn(self, coro: Coroutine[Any, Any, T], name: str) -> asyncio.Task[T]:
        """Run ``coro`` in a task the manager keeps (and
        [`close`][fencedlease.aio.AsyncLeaseManager.close] waits for)."""
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._chores.add(task)
        task.add_done_callback(self._chore_done)
        return task

    def _chore_done(self, task: asyncio.Task[Any]) -> None:
        self._chores.discard(task)
        if not task.cancelled() and task.exception() is not None:
            # The caller that awaited it (if still there) got the error; this is for the rest.
            log.debug("%s failed: %r", task.get_name(), task.exception())

    def semaphore(self, name: str, *, limit: int) -> AsyncSemaphore:
        """An [`AsyncSemaphore`][fencedlease.aio.AsyncSemaphore], as
        [`LeaseManager.semaphore`][fencedlease.LeaseManager.semaphore]; no I/O here.

        Raises:
            ValidationError: as [`LeaseManager.semaphore`][fencedlease.LeaseManager.semaphore].
            ManagerClosedError: the manager is closed.
        """
        self._check_open()
        key = (check_key(name, "name"), check_limit(limit))
        if self._slots is None:
            self._slots = async_slot_manager_for(self)
        return AsyncSemaphore(self._slots, *key)

    # -- acquiring --------------------------------------------------------------------------

    def _release_later(self, key: str, owner_token: str) -> None:
        # A task of the manager's, not awaited: the call keeps its time bound; close() waits
        # for it. Not after close(), as the sync face's closed renewer sends nothing: a task
        # started then is one close() never waited for, on a closed client.
        if not self._closed:
            self._clean_up(key, owner_token)

    def _clean_up(self, key: str, owner_token: str) -> asyncio.Task[None]:
        """`release_abandoned` in a task of the manager's."""
        return self._spawn(
            release_abandoned(self._backend, key, owner_token, self._cleanups),
            "fencedlease-cleanup",
        )

    async def _abandon(self, key: str, owner_token: str, exc: BaseException) -> None:
        """Release what a failed or interrupted acquire may hold under ``owner_token``, in a task
        of the manager's. Not after close(): the client is closed, and such a grant lapses at its
        short TTL.

        A store error: in the background, as on the sync face, so the failing call keeps its time
        bound (a stalled Redis would stall the clean-up too). A cancellation: awaited, shielded,
        so the key is released before the ``CancelledError`` goes on."""
        if self._closed:
            return
        try:
            chore = self._clean_up(key, owner_token)
        except RuntimeError:  # no running loop: the coroutine is being closed by the GC
            return
        if not isinstance(exc, (Exception, GeneratorExit)):
            await asyncio.shield(chore)

    async def _release_shielded(self, lease: AsyncLease) -> bool:
        """`release_within` in a task of the manager's that
        cancelling the caller does not stop (close() may: then this raises BackendError)."""
        if lease._state.inherited():
            return False  # no I/O on the parent's lease (see _fork)
        chore = self._spawn(release_within(lease, self._clock), "fencedlease-release")
        try:
            return await asyncio.shield(chore)
        except asyncio.CancelledError:
            if not chore.cancelled():
                raise  # the caller was cancelled
            current = asyncio.current_task()
            if current is not None and sys.version_info >= (3, 11) and current.cancelling():
                raise
            raise BackendError(
                f"release {lease.key!r}: stopped by close(); the lease lapses at its ttl"
            ) from None

    def _hold(self, args: HoldArgs) -> _Hold:
        return _Hold(self, args)

    def _in_hold(self, lease: AsyncLease) -> bool:
        return any(hold.lease is lease for hold in self._holds)

    def _keep_alive_block(self, lease: AsyncLease, args: HoldArgs) -> _Hold:
        return _Hold(self, args, lease)

    async def _with_lease(
        self,
        key: str,
        fn: Callable[[AsyncLease], Awaitable[T]],
        hold: AbstractAsyncContextManager[AsyncLease],
    ) -> AsyncLeaseOutcome[T]:
        held = False  # set once the body is entered: later errors are fn's own
        try:
            async with hold as lease:
                held = True
                pending = fn(lease)
                if not inspect.isawaitable(pending):
                    raise ArgumentTypeError(
                        "fn",
                        f"fn must be an async function (fn(lease) returned"
                        f" {type(pending).__name__}, not an awaitable); a sync function goes to"
                        " LeaseManager.with_lease",
                    )
                value = await pending
        except LeaseNotAcquiredError as exc:
            if held or isinstance(exc, NestedHoldError):  # fn's own, or a mistake: not skipped
                raise
            return AsyncLeaseOutcome(key, False)
        return AsyncLeaseOutcome(key, True, value, lease)
