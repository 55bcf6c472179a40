"""[`AsyncLeaseManager.from_env`][fencedlease.aio.AsyncLeaseManager.from_env] and
[`check_health`][fencedlease.aio.AsyncLeaseManager.check_health] and
[`keep_alive`][fencedlease.aio.AsyncLeaseManager.keep_alive]: the twins of
`fencedlease._sync.operations`."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Literal, cast

from fencedlease._core.backend import AsyncLeaseBackend
from fencedlease._core.keep_alive import check_keep_alive
from fencedlease._core.shutdown import ShutdownReport
from fencedlease._core.validate import HoldArgs
from fencedlease._operations_shared import DEFAULT_HEALTH_TIMEOUT_MS

from .from_env import FromEnv
from .health import HealthReport, check_health
from .hold import _Hold
from .hold import _Manager as _HoldManager
from .lease import AsyncLease

__all__ = ["Operations"]


class Operations(FromEnv):
    """``from_env``, ``check_health`` and ``keep_alive``, mixed into the asyncio manager."""

    _backend: AsyncLeaseBackend
    _holds: set[_Hold]

    async def close(self, timeout_ms: int | None = None) -> ShutdownReport:
        raise NotImplementedError

    async def check_health(self, timeout_ms: int = DEFAULT_HEALTH_TIMEOUT_MS) -> HealthReport:
        """Check that the store answers: the twin of
        [`LeaseManager.check_health`][fencedlease.LeaseManager.check_health], over the manager's
        client, the whole check bounded by ``timeout_ms`` (see `fencedlease._async.health`). Starts
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

    def keep_alive(
        self,
        lease: AsyncLease,
        *,
        heartbeat_ms: int | Literal[False] | None = None,
        on_renew_error: Callable[[BaseException], object] | None = None,
    ) -> AbstractAsyncContextManager[AsyncLease]:
        """Renew ``lease`` (from [`acquire`][fencedlease.aio.AsyncLeaseManager.acquire] or
        [`restore`][fencedlease.aio.AsyncLeaseManager.restore] of this manager) in the background
        for the ``async with`` block: the twin of
        [`LeaseManager.keep_alive`][fencedlease.LeaseManager.keep_alive], with
        [`hold`][fencedlease.aio.AsyncLeaseManager.hold]'s rules (on loss the block's task is
        cancelled and the block ends in [`LeaseLostError`][fencedlease.LeaseLostError]; the lease
        is released when the block ends).

        Raises:
            ValidationError: as [`LeaseManager.keep_alive`][fencedlease.LeaseManager.keep_alive]
                (when ``keep_alive()`` is called).
            LeaseLostError: the lease is lost already (the block never runs), or was lost while
                the block ran.
            BackendError, ManagerClosedError: as [`hold`][fencedlease.aio.AsyncLeaseManager.hold].
        """
        held = any(hold.lease is lease for hold in self._holds)
        heartbeat = check_keep_alive(
            lease, AsyncLease, self._backend, heartbeat_ms, on_renew_error, held
        )
        state = lease._state
        args = HoldArgs(state.key, state.ttl_ms, 0, 1, heartbeat, on_renew_error)
        return _Hold(cast("_HoldManager", self), args, lease)
