"""[`AsyncLeaseManager.from_env`][fencedlease.aio.AsyncLeaseManager.from_env] and
[`check_health`][fencedlease.aio.AsyncLeaseManager.check_health]: the twins of
`fencedlease._operations`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from redis.asyncio.retry import Retry

from .._backend import AsyncLeaseBackend
from .._clock import SYSTEM_CLOCK, Clock
from .._env import manager_from_env
from .._events import EventHook
from .._health import DEFAULT_HEALTH_TIMEOUT_MS, HealthReport
from .._shutdown import ShutdownReport
from ._health import check_health, connect

__all__ = ["Operations"]

_M = TypeVar("_M", bound="Operations")


class Operations:
    """``from_env`` and ``check_health``, mixed into the asyncio manager."""

    _backend: AsyncLeaseBackend
    _shutdown_timeout_ms: int

    @classmethod
    def _over_url(
        cls: type[_M], url: str, prefix: str, clock: Clock, on_event: EventHook | None,
        options: dict[str, Any],
    ) -> _M:  # fmt: skip
        raise NotImplementedError

    def _check_open(self) -> None:
        raise NotImplementedError

    async def close(self, timeout_ms: int | None = None) -> ShutdownReport:
        raise NotImplementedError

    @classmethod
    async def from_env(
        cls: type[_M],
        environ: Mapping[str, str] | None = None,
        *,
        connect: bool = False,
        clock: Clock = SYSTEM_CLOCK,
        on_event: EventHook | None = None,
        **kwargs: Any,
    ) -> _M:
        """A manager configured by the ``FENCEDLEASE_*`` variables of ``environ``: the twin of
        [`LeaseManager.from_env`][fencedlease.LeaseManager.from_env] (the table of variables is
        there), awaited so that ``connect=True`` can check the store at once; the waits between
        attempts are the clock's ``async_sleep`` (or `asyncio.sleep`). ``FENCEDLEASE_MAX_RETRIES``
        becomes a ``redis.asyncio.retry.Retry``.

        Raises:
            ValidationError: as [`LeaseManager.from_env`][fencedlease.LeaseManager.from_env],
                naming the variable.
            BackendError: ``connect=True`` and no attempt reached the store (the last failure
                in ``__cause__``; the manager was closed again).
        """
        manager, config = manager_from_env(
            lambda url, prefix, options: cls._over_url(url, prefix, clock, on_event, options),
            environ, kwargs, Retry,
        )  # fmt: skip
        manager._shutdown_timeout_ms = config.shutdown_timeout_ms
        if connect:
            timeout_ms = config.connect_timeout_ms or DEFAULT_HEALTH_TIMEOUT_MS
            try:
                await _connect(manager._backend, config.connect_max_attempts, timeout_ms, clock)
            except BaseException:
                await manager.close()
                raise
        return manager

    async def check_health(self, timeout_ms: int = DEFAULT_HEALTH_TIMEOUT_MS) -> HealthReport:
        """Check that the store answers: the twin of
        [`LeaseManager.check_health`][fencedlease.LeaseManager.check_health], over the manager's
        client, the whole check bounded by ``timeout_ms`` (see `fencedlease.aio._health`). Starts
        no task and takes no lease.

        Returns:
            [`HealthReport`][fencedlease.HealthReport]: ``ping_ms``, ``script_ms``, ``total_ms``.

        Raises:
            ValidationError: ``timeout_ms`` is not an int in 1..2,147,483,647.
            BackendError: the store failed, or gave no answer within ``timeout_ms``
                (``timed_out``).
            ManagerClosedError: the manager is closed.
        """
        self._check_open()
        return await check_health(self._backend, timeout_ms)


_connect = connect
