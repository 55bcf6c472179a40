"""What [`AsyncLeaseManager`][fencedlease.aio.AsyncLeaseManager] does by the same steps on both
faces: its construction and its public calls (the acquire loop is in `acquire_loop`; ``restore``,
``inspect`` and ``force_release`` are in `manager_store`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from typing import Any, Literal, TypeVar

import redis.asyncio

from fencedlease._core import fork as _fork
from fencedlease._core.backend import AsyncLeaseBackend, FollowsPrimary, takes_extras
from fencedlease._core.clock import SYSTEM_CLOCK, Clock
from fencedlease._core.decisions import (
    DEFAULT_CLOSE_TIMEOUT_MS,
    DEFAULT_RETRY_DELAY_MS,
    DEFAULT_TTL_MS,
)
from fencedlease._core.errors import ValidationError
from fencedlease._core.events import EventHook, check_event_hook, primary_changed, with_logging
from fencedlease._core.extras import check_extras
from fencedlease._core.protocol import GrantExtras
from fencedlease._core.reentry import DEFAULT_MAX_DEPTH, NOT_REENTRANT, Reentry, check_reentry
from fencedlease._core.shutdown import ShutdownReport
from fencedlease._core.validate import (
    HoldArgs,
    check_acquire,
    check_async_fn,
    check_clock,
    check_hold,
    check_ms,
    check_prefix,
)
from fencedlease._redis.replication import (
    Fencing,
    GrantOptions,
    PrimaryWatch,
    default_fencing,
    use_grant_options,
)

from .acquire_loop import _AsyncAcquireLoop
from .lease import AsyncAcquireResult, AsyncLease, AsyncLeaseOutcome
from .manager_store import _AsyncStoreCalls
from .renewer import AsyncRenewer
from .urls import async_backend_from_url

__all__ = ["_AsyncManagerBase"]

T = TypeVar("T")
_M = TypeVar("_M", bound="_AsyncManagerBase")


class _AsyncManagerBase(_AsyncStoreCalls, _AsyncAcquireLoop, ABC):
    """The manager's calls that are the same steps on both faces, its construction and the
    signatures (and docstrings) of its public calls; the subclass supplies the steps that differ
    by face (the abstract methods below)."""

    _renewer: AsyncRenewer

    def __init__(
        self,
        client: redis.asyncio.Redis | redis.asyncio.RedisCluster | AsyncLeaseBackend,
        *,
        prefix: str = "fencedlease",
        clock: Clock = SYSTEM_CLOCK,
        renew_batch_size: int = 500,
        on_event: EventHook | None = None,
        replica_acks: int = 0,
        replica_ack_timeout_ms: int = 100,
        fencing: Fencing = "counter",
        lock_delay_ms: int = 0,
        _owns_client: bool = False,
    ) -> None:
        check_prefix(prefix)
        self._lock_delay_ms = check_ms("lock_delay_ms", lock_delay_ms, 0)
        self._on_event = with_logging(check_event_hook(on_event))
        check_clock(clock)
        batch = check_ms("renew_batch_size", renew_batch_size, 1)
        grants = GrantOptions.checked(replica_acks, replica_ack_timeout_ms, fencing)
        self._backend = self._backend_for(client, prefix, _owns_client)
        self._stores_extras = takes_extras(self._backend)
        made_here = (
            isinstance(client, (redis.asyncio.Redis, redis.asyncio.RedisCluster)) or _owns_client
        )
        use_grant_options(self._backend, grants, made_here=made_here)
        self._clock = clock
        self._renewer = AsyncRenewer(self._backend, clock, batch_size=batch)
        if isinstance(self._backend, FollowsPrimary):
            # Sentinel: on a new primary, every lease is renewed there at once.
            self._backend.on_primary_switch = self._renewer.renew_now
        watch = getattr(self._backend, "primary", None)
        if isinstance(watch, PrimaryWatch):  # a failover seen by an acquire: an event
            watch.on_change = lambda key, before, after: primary_changed(
                self._on_event, key, before, after, clock
            )
        self._closed = False
        self._forked = False
        self._shutdown_timeout_ms = DEFAULT_CLOSE_TIMEOUT_MS  # close()'s default bound
        self._shutdown: ShutdownReport | None = None
        self._init_face()
        _fork.register(self)

    @classmethod
    def from_url(
        cls: type[_M],
        url: str,
        *,
        prefix: str = "fencedlease",
        clock: Clock = SYSTEM_CLOCK,
        on_event: EventHook | None = None,
        replica_acks: int = 0,
        replica_ack_timeout_ms: int = 100,
        fencing: Fencing | None = None,
        lock_delay_ms: int = 0,
        **kwargs: Any,
    ) -> _M:
        """A manager over the backend ``url`` names, closed with the manager: ``redis://``,
        ``rediss://`` and ``unix://`` (a client made by ``redis.asyncio.Redis.from_url(url,
        **kwargs)``), ``memory://``, and ``sqlite:///relative/path`` / ``sqlite:////absolute/path``
        / ``sqlite:///:memory:`` (``busy_timeout_ms`` the only keyword). The forms:
        `fencedlease._core.urls`. ``fencing`` left None takes the URL's default: ``"epoch"``
        for ``redis+sentinel://`` and ``redis+cluster://`` (tokens that never repeat across a
        failover, `fencedlease._core.epochs`), ``"counter"`` for any other.

        Raises:
            ValidationError: an unknown scheme, a malformed URL or an option it does not take.
            BackendError: a SQLite database that cannot be opened.
        """
        hook = check_event_hook(on_event)
        fencing = default_fencing(url) if fencing is None else fencing
        GrantOptions.checked(replica_acks, replica_ack_timeout_ms, fencing)
        backend = async_backend_from_url(url, prefix=prefix, clock=clock, **kwargs)
        try:
            return cls(
                backend,
                clock=clock,
                on_event=hook,
                replica_acks=replica_acks,
                replica_ack_timeout_ms=replica_ack_timeout_ms,
                fencing=fencing,
                lock_delay_ms=lock_delay_ms,
                _owns_client=True,
            )
        except BaseException:
            cls._drop_unused(backend)  # e.g. replica_acks for a SQLite file: nothing left open
            raise

    @staticmethod
    @abstractmethod
    def _drop_unused(backend: AsyncLeaseBackend) -> None:
        """Close the backend `from_url` made for a manager that could not be made (the sync face
        closes a SQLite file; an asyncio backend from a URL has opened nothing yet)."""

    @classmethod
    def _over_url(
        cls: type[_M], url: str, prefix: str, clock: Clock, on_event: EventHook | None,
        options: dict[str, Any],
    ) -> _M:  # fmt: skip
        return cls.from_url(url, prefix=prefix, clock=clock, on_event=on_event, **options)

    # -- what differs by face -------------------------------------------------------------

    @abstractmethod
    def _backend_for(
        self,
        client: redis.asyncio.Redis | redis.asyncio.RedisCluster | AsyncLeaseBackend,
        prefix: str,
        owns_client: bool,
    ) -> AsyncLeaseBackend:
        """The backend over ``client``: a redis-py client wrapped, a backend checked.

        Raises:
            ValidationError: ``client`` is neither (a ``TypeError`` too for the other face's).
        """

    @abstractmethod
    def _init_face(self) -> None:
        """The face's own state, once ``_backend``, ``_clock`` and ``_renewer`` are set: the
        release waiter, the holds, what closing needs."""

    @abstractmethod
    def _after_fork_in_child(self) -> None:
        """In a forked child (see `fencedlease._core.fork`)."""

    @abstractmethod
    def _hold(
        self, args: HoldArgs, reentry: Reentry = NOT_REENTRANT
    ) -> AbstractAsyncContextManager[AsyncLease]:
        """One hold of ``args.key``; acquired when entered (unless ``reentry`` nests it)."""

    @abstractmethod
    async def _with_lease(
        self,
        key: str,
        fn: Callable[[AsyncLease], Awaitable[T]],
        hold: AbstractAsyncContextManager[AsyncLease],
    ) -> AsyncLeaseOutcome[T]:
        """``fn(lease)`` inside ``hold``; a skipped outcome when ``hold`` acquired nothing."""

    # -- acquiring --------------------------------------------------------------------------

    async def acquire(
        self,
        key: str,
        *,
        ttl_ms: int = DEFAULT_TTL_MS,
        wait_ms: int = 0,
        retry_delay_ms: int = DEFAULT_RETRY_DELAY_MS,
        metadata: Mapping[str, str] | None = None,
        lock_delay_ms: int | None = None,
    ) -> AsyncAcquireResult:
        """Take the lease on ``key`` for ``ttl_ms`` milliseconds, with a new fencing token.

        One atomic round trip when the key is free. With ``wait_ms=0`` (the default) a held key
        fails fast; with ``wait_ms > 0`` the call retries every ``retry_delay_ms`` (randomised
        ±50% so waiters do not retry in lock-step) until acquired or ``wait_ms`` has passed on the
        monotonic clock, then makes one last attempt: it never waits longer than ``wait_ms`` plus
        one round trip. A store that does not answer (a stopped Redis) ends a round trip at the
        client's ``socket_timeout`` (seconds; redis-py 8's default is 5), and a command is resent
        only while the wait lasts, so the call gives up within ``wait_ms`` plus one
        ``socket_timeout`` (none without one). The lease is not renewed in the background: use
        [`hold`][fencedlease.aio.AsyncLeaseManager.hold] for that, or
        call [`AsyncLease.renew`][fencedlease.aio.AsyncLease.renew].

        If a reply is lost (connection reset or timeout after sending), the same acquire is sent
        once more with the same owner token: Redis recognises it and returns the same fencing
        token and issues no new one, so the caller holds the lease instead of orphaning it. If the
        call is cancelled (asyncio face) while an acquire of it may have landed, that owner token
        releases the key before the cancellation propagates.

        ``metadata``: who holds the lease, a mapping of str to str (at most 16 entries and 1,024
        bytes of UTF-8 in all), stored in the same atomic step as the grant, kept and deleted with
        the lease, and shown by [`inspect`][fencedlease.aio.AsyncLeaseManager.inspect] and the
        operator CLI's ``inspect``/``list`` (never the owner token). ``lock_delay_ms``: a lease
        that ends without a release (it expired, or its holder lost it) keeps the key from being
        granted for that many milliseconds after its deadline; a released lease frees the key at
        once (None: the manager's ``lock_delay_ms``; see docs/lock-delay.md).

        Returns:
            [`AsyncAcquireResult`][fencedlease.aio.AsyncAcquireResult]; ``result.lease`` is None
            when not acquired.

        Raises:
            ValidationError: ``key``, ``ttl_ms``, ``wait_ms``, ``retry_delay_ms``, ``metadata`` or
                ``lock_delay_ms`` out of bounds, or ``metadata``/``lock_delay_ms`` given to a
                backend that cannot store them.
            BackendError: the store failed; never reported as acquired.
            ManagerClosedError: the manager is closed, or was closed while the call waited.
        """
        key, ttl_ms, wait_ms, retry_delay_ms = check_acquire(key, ttl_ms, wait_ms, retry_delay_ms)
        extras = self._extras(metadata, lock_delay_ms)
        self._check_open()
        return await self._acquire(key, ttl_ms, wait_ms, retry_delay_ms, None, extras)

    def _extras(self, metadata: object, lock_delay_ms: object) -> GrantExtras:
        """A call's metadata and lock-delay, checked (`check_extras`), the manager's lock-delay by
        default.

        Raises:
            ValidationError: either out of bounds, or not plain for a backend that stores none.
        """
        extras = check_extras(metadata, lock_delay_ms, self._lock_delay_ms)
        if not extras.plain and not self._stores_extras:
            argument = "metadata" if extras.metadata else "lock_delay_ms"
            raise ValidationError(
                argument,
                f"{argument}: {type(self._backend).__name__} stores no metadata nor lock-delay"
                " (its acquire takes no extras)",
            )
        return extras

    def hold(
        self,
        key: str,
        *,
        ttl_ms: int = DEFAULT_TTL_MS,
        wait_ms: int = 0,
        retry_delay_ms: int = DEFAULT_RETRY_DELAY_MS,
        heartbeat_ms: int | Literal[False] | None = None,
        on_renew_error: Callable[[BaseException], object] | None = None,
        reentrant: bool = False,
        max_depth: int = DEFAULT_MAX_DEPTH,
        metadata: Mapping[str, str] | None = None,
        lock_delay_ms: int | None = None,
    ) -> AbstractAsyncContextManager[AsyncLease]:
        """Hold the lease on ``key`` for the ``async with`` block, renewed in the background.

        Acquires as [`acquire`][fencedlease.aio.AsyncLeaseManager.acquire] does, renews every
        ``heartbeat_ms`` (default ``max(1, ttl_ms // 4)``; an explicit value must be at most
        ``ttl_ms // 2``; ``False``: no renewal) while the block runs, then releases.
        ``metadata`` and ``lock_delay_ms``: as for
        [`acquire`][fencedlease.aio.AsyncLeaseManager.acquire].
        ``on_renew_error(exc)`` is called (by the renewer: its thread, or its task, so it must not
        block) for each failed renewal round trip: telemetry, not a loss. An ``Exception`` the hook
        raises is logged and renewal goes on; anything else it raises (``KeyboardInterrupt``,
        ``SystemExit``) stops the renewer: its leases are lost, so the block ends in
        [`LeaseLostError`][fencedlease.LeaseLostError] (see `call_renew_error_hooks`).

        The lease is lost when a renewal finds the key gone or another owner's, or when ``ttl_ms``
        passes with no confirmed renewal; this is checked by the renewer, again when the block
        ends, and by the release (a refused release means the lease had moved on). The block can
        watch ``lease.lost``, ``lease.check()`` or ``lease.wait_lost()``; on the asyncio face the
        task running the block is also cancelled on loss, and the ``CancelledError`` comes out of
        ``hold`` as [`LeaseLostError`][fencedlease.LeaseLostError].

        The final release waits until the lease's deadline at most (at least 100 ms; see
        `release_bound_s`), so a hung store cannot hold the caller past it: a release with no
        reply in time leaves the lease to lapse at its TTL and counts as a failed release (below).
        After [`close`][fencedlease.aio.AsyncLeaseManager.close] the block ends in
        [`LeaseLostError`][fencedlease.LeaseLostError] (close released the lease).

        ``reentrant=True`` (bounded reentrancy, as a reentrant mutex nests): inside a hold (or
        ``keep_alive``) of ``key`` by this manager in the same thread (asyncio: the same task;
        never merely the same manager), the block acquires nothing and gets the enclosing
        block's lease, the same object with the same fencing token; its own ``ttl_ms``,
        ``wait_ms``, ``retry_delay_ms``, ``heartbeat_ms`` and ``on_renew_error`` are not used.
        Only the outermost block releases. ``max_depth`` (1..10,000, default 64) bounds how deep
        such holds nest, the outermost block counted. A loss is seen at every level: a nested
        block whose lease is lost ends in ``LeaseLostError`` (on the asyncio face the loss's
        cancellation comes out of it as that error), and entering one on a lost lease raises it.
        With no enclosing hold, a reentrant hold acquires as any other.

        Raises:
            ValidationError: an argument out of bounds (when ``hold()`` is called).
            LeaseNotAcquiredError: the key is held by another owner; the block never runs.
            NestedHoldError: a [`LeaseNotAcquiredError`][fencedlease.LeaseNotAcquiredError]
                raised at once, before any round trip: this manager already holds ``key`` in
                an enclosing hold of the same thread (asyncio: task), which the nested one would
                wait for, and ``reentrant`` is false.
            ReentrancyLimitError: a reentrant hold would nest deeper than ``max_depth``; raised
                when entered, and the enclosing blocks keep the lease.
            LeaseLostError: the lease was lost while the block ran, even if the block returned
                normally or swallowed the cancellation. An exception raised by the block itself
                propagates unchanged, and so does a cancellation that did not come from the loss.
            BackendError: the store failed while acquiring or releasing, or the release got no
                reply in time (the lease lapses at its TTL).
            ManagerClosedError: the manager is closed, or was closed while the call waited.
        """
        extras = self._extras(metadata, lock_delay_ms)
        return self._hold(
            check_hold(key, ttl_ms, wait_ms, retry_delay_ms, heartbeat_ms, on_renew_error, extras),
            check_reentry(reentrant, max_depth),
        )

    async def with_lease(
        self,
        key: str,
        fn: Callable[[AsyncLease], Awaitable[T]],
        *,
        ttl_ms: int = DEFAULT_TTL_MS,
        wait_ms: int = 0,
        retry_delay_ms: int = DEFAULT_RETRY_DELAY_MS,
        heartbeat_ms: int | Literal[False] | None = None,
        on_renew_error: Callable[[BaseException], object] | None = None,
        metadata: Mapping[str, str] | None = None,
        lock_delay_ms: int | None = None,
    ) -> AsyncLeaseOutcome[T]:
        """Run ``fn(lease)`` under the lease on ``key``, as
        [`hold`][fencedlease.aio.AsyncLeaseManager.hold] does (in the caller's thread or task; on
        the asyncio face that task is the one cancelled on loss).

        Returns:
            [`AsyncLeaseOutcome`][fencedlease.aio.AsyncLeaseOutcome]: ``value`` is what ``fn``
            returned; ``skipped`` is true (and ``fn`` never ran) when the lease was not acquired.

        Raises:
            ValidationError, LeaseLostError, BackendError, ManagerClosedError: as
                [`hold`][fencedlease.aio.AsyncLeaseManager.hold]; an exception from ``fn``
                propagates unchanged (a ``LeaseNotAcquiredError`` from ``fn`` included: only this
                call's own acquire turns into a skipped outcome, and a
                ``NestedHoldError`` is raised, not skipped). ``fn`` not callable, or
                a function of the other face (a coroutine function given to the sync face):
                ``ValidationError`` (a ``TypeError`` too for the latter) before anything is
                acquired; ``fn(lease)`` not of this face (an awaitable on the sync face, closed
                unawaited; not an awaitable on the asyncio face, a sync function that ran blocking
                the event loop): ``ValidationError`` once the lease is released (on the asyncio face
                also a ``TypeError``).
        """
        check_async_fn(fn)
        extras = self._extras(metadata, lock_delay_ms)
        args = check_hold(
            key, ttl_ms, wait_ms, retry_delay_ms, heartbeat_ms, on_renew_error, extras
        )
        return await self._with_lease(args.key, fn, self._hold(args))
