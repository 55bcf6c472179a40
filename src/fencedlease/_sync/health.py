"""Health checks of a manager's store (sync; the asyncio twin is `fencedlease._async.health`), and
the start-up connect of ``from_env(connect=True)``.

A check starts no background work (no renewer thread, no hand-off listener) and takes no lease:

- Redis: a ``PING``, then an ``EVALSHA`` of a one-line script that returns 1 (on ``NOSCRIPT``,
  one ``EVAL`` that caches it): the server answers and runs scripts. On the sync face both go
  over a connection of their own, made with the caller's address, credentials and TLS but with
  ``timeout_ms`` as its connect and socket timeouts and no retries, closed afterwards.
- Other stores (memory, SQLite, a backend of the caller's): an ``inspect`` of a probe key, the
  cheapest read every backend has (``ping_ms``; ``script_ms`` is None: no scripts there).

Redis, Sentinel and Cluster backends then read ``INFO memory`` (over the check's own connection
where there is one; on a cluster every primary) for ``maxmemory_policy``, reported in
``maxmemory_policy`` and, when it evicts, in ``findings``; the first check that finds it warns
about it once per backend ([`UnsafeRedisWarning`][fencedlease.UnsafeRedisWarning], see
`fencedlease._redis.eviction`), and the backend's first acquire then reads it no more. A server
that refuses ``INFO`` (an ACL) reports None and the check goes on.

A check that fails, or that takes longer than ``timeout_ms`` in all, raises
[`BackendError`][fencedlease.BackendError] (``timed_out`` for the latter).
"""

from __future__ import annotations

import hashlib
import time
import warnings
from typing import Any

import attrs
import redis
from redis.backoff import ExponentialBackoff, NoBackoff
from redis.retry import Retry

from fencedlease._core.backend import LeaseBackend
from fencedlease._core.clock import Clock
from fencedlease._core.errors import BackendError
from fencedlease._core.validate import check_ms
from fencedlease._redis.clients import client_redactor
from fencedlease._redis.errors import backend_errors, without_secrets
from fencedlease._redis.scripts import Script

from .redis_backend import RedisBackend
from .scripts import run_script

__all__ = [
    "HEALTH_PROBE_KEY",
    "NOOP",
    "NOT_READ",
    "Eviction",
    "HealthReport",
    "check_health",
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


def _probe_client(client: redis.Redis, timeout_s: float) -> redis.Redis | None:
    """A client of one connection of its own to ``client``'s server, with ``timeout_s`` as
    connect and socket timeouts and no retries; None for a pool of another kind (Sentinel's)."""
    pool = client.connection_pool
    if type(pool) not in (redis.ConnectionPool, redis.BlockingConnectionPool):
        return None
    kwargs: dict[str, Any] = dict(pool.connection_kwargs)
    kwargs.update(
        socket_timeout=timeout_s, socket_connect_timeout=timeout_s, retry=Retry(NoBackoff(), 0)
    )
    own = redis.ConnectionPool(connection_class=pool.connection_class, max_connections=1, **kwargs)
    return redis.Redis(connection_pool=own, retry=Retry(NoBackoff(), 0))


def check_health(
    backend: LeaseBackend, timeout_ms: int, clock: Clock | None = None
) -> HealthReport:
    """Check ``backend`` (see the module docstring), as the asyncio face's
    `fencedlease._async.health.check_health` does. ``clock`` is deprecated and unused (the timings
    are real time on both faces, which take no clock here): passing one warns.

    Warns:
        DeprecationWarning: ``clock`` was given.

    Raises:
        ValidationError: ``timeout_ms`` is not an int in 1..2,147,483,647.
        BackendError: the store failed, or the check took longer than ``timeout_ms``. Its
            message holds no piece of 3 characters or more of the client's password (a host
            or a port equal to it is shown as ``***``; the store's exception is then not
            chained).
    """
    if clock is not None:
        warnings.warn(
            "check_health(clock=...) is deprecated and ignored: a health check's timings are"
            " real time",
            DeprecationWarning,
            stacklevel=2,
        )
    bound = check_ms("timeout_ms", timeout_ms, 1)
    try:
        return _check(backend, bound)
    except BackendError as exc:
        error = without_secrets(exc, client_redactor(getattr(backend, "client", None)))
    raise error  # here: ``exc`` may name a host or a path that holds the password


def _check(backend: LeaseBackend, bound: int) -> HealthReport:
    start = time.perf_counter()
    client = getattr(backend, "client", None)
    if isinstance(client, redis.Redis):
        probe = _probe_client(client, bound / 1000)
        try:
            with backend_errors("health check: PING"):
                (probe or client).ping()
            pinged = time.perf_counter()
            with backend_errors("health check: script"):
                run_script(probe or client, NOOP, (), ())
            done = time.perf_counter()
            eviction = _eviction(backend, probe or client)
        finally:
            if probe is not None:
                probe.connection_pool.disconnect()
        script_ms: float | None = (done - pinged) * 1000
    else:
        backend.inspect(HEALTH_PROBE_KEY)
        pinged = done = time.perf_counter()
        script_ms = None
        eviction = _eviction(backend, None)
    total_ms = (time.perf_counter() - start) * 1000
    if total_ms > bound:
        raise too_slow(total_ms, bound)
    return HealthReport((pinged - start) * 1000, script_ms, total_ms, *eviction)


def _eviction(backend: LeaseBackend, client: redis.Redis | None) -> Eviction:
    """``backend``'s store's eviction policy, read over ``client`` (None: the backend's) and
    noted (`RedisBackend.read_eviction`); `NOT_READ` for a store that is not Redis."""
    if not isinstance(backend, RedisBackend):
        return NOT_READ
    with backend_errors("health check: INFO memory"):
        return backend.read_eviction(client)


def connect(backend: LeaseBackend, attempts: int, timeout_ms: int, clock: Clock) -> HealthReport:
    """Up to ``attempts`` health checks of ``timeout_ms`` each, waiting `connect_backoff_s`
    on ``clock`` between them; the first good check's report.

    Raises:
        BackendError: every attempt failed (the last failure in ``__cause__``).
    """
    for attempt in range(1, attempts + 1):
        try:
            return check_health(backend, timeout_ms)
        except BackendError as exc:
            if attempt == attempts:
                raise connect_error(attempts, exc) from exc
        clock.sleep(connect_backoff_s(attempt))
    raise AssertionError("unreachable")  # pragma: no cover
