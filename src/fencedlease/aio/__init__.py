"""fencedlease for asyncio: [`AsyncLeaseManager`][fencedlease.aio.AsyncLeaseManager] over
``redis.asyncio``.

The same library as [`fencedlease`][], not a second one: the same names (``Async`` prefixed
where the object awaits), arguments, defaults, validation, errors, Lua scripts and key layout, from
the same code wherever no I/O is involved. See ``docs/asyncio.md``.

The error classes are [`fencedlease`][]'s own, re-exported here for convenience.
"""

from __future__ import annotations

from fencedlease._core import errors as _errors
from fencedlease._core.backend import AsyncLeaseBackend
from fencedlease._core.clock import AsyncClock
from fencedlease._core.errors import *  # noqa: F403  (the error classes: _errors.__all__, added to ours below)
from fencedlease._core.view import LeaseInfo

from .._async.cluster_backend import AsyncRedisClusterBackend
from .._async.lease import AsyncAcquireResult, AsyncLease, AsyncLeaseOutcome
from .._async.manager import AsyncLeaseManager
from .._async.redis_backend import AsyncRedisBackend
from .._async.renewer import AsyncRenewer
from .._async.semaphore import AsyncSemaphore, AsyncSemaphoreLease
from .._async.urls import async_backend_from_url

__all__ = [
    "AsyncAcquireResult",
    "AsyncClock",
    "AsyncLease",
    "AsyncLeaseBackend",
    "AsyncLeaseManager",
    "AsyncLeaseOutcome",
    "AsyncRedisBackend",
    "AsyncRedisClusterBackend",
    "AsyncRenewer",
    "AsyncSemaphore",
    "AsyncSemaphoreLease",
    "LeaseInfo",
    "async_backend_from_url",
]
__all__ += _errors.__all__
