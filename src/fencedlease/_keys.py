"""The Redis keys of one lease name, by their public names (built on the layout of
:mod:`fencedlease._protocol`).

For operators and tools that look at Redis directly (a dashboard, a fault injector, a script that
reads the fencing counter), so they never rebuild the layout by hand::

    keys = fencedlease.redis_keys("fencedlease", "orders:42")
    keys.fence                      # 'fencedlease:{orders:42}:fence'
    redis.Redis().get(keys.fence)   # the last fencing token granted for the key
"""

from __future__ import annotations

import attrs

from ._protocol import (
    fence_key,
    handoff_channel,
    key_base,
    lease_key,
    waiters_key,
    waiters_meta_key,
)
from ._validate import check_key, check_prefix

__all__ = ["RedisKeys", "redis_keys"]


@attrs.frozen
class RedisKeys:
    """The Redis keys and the channel of one lease name, all starting with ``base``.

    ``lease``: the lease, a string ``"<fencing_token>:<owner_token>"`` with a TTL (the owner
    token is a secret: never log the value). ``fence``: the fencing counter, an integer (no TTL,
    never deleted). ``waiters``: the hand-off queue (sorted set). ``waiters_meta``: the queued
    waiters' details (hash). ``handoff``: the pub/sub channel a release wakes waiters on.

    All five share one Redis Cluster hash slot (the text between the braces of ``base``). A
    :class:`~fencedlease.redis_fencing.RedisFencedResource`'s keys are its own ``data_key`` and
    ``fence_key``.
    """

    base: str
    lease: str
    fence: str
    waiters: str
    waiters_meta: str
    handoff: str


def redis_keys(prefix: str, key: str) -> RedisKeys:
    """The Redis keys a :class:`~fencedlease.RedisBackend` (or a manager built on one) with
    ``prefix`` uses for the lease name ``key``: ``base`` is ``<prefix>:{<escaped key>}``, where
    ``%``, ``{`` and ``}`` in ``key`` are written ``%25``, ``%7B`` and ``%7D``; the others are
    ``<base>``, ``<base>:fence``, ``<base>:waiters``, ``<base>:waiters:meta`` and
    ``<base>:handoff``. Pure: sends nothing to Redis.

    Raises:
        ValidationError: ``prefix`` is not a non-empty str or holds ``{`` or ``}``; ``key`` is not
            a non-empty str.
    """
    check_prefix(prefix)
    check_key(key)
    return RedisKeys(
        base=key_base(prefix, key),
        lease=lease_key(prefix, key),
        fence=fence_key(prefix, key),
        waiters=waiters_key(prefix, key),
        waiters_meta=waiters_meta_key(prefix, key),
        handoff=handoff_channel(prefix, key),
    )
