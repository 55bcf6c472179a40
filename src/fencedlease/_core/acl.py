"""What a Redis ACL user needs to run fencedlease, and what to say when Redis refuses.

The rule set is written once here; ``docs/semantics.md`` quotes `acl_setuser_line` and the
live tests create their users from `acl_rules`. A unit test reads every
``scripts/*.lua`` for ``redis.call('X'`` / ``redis.pcall('X'`` and every client call of the
library, and fails when a command is missing from `ACL_COMMANDS`.

A refusal is named (which command, which script line) by
`fencedlease._redis.errors.acl_denial`, where the other redis-py errors are mapped, in the words
of `fencedlease._redis.acl_refusals`.

Redis checks a script's commands, keys and channels against the caller's ACL at each
``redis.call`` (Redis 6 and 7), so the commands the scripts call are part of the rule set, not
only ``EVALSHA``. Keys are ``<prefix>:*`` (the layout in `fencedlease._core.protocol`: every key
and every hand-off channel of a manager starts with ``<prefix>:``, a ``RedisFencedResource``'s
with its own prefix, ``fencedlease:fenced`` by default).
"""

from __future__ import annotations

import re
from typing import Final

from fencedlease._core.errors import ValidationError
from fencedlease._core.validate import check_prefix

__all__ = [
    "ACL_COMMANDS",
    "CLIENT_COMMANDS",
    "CLUSTER_COMMANDS",
    "SCRIPT_COMMANDS",
    "acl_rules",
    "acl_setuser_line",
    "glob_escape",
]

CLIENT_COMMANDS: Final[tuple[str, ...]] = (
    "EVALSHA",  # every lease operation, hand-off queueing and fenced resource access
    "EVAL",  # the same script once more after NOSCRIPT (SCRIPT FLUSH, a restart)
    "HGET",  # RedisFencedResource.last_token
    "PUBLISH",  # waking the manager's own hand-off listener
    "SUBSCRIBE",  # the hand-off listener
    "UNSUBSCRIBE",  # ... dropping a channel nobody waits on
    "PING",  # redis-py's health checks (health_check_interval), pub/sub keep-alive
    "WAIT",  # replica_acks: the replicas' acknowledgement of a grant or a renewal
)
"""Commands the library sends itself (redis-py sends ``AUTH``/``HELLO``, allowed to every user;
``CLIENT SETINFO`` is tried and a refusal ignored)."""

SCRIPT_COMMANDS: Final[tuple[str, ...]] = (
    "GET",
    "SET",
    "INCR",
    "DEL",
    "EXISTS",
    "TYPE",
    "PEXPIRE",
    "PEXPIREAT",  # the semaphore's two keys, and the hand-off queue's, expire at one moment
    "PTTL",
    "TIME",
    "ZADD",
    "ZREM",
    "ZSCORE",
    "ZCARD",
    "ZPOPMIN",
    "ZRANGE",  # the semaphore's scripts: the earliest and latest slot deadlines
    "ZRANGEBYSCORE",  # ... the expired slots, purged by
    "ZREMRANGEBYSCORE",
    "ZCOUNT",  # ... the live slots
    "HSET",
    "HGET",
    "HDEL",
    "HMGET",
    "HGETALL",
    "PUBLISH",
    "INFO",  # the primary's replication id (a refusal leaves it unknown)
)
"""Commands the Lua scripts call (``scripts/*.lua``); checked against the files by a unit test."""

CLUSTER_COMMANDS: Final[tuple[str, ...]] = (
    "SPUBLISH",  # release.lua's wake-up on a Redis Cluster (7+)
    "SSUBSCRIBE",  # the cluster hand-off listener (7+)
    "SUNSUBSCRIBE",
    "INFO",  # once per cluster listener: whether the cluster has sharded pub/sub
    "CLUSTER|NODES",  # epoch tokens: the slot owner's configEpoch, from every primary
)
"""Commands a manager on a Redis Cluster also sends, not in `ACL_COMMANDS` (Redis 6.2 does not
know the sharded ones): add ``+spublish +ssubscribe +sunsubscribe +info +cluster|nodes`` to a
cluster user's rules. Without the first four the hand-off degrades, never the leases: a refused
``SPUBLISH`` falls back to ``PUBLISH`` inside the script, a refused ``INFO`` makes the listener
the plain one, and waiters poll where no message reaches them. Without ``CLUSTER NODES`` no grant
of epoch tokens is confirmed (each is released and refused): allow it, or use
``fencing="counter"``."""

ACL_COMMANDS: Final[tuple[str, ...]] = tuple(sorted(set(CLIENT_COMMANDS) | set(SCRIPT_COMMANDS)))
"""Every Redis command a fencedlease user runs, sorted: the client's calls and the scripts'
``redis.call`` s (on a Cluster add ``CLUSTER_COMMANDS``; ``fencedlease doctor`` checks a user
against this list)."""
"""Every command a fencedlease user must be allowed, sorted."""

_GLOB_SPECIAL: Final = re.compile(r"([\\*?\[\]])")


def glob_escape(text: str) -> str:
    """``text`` as a literal in a Redis glob pattern: ``*``, ``?``, ``[``, ``]``, ``\\``
    escaped with a backslash."""
    return _GLOB_SPECIAL.sub(r"\\\1", text)


def acl_rules(*prefixes: str) -> tuple[str, ...]:
    """The ``ACL SETUSER`` rules of a least-privilege fencedlease user for ``prefixes``.

    ``-@all``, one ``+<command>`` per `ACL_COMMANDS` entry, and for each prefix the key
    pattern ``~<prefix>:*`` and the channel pattern ``&<prefix>:*``, after ``resetchannels``
    (needed on Redis 6.2, whose ``acl-pubsub-default`` is ``allchannels``; Redis 7's default
    is ``resetchannels`` already). Give the lease manager's prefix, and a
    ``RedisFencedResource``'s if it is not under the manager's (the default
    ``fencedlease:fenced`` is under ``fencedlease``). Prefixes are glob-escaped.

    Raises:
        ValidationError: no prefix, or one `check_prefix` refuses.

    Redis 6.2 and 7: channel patterns (``&``) exist from 6.2; Redis 7's read-only and
    write-only key patterns (``%R~``, ``%W~``) are not used, since the library writes every key
    it reads.
    """
    if not prefixes:
        raise ValidationError("prefixes", "acl_rules needs at least one prefix")
    for prefix in prefixes:
        check_prefix(prefix)
    rules = ["-@all", *(f"+{command.lower()}" for command in ACL_COMMANDS)]
    rules += [f"~{glob_escape(prefix)}:*" for prefix in prefixes]
    rules.append("resetchannels")
    rules += [f"&{glob_escape(prefix)}:*" for prefix in prefixes]
    return tuple(rules)


def _cli_quote(arg: str) -> str:
    if arg and not re.search(r"[\s\"'\\]", arg):
        return arg
    return '"' + arg.replace("\\", "\\\\").replace('"', '\\"') + '"'


def acl_setuser_line(user: str, *prefixes: str) -> str:
    """The whole ``ACL SETUSER`` command for ``redis-cli``: ``reset``, ``on``, a password
    placeholder ``><password>`` to replace, and `acl_rules` (arguments with spaces or
    quotes are double-quoted).

    Raises:
        ValidationError: as `acl_rules`.
    """
    args = ["ACL", "SETUSER", user, "reset", "on", "><password>", *acl_rules(*prefixes)]
    return " ".join(_cli_quote(arg) for arg in args)
