# GENERATED from src/fencedlease/_async/health.py by `python scripts/unasync.py`:
# do not edit. Edit that source, then run it again (CI runs it with --check, failing while
# stale).
"""Health checks of a manager's store, and the start-up connect of ``from_env(connect=True)``.

A check starts no background work (no renewer, no hand-off listener) and takes no lease:

- Redis: a ``PING``, then an ``EVALSHA`` of a one-line script that returns 1 (on ``NOSCRIPT``,
  one ``EVAL`` that caches it): the server answers and runs scripts. Both go over a connection of
  their own, made with the caller's address, credentials and TLS but with twice ``timeout_ms`` as
  its connect and socket timeouts and no retries, closed afterwards (a pool of another kind,
  Sentinel's: over the caller's client).
- Other stores (memory, SQLite, a backend of the caller's): an ``inspect`` of a probe key, the
  cheapest read every backend has (``ping_ms``; ``script_ms`` is None: no scripts there).

Redis, Sentinel and Cluster backends then read ``INFO memory`` (over the check's own connection
where there is one; on a cluster every primary) for ``maxmemory_policy``, reported in
``maxmemory_policy`` and, when it evicts, in ``findings``; the first check that finds it warns
about it once per backend ([`UnsafeRedisWarning`][fencedlease.UnsafeRedisWarning], see
`fencedlease._redis.eviction`), and the backend's first acquire then reads it no more. A server
that refuses ``INFO`` (an ACL) reports None and the check goes on.

The caller waits ``timeout_ms`` at most for the whole check, whatever the store (a backend of the
caller's that hangs included): a check that fails, or that takes longer, raises
[`BackendError`][fencedlease.BackendError] (``timed_out`` for the latter).
"""

from __future__ import annotations

import time
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from fencedlease._core.backend import LeaseBackend
from fencedlease._core.clock import Clock
from fencedlease._core.errors import BackendError
from fencedlease._core.health import (
    HEALTH_PROBE_KEY,
    NOT_READ,
    Eviction,
    HealthReport,
    connect_error,
    too_slow,
)
from fencedlease._core.validate import check_ms
from fencedlease._redis.clients import client_redactor
from fencedlease._redis.errors import backend_errors, without_secrets
from fencedlease._redis.health import NOOP, connect_backoff_s

from .primitives import bounded, sleep
from .redis_backend import RedisBackend
from .scripts import run_script

__all__ = ["HealthReport", "check_health", "connect"]


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


def check_health(backend: LeaseBackend, timeout_ms: int) -> HealthReport:
    """Check ``backend`` (see the module docstring), ``timeout_ms`` in all.

    Raises:
        ValidationError: ``timeout_ms`` is not an int in 1..2,147,483,647.
        BackendError: the store failed, or gave no answer within ``timeout_ms`` (``timed_out``).
            Its message holds no piece of 3 characters or more of the client's password (a host
            or a port equal to it is shown as ``***``; the store's exception is then not
            chained).
    """
    bound = check_ms("timeout_ms", timeout_ms, 1)
    start = time.perf_counter()
    try:
        report = bounded(lambda: _check(backend, bound, start), bound / 1000)
    except TimeoutError as exc:
        raise too_slow((time.perf_counter() - start) * 1000, bound) from exc
    except BackendError as exc:
        error = without_secrets(exc, client_redactor(getattr(backend, "client", None)))
        if error is exc:
            raise
    else:
        if report.total_ms > bound:  # answered, but after the bound
            raise too_slow(report.total_ms, bound)
        return report
    raise error  # here: ``exc`` may name a host or a path that holds the password


def _check(backend: LeaseBackend, bound: int, start: float) -> HealthReport:
    client = getattr(backend, "client", None)
    if isinstance(client, redis.Redis):
        # A connection of its own: a check cut off by the bound leaves nothing in the caller's
        # pool. Its timeouts only end a check that runs on past the bound (a thread cannot be
        # cancelled): twice the bound, so that the bound, not a socket timeout, decides.
        probe = _probe_client(client, 2 * bound / 1000)
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
        pinged = time.perf_counter()
        script_ms = None
        eviction = _eviction(backend, None)
    total_ms = (time.perf_counter() - start) * 1000
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
        sleep(clock, connect_backoff_s(attempt))
    raise AssertionError("unreachable")  # pragma: no cover
