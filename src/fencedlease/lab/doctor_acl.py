"""The ACL part of ``fencedlease doctor``: may a user run every command fencedlease sends, on keys
and channels under its prefix? ``ACL DRYRUN`` answers on Redis 7; Redis 6.2 has none, so the rules
of ``ACL GETUSER`` are replayed here.
"""

from __future__ import annotations

import fnmatch
import re
from typing import Any

import redis

from fencedlease import redis_keys

__all__ = ["ACL_PROBES", "Refusal", "acl_probes", "acl_refusals", "as_text", "glob_escape"]

_SHA = "0" * 40
_GLOB_SPECIAL = re.compile(r"([\\*?\[\]])")

Refusal = tuple[str | None, str]
"""An ACL refusal: the ``ACL SETUSER`` rule that allows it (None: no such user), and what."""


def as_text(value: Any) -> str:
    """A reply as text (bytes decoded as UTF-8, undecodable bytes replaced)."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


#: The commands a fencedlease user runs (``docs/semantics.md``, least-privilege ACL user), each
#: with arguments naming a key (``K``) or channel (``C``) under the prefix, so ``ACL DRYRUN`` checks
#: the key and channel patterns too. A unit test holds it equal to the library's own list.
ACL_PROBES: dict[str, tuple[str, ...]] = {
    "DEL": ("K",), "EVAL": ("return 0", "1", "K"), "EVALSHA": (_SHA, "1", "K"), "EXISTS": ("K",),
    "GET": ("K",), "HDEL": ("K", "f"), "HGET": ("K", "f"), "HGETALL": ("K",),
    "HMGET": ("K", "f"), "HSET": ("K", "f", "1"), "INCR": ("K",), "INFO": ("replication",),
    "PEXPIRE": ("K", "1"),
    "PING": (), "PTTL": ("K",), "PUBLISH": ("C", "1"), "SET": ("K", "1"), "SUBSCRIBE": ("C",),
    "TIME": (), "TYPE": ("K",), "UNSUBSCRIBE": ("C",), "WAIT": ("0", "0"),
    "ZADD": ("K", "1", "m"), "ZCARD": ("K",), "ZCOUNT": ("K", "0", "1"), "ZPOPMIN": ("K",),
    "ZRANGE": ("K", "0", "1"), "ZRANGEBYSCORE": ("K", "0", "1"), "ZREM": ("K", "m"),
    "ZREMRANGEBYSCORE": ("K", "0", "1"), "ZSCORE": ("K", "m"),
}  # fmt: skip


def glob_escape(text: str) -> str:
    """``text`` as a literal in a Redis glob pattern (``*``, ``?``, ``[``, ``]``, ``\\``
    escaped)."""
    return _GLOB_SPECIAL.sub(r"\\\1", text)


def _dryrun(
    client: redis.Redis, user: str, prefix: str, probes: dict[str, tuple[str, ...]]
) -> list[Refusal]:
    keys = redis_keys(prefix, "doctor")
    refused: list[Refusal] = []
    for command, probe in probes.items():
        args = [keys.lease if a == "K" else keys.handoff if a == "C" else a for a in probe]
        reply = as_text(client.execute_command("ACL DRYRUN", user, command, *args))  # type: ignore[no-untyped-call]
        if reply == "OK":
            continue
        if reply.endswith(" key"):
            refused.append((f"~{glob_escape(prefix)}:*", f"keys {keys.lease} ({reply})"))
        elif reply.endswith(" channel"):
            refused.append((f"&{glob_escape(prefix)}:*", f"channels {keys.handoff} ({reply})"))
        else:
            refused.append((f"+{command.lower()}", f"{command} ({reply})"))
    return refused


def _patterns(value: Any) -> list[str]:
    """Key or channel patterns of ``ACL GETUSER``: a list (6.2) or one string (7), ``~``/``&``
    and Redis 7's ``%RW~`` stripped."""
    words = as_text(value).split() if isinstance(value, (str, bytes)) else map(as_text, value)
    return [re.sub(r"^(%[RW]+~|~|&)", "", word) for word in words]


def _getuser_refusals(
    client: redis.Redis, user: str, prefix: str, probes: dict[str, tuple[str, ...]]
) -> list[Refusal]:
    """Redis 6.2 has no ``ACL DRYRUN``: replay ``ACL GETUSER``'s command rules in order (a
    category through ``COMMAND INFO``'s ACL categories) and match its key and channel patterns."""
    reply = client.execute_command("ACL", "GETUSER", user)  # type: ignore[no-untyped-call]
    if reply is None:
        return [(None, f"no such user {user!r}")]
    pairs = reply.items() if isinstance(reply, dict) else zip(reply[::2], reply[1::2], strict=True)
    rules = {as_text(k): v for k, v in pairs}
    info = client.execute_command("COMMAND", "INFO", *probes)  # type: ignore[no-untyped-call]
    categories = {
        as_text(name).upper(): {as_text(c).lower() for c in entry.get("acl_categories", [])}
        for name, entry in info.items()
    }
    allowed: set[str] = set()
    for rule in as_text(rules.get("commands", "")).split():
        rule = {"allcommands": "+@all", "nocommands": "-@all"}.get(rule, rule)
        sign, word = rule[0], rule[1:].lower()
        if word == "@all":
            hit = set(probes)
        elif word.startswith("@"):
            hit = {c for c in probes if word in categories.get(c, set())}
        else:
            hit = {word.upper()} & set(probes)
        allowed = allowed | hit if sign == "+" else allowed - hit
    refused: list[Refusal] = [(f"+{c.lower()}", c) for c in probes if c not in allowed]
    keys = redis_keys(prefix, "doctor")
    flags = {as_text(flag) for flag in rules.get("flags", [])}
    for kind, name, flag, sigil in (
        ("keys", keys.lease, "allkeys", "~"),
        ("channels", keys.handoff, "allchannels", "&"),
    ):
        patterns = _patterns(rules.get(kind, []))
        if flag not in flags and not any(fnmatch.fnmatchcase(name, p) for p in patterns):
            reason = f"{kind} {name} (patterns: {' '.join(patterns) or 'none'})"
            refused.append((f"{sigil}{glob_escape(prefix)}:*", reason))
    return refused


def acl_probes(db: int) -> dict[str, tuple[str, ...]]:
    """`ACL_PROBES`, and ``SELECT`` for a connection to a database other than 0 (redis-py sends
    it on connect)."""
    return {**ACL_PROBES, "SELECT": (str(db),)} if db else ACL_PROBES


def acl_refusals(client: redis.Redis, user: str, prefix: str, db: int = 0) -> list[Refusal]:
    """What ``user`` may not do of `acl_probes` ``(db)``, empty when it may do it all: for each
    refusal the ``ACL SETUSER`` rule that allows it (``+incr``, ``~<prefix>:*``, ``&<prefix>:*``;
    None for a user that does not exist) and what was refused (``"INCR (why)"``).

    Raises:
        redis.exceptions.ResponseError: the connection may not run ``ACL`` (or ``COMMAND``).
    """
    try:
        return _dryrun(client, user, prefix, acl_probes(db))
    except redis.exceptions.ResponseError as exc:
        if "not found" in str(exc):
            return [(None, f"no such user {user!r}")]
        if "unknown subcommand" in str(exc).lower():
            return _getuser_refusals(client, user, prefix, acl_probes(db))
        raise
