"""fencedlease: distributed leases on Redis with fencing tokens.

Every grant carries a fencing token, a number strictly larger than every earlier grant's of the
same key, so storage downstream can refuse a stale holder (Kleppmann, "How to do distributed
locking", 2016). See ``docs/semantics.md`` for what it guarantees and what it needs of Redis.
"""

from __future__ import annotations

import logging

from fencedlease._core.acl import ACL_COMMANDS, acl_rules, acl_setuser_line
from fencedlease._core.backend import AsyncLeaseBackend, LeaseBackend
from fencedlease._core.clock import Clock, SystemClock
from fencedlease._core.env import url_from_env
from fencedlease._core.errors import (
    BackendError,
    FencedLeaseError,
    LeaseKeyMismatchError,
    LeaseLostError,
    LeaseNotAcquiredError,
    ManagerClosedError,
    NestedHoldError,
    ReentrancyLimitError,
    ReplicationError,
    SemaphoreLeaseLostError,
    StaleTokenError,
    UnsafeRedisWarning,
    ValidationError,
)
from fencedlease._core.events import LeaseEvent
from fencedlease._core.fenced_resource import FencedResource
from fencedlease._core.fencing_access import owner_fingerprint
from fencedlease._core.redact import redact_text, redact_url
from fencedlease._core.shutdown import ShutdownReport
from fencedlease._core.view import LeaseInfo

from ._redis.keys import RedisKeys, redis_keys
from ._sync.cluster_backend import RedisClusterBackend
from ._sync.health import HealthReport
from ._sync.lease import AcquireResult, Lease, LeaseOutcome
from ._sync.manager import LeaseManager
from ._sync.redis_backend import RedisBackend
from ._sync.semaphore import Semaphore, SemaphoreLease
from .backends import MemoryBackend, SqliteBackend
from .redis_fencing import RedisFencedResource

__all__ = [
    "ACL_COMMANDS",
    "AcquireResult",
    "AsyncLeaseBackend",
    "BackendError",
    "Clock",
    "FencedLeaseError",
    "FencedResource",
    "HealthReport",
    "Lease",
    "LeaseBackend",
    "LeaseEvent",
    "LeaseInfo",
    "LeaseKeyMismatchError",
    "LeaseLostError",
    "LeaseManager",
    "LeaseNotAcquiredError",
    "LeaseOutcome",
    "ManagerClosedError",
    "MemoryBackend",
    "NestedHoldError",
    "RedisBackend",
    "RedisClusterBackend",
    "RedisFencedResource",
    "RedisKeys",
    "ReentrancyLimitError",
    "ReplicationError",
    "Semaphore",
    "SemaphoreLease",
    "SemaphoreLeaseLostError",
    "ShutdownReport",
    "SqliteBackend",
    "StaleTokenError",
    "SystemClock",
    "UnsafeRedisWarning",
    "ValidationError",
    "acl_rules",
    "acl_setuser_line",
    "owner_fingerprint",
    "redact_text",
    "redact_url",
    "redis_keys",
    "url_from_env",
]

__version__ = "0.1.0"

# A library's loggers are the application's to configure: without this handler, Python would print
# the library's records of WARNING and above to stderr through its last-resort handler in a program
# that configured no logging (the logging HOWTO's advice for libraries).
logging.getLogger("fencedlease").addHandler(logging.NullHandler())
