"""What a health check reports, on every store and both faces: the report, the probe key the
checks of stores without scripts read, and the errors of a check too slow or a store never
reached. No I/O; the Redis pieces of a check (the no-op script, the start-up backoff) are in
`fencedlease._redis.health`."""

from __future__ import annotations

import attrs

from .errors import BackendError

__all__ = [
    "HEALTH_PROBE_KEY",
    "NOT_READ",
    "Eviction",
    "HealthReport",
    "connect_error",
    "too_slow",
]

#: The key other stores' checks inspect (a read: nothing is written).
HEALTH_PROBE_KEY = "fencedlease-health-probe"


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


def connect_error(attempts: int, last: BackendError) -> BackendError:
    """The start-up error after ``attempts`` failed checks, the last one in ``__cause__``."""
    error = BackendError(
        f"the store could not be reached in {attempts} attempt(s): {last}",
        sent=last.sent,
        timed_out=last.timed_out,
    )
    error.__cause__ = last
    return error
