# GENERATED from src/fencedlease/_async/operations.py by `python scripts/unasync.py`:
# do not edit. Edit that source, then run it again (CI runs it with --check, failing while
# stale).
"""What [`LeaseManager`][fencedlease.LeaseManager] offers for running it in a
service: [`from_env`][fencedlease.LeaseManager.from_env],
[`check_health`][fencedlease.LeaseManager.check_health] and
[`keep_alive`][fencedlease.LeaseManager.keep_alive]."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Literal

from fencedlease._core.backend import LeaseBackend
from fencedlease._core.keep_alive import check_keep_alive
from fencedlease._core.shutdown import ShutdownReport
from fencedlease._core.validate import HoldArgs

from .from_env import DEFAULT_HEALTH_TIMEOUT_MS, FromEnv
from .health import HealthReport, check_health
from .lease import Lease

__all__ = ["Operations"]


class Operations(FromEnv):
    """``from_env``, ``check_health`` and ``keep_alive``, mixed into the manager."""

    _backend: LeaseBackend

    def close(self, timeout_ms: int | None = None) -> ShutdownReport:
        raise NotImplementedError

    def _in_hold(self, lease: Lease) -> bool:
        """Whether ``lease`` is renewed in the background now (a hold, a keep_alive)."""
        raise NotImplementedError

    def _keep_alive_block(self, lease: Lease, args: HoldArgs) -> AbstractContextManager[Lease]:
        """The block that renews ``lease`` by ``args`` (a hold's, without the acquire)."""
        raise NotImplementedError

    def check_health(self, timeout_ms: int = DEFAULT_HEALTH_TIMEOUT_MS) -> HealthReport:
        """Check that the store answers, for a readiness probe: on Redis a ``PING`` and a no-op
        script (``EVALSHA``, loaded on ``NOSCRIPT``) over a connection of their own; on other
        stores an ``inspect`` of a probe key. Waits ``timeout_ms`` (milliseconds) at most for the
        whole check. Starts no background work (no renewer, no hand-off listener) and takes no
        lease. See `fencedlease._sync.health`.

        Returns:
            [`HealthReport`][fencedlease.HealthReport]: ``ping_ms``, ``script_ms``, ``total_ms``.

        Raises:
            ValidationError: ``timeout_ms`` is not an int in 1..2,147,483,647.
            BackendError: the store failed, or gave no answer within ``timeout_ms``
                (``timed_out``).
            ManagerClosedError: the manager is closed.
        """
        self._check_open()
        return check_health(self._backend, timeout_ms)

    def keep_alive(
        self,
        lease: Lease,
        *,
        heartbeat_ms: int | Literal[False] | None = None,
        on_renew_error: Callable[[BaseException], object] | None = None,
    ) -> AbstractContextManager[Lease]:
        """Renew ``lease`` (from [`acquire`][fencedlease.LeaseManager.acquire] or
        [`restore`][fencedlease.LeaseManager.restore] of this manager) in the background
        for the ``with`` block, by the rules of
        [`hold`][fencedlease.LeaseManager.hold]: the same ``heartbeat_ms`` (against the
        lease's ``ttl_ms``) and ``on_renew_error``, the same loss notice (``lease.lost``,
        ``wait_lost()``, the block ends in [`LeaseLostError`][fencedlease.LeaseLostError]), and
        the same end: the lease is released when the block ends, however it ends, as at the end of
        a hold. A restored lease without ``expires_at`` has no deadline until its first renewal
        confirms one.

        Raises:
            ValidationError: ``lease`` is not a lease of this manager, is renewed in the background
                already (a hold, another keep_alive) or was released; a bad ``heartbeat_ms`` or
                ``on_renew_error`` (when ``keep_alive()`` is called, before any I/O).
            LeaseLostError: the lease is lost already (the block never runs), or was lost while
                the block ran.
            BackendError, ManagerClosedError: as [`hold`][fencedlease.LeaseManager.hold].
        """
        # Checked here, not on entry to the block: a bad argument raises at the call, as
        # ``hold`` does.
        heartbeat = check_keep_alive(
            lease, Lease, self._backend, heartbeat_ms, on_renew_error, self._in_hold(lease)
        )
        state = lease._state
        args = HoldArgs(state.key, state.ttl_ms, 0, 1, heartbeat, on_renew_error)
        return self._keep_alive_block(lease, args)
