"""What [`LeaseManager`][fencedlease.LeaseManager] offers for running it in a service:
[`from_env`][fencedlease.LeaseManager.from_env],
[`check_health`][fencedlease.LeaseManager.check_health] and
[`keep_alive`][fencedlease.LeaseManager.keep_alive] (the asyncio twins are in
`fencedlease.aio._operations`)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Literal, TypeVar

from redis.retry import Retry

from ._backend import LeaseBackend
from ._clock import SYSTEM_CLOCK, Clock
from ._events import EventHook
from ._health import DEFAULT_HEALTH_TIMEOUT_MS, HealthReport, check_health, connect
from ._keep_alive import check_keep_alive
from ._lease import Lease
from ._operations_shared import OperationsBase
from ._shutdown import ShutdownReport

__all__ = ["Operations"]

_M = TypeVar("_M", bound="Operations")


class Operations(OperationsBase):
    """``from_env``, ``check_health`` and ``keep_alive``, mixed into the sync manager."""

    _backend: LeaseBackend
    _clock: Clock
    _lock: threading.Lock
    _holds: set[Lease]

    def close(self, timeout_ms: int | None = None) -> ShutdownReport:
        raise NotImplementedError

    def _renewed(
        self,
        lease: Lease,
        heartbeat: int | Literal[False],
        on_renew_error: Callable[[BaseException], object] | None,
    ) -> AbstractContextManager[None]:
        raise NotImplementedError

    @classmethod
    def from_env(
        cls: type[_M],
        environ: Mapping[str, str] | None = None,
        *,
        connect: bool = False,
        clock: Clock = SYSTEM_CLOCK,
        on_event: EventHook | None = None,
        **kwargs: Any,
    ) -> _M:
        """A manager configured by the ``FENCEDLEASE_*`` variables of ``environ`` (default
        ``os.environ``), made as [`from_url`][fencedlease.LeaseManager.from_url] makes one:

        | Variable (``FENCEDLEASE_``...) | Default | Meaning (bounds) |
        |---|---|---|
        | ``URL`` | (required) | the store's URL, as ``from_url`` takes it |
        | ``PREFIX`` | fencedlease | the key namespace |
        | ``DB`` | the URL's | Redis ``db`` (0..2,147,483,647) |
        | ``CONNECT_TIMEOUT_MS`` | none | ``socket_connect_timeout`` (1..MAX) |
        | ``SOCKET_TIMEOUT_MS`` | none | ``socket_timeout`` (1..MAX) |
        | ``MAX_RETRIES`` | redis-py's | ``retry=Retry(..., n)`` (0..1,000) |
        | ``SHUTDOWN_TIMEOUT_MS`` | 5000 | ``close()``'s bound (0..MAX) |
        | ``CONNECT_MAX_ATTEMPTS`` | 3 | checks made by ``connect=True`` (1..1,000) |

        MAX is 2,147,483,647 (milliseconds). Numbers are strings of ASCII digits. The Redis
        variables (``DB``, the connect and socket timeouts, ``MAX_RETRIES``) become redis-py's
        options: seconds for the timeouts, and ``Retry(ExponentialWithJitterBackoff(), n)``;
        they are refused with a ``memory://`` or ``sqlite://`` URL, and ``FENCEDLEASE_DB`` with
        a URL that names a database. ``kwargs`` go to the client as in ``from_url``.

        ``connect=True``: [`check_health`][fencedlease.LeaseManager.check_health] at once
        (bounded by the connect timeout, else 1,000 ms), up to
        ``FENCEDLEASE_CONNECT_MAX_ATTEMPTS`` times, waiting 0.1 s, 0.2 s, 0.4 s ... (at most 2 s,
        on ``clock``) between attempts; when all fail the manager is closed again.

        Raises:
            ValidationError: ``argument`` names the variable: ``FENCEDLEASE_URL`` missing or not
                a usable URL, a number out of bounds or not digits, a bad prefix, a Redis variable
                with another store, the database given twice; or a keyword argument a variable
                sets too. A password in the URL shows as ``***``.
            BackendError: ``connect=True`` and no attempt reached the store (the last failure
                in ``__cause__``).
        """
        manager, check = cls._from_env_config(environ, connect, clock, on_event, kwargs, Retry)
        if check is not None:
            try:
                _connect(manager._backend, *check, clock)
            except BaseException:
                manager.close()
                raise
        return manager

    def check_health(self, timeout_ms: int = DEFAULT_HEALTH_TIMEOUT_MS) -> HealthReport:
        """Check that the store answers, for a readiness probe: on Redis a ``PING`` and a no-op
        script (``EVALSHA``, loaded on ``NOSCRIPT``) over a connection of their own with
        ``timeout_ms`` as its timeouts; on other stores an ``inspect`` of a probe key. Starts no
        background work (no renewer thread, no hand-off listener) and takes no lease. See
        `fencedlease._health`.

        Returns:
            [`HealthReport`][fencedlease.HealthReport]: ``ping_ms``, ``script_ms``, ``total_ms``.

        Raises:
            ValidationError: ``timeout_ms`` is not an int in 1..2,147,483,647.
            BackendError: the store failed, or the check took longer than ``timeout_ms``
                (``timed_out``).
            ManagerClosedError: the manager is closed.
        """
        self._check_open()
        return check_health(self._backend, timeout_ms)

    @contextmanager
    def keep_alive(
        self,
        lease: Lease,
        *,
        heartbeat_ms: int | Literal[False] | None = None,
        on_renew_error: Callable[[BaseException], object] | None = None,
    ) -> Iterator[Lease]:
        """Renew ``lease`` (from [`acquire`][fencedlease.LeaseManager.acquire] or
        [`restore`][fencedlease.LeaseManager.restore] of this manager) in the background for the
        ``with`` block, by the rules of [`hold`][fencedlease.LeaseManager.hold]: the same
        ``heartbeat_ms`` (against the lease's ``ttl_ms``) and ``on_renew_error``, the same loss
        notice (``lease.lost``, ``wait_lost()``, the block ends in
        [`LeaseLostError`][fencedlease.LeaseLostError]), and the same end: the lease is released
        when the block ends, however it ends, as at the end of a hold. A restored lease without
        ``expires_at`` has no deadline until its first renewal confirms one.

        Raises:
            ValidationError: ``lease`` is not a lease of this manager, is renewed in the background
                already (a hold, another keep_alive) or was released; a bad ``heartbeat_ms`` or
                ``on_renew_error``.
            LeaseLostError: the lease is lost already (the block never runs), or was lost while
                the block ran.
            BackendError, ManagerClosedError: as [`hold`][fencedlease.LeaseManager.hold].
        """
        with self._lock:
            held = lease in self._holds
        heartbeat = check_keep_alive(
            lease, Lease, self._backend, heartbeat_ms, on_renew_error, held
        )
        self._check_open()
        if lease._state.check_deadline(self._clock.monotonic()):
            raise lease._lost_error()
        with self._renewed(lease, heartbeat, on_renew_error):
            yield lease


_connect = connect
