"""What both faces' ``Operations`` mixins and health checks share (`fencedlease._async.operations`,
`fencedlease._async.health` and their generated sync namesakes): the stubs of the manager they are
mixed into, ``from_env`` up to its start-up check, and the health check's report, probe and
errors. No I/O."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import attrs
from redis.backoff import ExponentialBackoff

from fencedlease._core.clock import Clock
from fencedlease._core.env import manager_from_env
from fencedlease._core.errors import BackendError
from fencedlease._core.events import EventHook
from fencedlease._redis.options import jittered_retry
from fencedlease._redis.scripts import Script

__all__ = [
    "DEFAULT_HEALTH_TIMEOUT_MS",
    "HEALTH_PROBE_KEY",
    "NOOP",
    "NOT_READ",
    "Eviction",
    "HealthReport",
    "OperationsBase",
    "connect_backoff_s",
    "connect_error",
    "too_slow",
]

DEFAULT_HEALTH_TIMEOUT_MS = 1_000
"""How long ``check_health`` waits by default, in milliseconds (both faces)."""

#: The key other stores' checks inspect (a read: nothing is written).
HEALTH_PROBE_KEY = "fencedlease-health-probe"
_NOOP_SOURCE = "return 1"
NOOP = Script("noop", _NOOP_SOURCE, hashlib.sha1(_NOOP_SOURCE.encode()).hexdigest())  # noqa: S324
# start-up connect: wait 0.1 s, 0.2 s, 0.4 s ... at most 2 s between attempts
_CONNECT_BACKOFF = ExponentialBackoff(cap=2.0, base=0.1)


@attrs.frozen
class HealthReport:
    """What [`check_health`][fencedlease.LeaseManager.check_health] measured, in milliseconds
    (floats): ``ping_ms`` the ``PING`` (other stores: an ``inspect`` of a probe key),
    ``script_ms`` the no-op script (None for stores without scripts), ``total_ms`` the whole
    check, connecting included.

    ``maxmemory_policy``: the Redis store's, from ``INFO memory`` (a cluster's: the first
    primary's that evicts, else ``noeviction``); None for other stores and where ``INFO`` is
    refused. ``findings``: for each server whose policy is not ``noeviction``, what it risks and
    the fix (the text of its [`UnsafeRedisWarning`][fencedlease.UnsafeRedisWarning]); empty when
    nothing was found."""

    ping_ms: float
    script_ms: float | None
    total_ms: float
    maxmemory_policy: str | None = None
    findings: tuple[str, ...] = ()


Eviction = tuple[str | None, tuple[str, ...]]
"""A health check's eviction finding: `HealthReport`'s ``maxmemory_policy`` and ``findings``."""

NOT_READ: Eviction = (None, ())


def too_slow(total_ms: float, timeout_ms: int) -> BackendError:
    """The error of a check that took ``total_ms`` against a bound of ``timeout_ms``."""
    return BackendError(
        f"health check: no answer within {timeout_ms} ms (took {total_ms:.1f} ms)",
        sent="maybe",
        timed_out=True,
    )


def connect_backoff_s(failures: int) -> float:
    """Seconds to wait after the ``failures``-th failed start-up attempt (1, 2, ...)."""
    return float(_CONNECT_BACKOFF.compute(failures - 1))


def connect_error(attempts: int, last: BackendError) -> BackendError:
    """The start-up error after ``attempts`` failed checks, the last one in ``__cause__``."""
    error = BackendError(
        f"the store could not be reached in {attempts} attempt(s): {last}",
        sent=last.sent,
        timed_out=last.timed_out,
    )
    error.__cause__ = last
    return error


_M = TypeVar("_M", bound="OperationsBase")


class OperationsBase:
    """The manager's parts that ``from_env``, ``check_health`` and ``keep_alive`` use."""

    _shutdown_timeout_ms: int

    @classmethod
    def _over_url(
        cls: type[_M], url: str, prefix: str, clock: Clock, on_event: EventHook | None,
        options: dict[str, Any],
    ) -> _M:  # fmt: skip
        raise NotImplementedError

    def _check_open(self) -> None:
        raise NotImplementedError

    @classmethod
    def _from_env_config(
        cls: type[_M], environ: Mapping[str, str] | None, connect: bool, clock: Clock,
        on_event: EventHook | None, kwargs: dict[str, Any], retry_class: Callable[..., Any],
    ) -> tuple[_M, tuple[int, int] | None]:  # fmt: skip
        """The manager ``from_env`` makes (its shutdown timeout set), and its start-up check:
        ``(attempts, timeout_ms)`` (the connect timeout, else the health check's default), or
        None without ``connect``. ``retry_class``: the face's redis-py ``Retry``.

        Raises:
            ValidationError: as ``from_env``, naming the variable.
        """
        manager, config = manager_from_env(
            lambda url, prefix, options: cls._over_url(url, prefix, clock, on_event, options),
            environ, kwargs, jittered_retry(retry_class),
        )  # fmt: skip
        manager._shutdown_timeout_ms = config.shutdown_timeout_ms
        if not connect:
            return manager, None
        timeout_ms = config.connect_timeout_ms or DEFAULT_HEALTH_TIMEOUT_MS
        return manager, (config.connect_max_attempts, timeout_ms)
