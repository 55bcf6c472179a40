"""The Redis key layout of a lease name, with no I/O.

Key layout. Every Redis key and channel of one name starts with the same *base*
``<prefix>:{<escaped name>}``:

|  |  |
| --- | --- |
| ``<base>`` | the lease: ``"<fencing_token>:<owner_token>"``, with a TTL |
| ``<base>:fence`` | the lease's fencing counter (no TTL, never deleted) |
| ``<base>:waiters`` | the hand-off queue (sorted set) |
| ``<base>:waiters:meta`` | the queued waiters' details (hash) |
| ``<base>:grant`` | a grant's metadata and lock-delay (hash), lock-delay past the lease |
| ``<base>:handoff:<listener id>`` | the hand-off pub/sub channel of one manager's waiters |
| ``<base>:resource`` | a ``RedisFencedResource``'s data |
| ``<base>:resource:fence`` | a ``RedisFencedResource``'s fence state (hash) |
| ``<base>:semaphore`` | a semaphore's slots (sorted set: owner token -> deadline ms), with a TTL |
| ``<base>:semaphore:tokens`` | a semaphore's slot tokens (hash: owner token -> token), with a TTL |
| ``<base>:semaphore:fence`` | a semaphore's fencing counter (no TTL, never deleted) |

The name is escaped so that the base is injective: ``%``, ``{`` and ``}`` become ``%25``, ``%7B``
and ``%7D``, and a prefix may not hold a brace (``ValidationError``). So the base holds exactly one
``{`` and one ``}``: the text between them is the Redis Cluster hash tag, which every key of one
name shares (one slot), two different ``(prefix, name)`` pairs never give one base, and the
suffixes above never make one key of two roles.

For operators and tools that look at Redis directly (a dashboard, a fault injector, a script that
reads the fencing counter), [`redis_keys`][fencedlease.redis_keys] names them, so nobody rebuilds
the layout by hand:

```
keys = fencedlease.redis_keys("fencedlease", "orders:42")
keys.fence                      # 'fencedlease:{orders:42}:fence'
redis.Redis().get(keys.fence)   # the last fencing token granted for the key
```

"""

from __future__ import annotations

import functools
import secrets
from collections.abc import Sequence
from typing import Final

import attrs

from fencedlease._core.protocol import GrantExtras, metadata_json
from fencedlease._core.validate import check_key, check_prefix

__all__ = [
    "RedisKeys",
    "control_channel",
    "enqueue_args",
    "escape_name",
    "fence_key",
    "grant_args",
    "grant_key",
    "handoff_channel",
    "key_base",
    "lease_key",
    "lease_keys",
    "listener_id",
    "redis_keys",
    "renew_many_args",
    "resource_keys",
    "semaphore_keys",
    "waiters_key",
    "waiters_meta_key",
]

KEYS_CACHED: Final = 1024
"""How many keys' names `lease_keys` and `fence_key` keep built (least recently used out)."""

_ESCAPES: Final = str.maketrans({"%": "%25", "{": "%7B", "}": "%7D"})


def escape_name(name: str) -> str:
    """``name`` with ``%``, ``{`` and ``}`` percent-encoded, so it cannot end or open a hash tag."""
    return name.translate(_ESCAPES)


def key_base(prefix: str, name: str) -> str:
    """``<prefix>:{<escaped name>}``: the start of every key of ``name`` (see the module doc).

    ``prefix`` must hold no brace (checked by `fencedlease._core.validate.check_prefix`)."""
    return f"{prefix}:{{{name.translate(_ESCAPES)}}}"


def lease_key(prefix: str, key: str) -> str:
    """The Redis key holding the lease on ``key``: ``<base>``."""
    return key_base(prefix, key)


@functools.lru_cache(maxsize=KEYS_CACHED)
def fence_key(prefix: str, key: str) -> str:
    """The Redis key holding ``key``'s fencing counter: ``<base>:fence`` (kept for the last
    `KEYS_CACHED` keys: every acquire names its counter)."""
    return key_base(prefix, key) + ":fence"


def waiters_key(prefix: str, key: str) -> str:
    """The sorted set of ``key``'s queued waiters: ``<base>:waiters``."""
    return key_base(prefix, key) + ":waiters"


def waiters_meta_key(prefix: str, key: str) -> str:
    """The hash of the queued waiters' deadlines: ``<base>:waiters:meta``."""
    return key_base(prefix, key) + ":waiters:meta"


def grant_key(prefix: str, key: str) -> str:
    """The hash of the grant details of ``key``'s lease (metadata, lock-delay): ``<base>:grant``.
    The lease scripts name it from the lease key (``KEYS[1] .. ':grant'``), in its hash slot."""
    return key_base(prefix, key) + ":grant"


def grant_args(queue: Sequence[str], extras: GrantExtras | None) -> tuple[str, ...]:
    """``acquire.lua``'s ARGV after its ask for the primary: the queueing arguments ``queue``,
    then, for a grant with ``extras``, its metadata and lock-delay as ARGV[9] and ARGV[10]
    (``queue`` padded to its four places with ``''``)."""
    if extras is None or extras.plain:
        return tuple(queue)
    padded = (*queue, *([""] * (4 - len(queue))))
    metadata = metadata_json(extras.metadata) if extras.metadata else ""
    return (*padded, metadata, str(extras.lock_delay_ms))


def handoff_channel(prefix: str, key: str, listener: str = "") -> str:
    """The pub/sub channel a release wakes ``key``'s waiters on: ``<base>:handoff:<listener>``,
    the channel of the one hand-off listener (`listener_id`) whose waiter is granted the key, so
    no other process wakes; ``<base>:handoff`` without a listener id."""
    channel = key_base(prefix, key) + ":handoff"
    return f"{channel}:{listener}" if listener else channel


def listener_id() -> str:
    """A new hand-off listener's id, 16 random lowercase hex digits (``enqueue.lua`` takes 1..32):
    its waiters' grants are published on ``handoff_channel(prefix, key, id)``."""
    return secrets.token_hex(8)


def control_channel(prefix: str) -> str:
    """A hand-off listener's own wake-up channel, ``<prefix>:handoff-control:<16 hex>``: a new
    random one per listener, so a manager wakes only its own."""
    return f"{prefix}:handoff-control:{secrets.token_hex(8)}"


def resource_keys(prefix: str, name: str) -> tuple[str, str]:
    """A ``RedisFencedResource``'s (fence state key, data key): ``<base>:resource:fence`` and
    ``<base>:resource``; never a lease's key, whatever the two prefixes."""
    base = key_base(prefix, name)
    return base + ":resource:fence", base + ":resource"


def semaphore_keys(prefix: str, name: str) -> tuple[str, str, str]:
    """KEYS of ``semaphore_acquire.lua``: the slot set ``<base>:semaphore``, the slot tokens
    ``<base>:semaphore:tokens`` and the counter ``<base>:semaphore:fence`` of semaphore ``name``
    (the first two are those of the renew and release scripts)."""
    base = key_base(prefix, name) + ":semaphore"
    return base, base + ":tokens", base + ":fence"


@functools.lru_cache(maxsize=KEYS_CACHED)
def lease_keys(prefix: str, key: str) -> tuple[str, str, str, str]:
    """KEYS of ``acquire.lua`` and ``release.lua``: the lease key, the counter, and the two
    waiter-queue keys (an acquire takes its owner out of the queue, a release may hand the lease
    to the oldest waiter; every key a script touches is declared). Kept for the last
    `KEYS_CACHED` keys, so a cycle of acquire and release builds them once."""
    base = key_base(prefix, key)
    return (base, base + ":fence", base + ":waiters", base + ":waiters:meta")


def renew_many_args(
    prefix: str, items: Sequence[tuple[str, str, int]]
) -> tuple[list[str], list[object]]:
    """KEYS and ARGV of ``renew_many.lua`` for ``(key, owner_token, ttl_ms)`` items."""
    keys = [lease_key(prefix, key) for key, _, _ in items]
    args: list[object] = []
    for _, owner_token, ttl_ms in items:
        args.append(owner_token)
        args.append(ttl_ms)
    return keys, args


def enqueue_args(
    prefix: str,
    key: str,
    owner_token: str,
    ttl_ms: int,
    wait_ms: int,
    final: bool,
    grace_ms: int,
    listener: str = "",
    direct: bool = False,
) -> tuple[tuple[str, str, str], tuple[str, int, int, int, str, str]]:
    """KEYS and ARGV of ``enqueue.lua`` (both faces). The last wait gets no grace: a hand-off
    after it would find nobody to claim it. ``listener``: the waiter's listener id (see
    `handoff_channel`; "" for the shared channel). ``direct``: the waiter takes a hand-off from
    its message, with no claim (needs ``listener``; see `fencedlease._handoff`)."""
    keys = (lease_key(prefix, key), waiters_key(prefix, key), waiters_meta_key(prefix, key))
    grace = 0 if final else grace_ms
    return keys, (owner_token, wait_ms, ttl_ms, grace, listener, "direct" if direct else "")


@attrs.frozen
class RedisKeys:
    """The Redis keys and the channel of one lease name, all starting with ``base``.

    ``lease``: the lease, a string ``"<fencing_token>:<owner_token>"`` with a TTL (the owner
    token is a secret: never log the value). ``fence``: the fencing counter, an integer (no TTL,
    never deleted). ``waiters``: the hand-off queue (sorted set). ``waiters_meta``: the queued
    waiters' details (hash). ``handoff``: the hand-off pub/sub channel; a release wakes a
    manager's waiter on ``<handoff>:<listener id>`` (16 hex digits, one per manager: only that
    manager's listener hears it), and a waiter queued without one on ``handoff`` itself.
    ``semaphore``, ``semaphore_tokens``, ``semaphore_fence``: a
    [`Semaphore`][fencedlease.Semaphore] of that name: its slots (sorted set: owner token ->
    deadline, Redis TIME in milliseconds), their fencing tokens (hash: owner token -> token),
    both with a TTL up to the latest deadline, and its fencing counter (no TTL, never deleted).

    All of them share one Redis Cluster hash slot (the text between the braces of ``base``). A
    [`RedisFencedResource`][fencedlease.RedisFencedResource]'s keys are its own ``data_key`` and
    ``fence_key``.
    """

    base: str
    lease: str
    fence: str
    waiters: str
    waiters_meta: str
    handoff: str
    semaphore: str
    semaphore_tokens: str
    semaphore_fence: str


def redis_keys(prefix: str, key: str) -> RedisKeys:
    """The Redis keys a [`RedisBackend`][fencedlease.RedisBackend] (or a manager built on one) with
    ``prefix`` uses for the lease name ``key``: ``base`` is ``<prefix>:{<escaped key>}``, where
    ``%``, ``{`` and ``}`` in ``key`` are written ``%25``, ``%7B`` and ``%7D``; the others are
    ``<base>``, ``<base>:fence``, ``<base>:waiters``, ``<base>:waiters:meta``,
    ``<base>:handoff``, and a semaphore's ``<base>:semaphore``, ``<base>:semaphore:tokens`` and
    ``<base>:semaphore:fence``. Pure: sends nothing to Redis.

    Raises:
        ValidationError: ``prefix`` is not a non-empty str or holds ``{`` or ``}``; ``key`` is not
            a non-empty str.
    """
    check_prefix(prefix)
    check_key(key)
    slots, tokens, counter = semaphore_keys(prefix, key)
    return RedisKeys(
        base=key_base(prefix, key),
        lease=lease_key(prefix, key),
        fence=fence_key(prefix, key),
        waiters=waiters_key(prefix, key),
        waiters_meta=waiters_meta_key(prefix, key),
        handoff=handoff_channel(prefix, key),
        semaphore=slots,
        semaphore_tokens=tokens,
        semaphore_fence=counter,
    )
