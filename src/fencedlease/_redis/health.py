"""The Redis pieces of a health check, shared by both faces' checks (`fencedlease._async.health`
and its generated sync namesake): the no-op script the check runs and the backoff between
start-up attempts (redis-py's). The report and the errors, which every store shares, are in
`fencedlease._core.health`. No I/O."""

from __future__ import annotations

import hashlib

from redis.backoff import ExponentialBackoff

from fencedlease._redis.scripts import Script

__all__ = ["NOOP", "connect_backoff_s"]

_NOOP_SOURCE = "return 1"
NOOP = Script("noop", _NOOP_SOURCE, hashlib.sha1(_NOOP_SOURCE.encode()).hexdigest())  # noqa: S324
# start-up connect: wait 0.1 s, 0.2 s, 0.4 s ... at most 2 s between attempts
_CONNECT_BACKOFF = ExponentialBackoff(cap=2.0, base=0.1)


def connect_backoff_s(failures: int) -> float:
    """Seconds to wait after the ``failures``-th failed start-up attempt (1, 2, ...)."""
    return float(_CONNECT_BACKOFF.compute(failures - 1))
