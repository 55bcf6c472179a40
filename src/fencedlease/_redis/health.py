"""The health check's Redis probe and report, shared by both faces' checks
(`fencedlease._async.health` and its generated sync namesake): the probe key other stores read, the
no-op script, the report, and the errors of a check too slow or a store never reached. No I/O."""

from __future__ import annotations

import hashlib

import attrs
from redis.backoff import ExponentialBackoff

from fencedlease._core.errors import BackendError
from fencedlease._redis.scripts import Script

__all__ = [
    "HEALTH_PROBE_KEY",
    "NOOP",
    "NOT_READ",
    "Eviction",
    "HealthReport",
    "connect_backoff_s",
    "connect_error",
    "too_slow",
]

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
