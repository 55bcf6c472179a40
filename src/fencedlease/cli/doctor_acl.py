"""The ACL part of ``fencedlease doctor``: may a user run every command fencedlease sends, on keys
and channels under its prefix? ``ACL DRYRUN`` answers on Redis 7; Redis 6.2 has none, so the rules
of ``ACL GETUSER`` are replayed here.

The commands are the library's own list (``ACL_COMMANDS`` of ``fencedlease._core.acl``, read at each
check), never a copy: each is probed with arguments built from the server's ``COMMAND INFO`` (its
arity and key positions), a key or channel under the prefix where the command takes one.
"""

from __future__ import annotations

import fnmatch
import re
from typing import Any

import redis

from fencedlease import redis_keys
from fencedlease._core import acl as _acl
from fencedlease._core.acl import glob_escape

__all__ = ["Refusal", "acl_commands", "acl_probes", "acl_refusals", "as_text", "glob_escape"]

Refusal = tuple[str | None, str]
"""An ACL refusal: the ``ACL SETUSER`` rule that allows it (None: no such user), and what."""

_SENT_ARGUMENTS: dict[str, tuple[str, ...]] = {"INFO": ("replication",)}
"""The first arguments the library sends where a Redis 7 rule may name them
(``+info|replication``)."""


def as_text(value: Any) -> str:
    """A reply as text (bytes decoded as UTF-8, undecodable bytes replaced)."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def acl_commands(db: int) -> tuple[str, ...]:
    """The commands doctor checks: the library's ``ACL_COMMANDS``, and ``SELECT`` for a
    connection to a database other than 0 (redis-py sends it on connect)."""
    return (*_acl.ACL_COMMANDS, "SELECT") if db else tuple(_acl.ACL_COMMANDS)


def _command_info(client: redis.Redis, commands: tuple[str, ...]) -> dict[str, list[Any] | None]:
    """``COMMAND INFO`` of ``commands``, unparsed (redis-py's parser fails on a command the server
    does not know): each entry ``[name, arity, flags, first key, last key, step, categories,
    ...]``, None for an unknown command."""
    reply = client.execute_command("COMMAND INFO", *commands)  # type: ignore[no-untyped-call]
    return dict(zip(commands, reply, strict=True))


def _probe(command: str, entry: list[Any]) -> tuple[str, ...]:
    """Arguments for ``command`` (``K``: a key under the prefix, ``C``: a channel under it): the
    fewest its arity allows, a key at its first key position, a channel first for a pub/sub
    command, ``<script> 1 K`` for a script command (its keys are movable)."""
    arity, flags, first_key = int(entry[1]), {as_text(f) for f in entry[2]}, int(entry[3])
    args = list(_SENT_ARGUMENTS.get(command, ("0",) * (abs(arity) - 1)))
    if "pubsub" in flags:
        args[:1] = ["C"]
    elif "movablekeys" in flags:
        args = ["0", "1", "K", *args[3:]]
    elif first_key > 0:
        args[first_key - 1] = "K"
    return tuple(args)


def acl_probes(client: redis.Redis, db: int = 0) -> tuple[dict[str, tuple[str, ...]], list[str]]:
    """The probe of each command of `acl_commands` ``(db)`` (its arguments, see `_probe`), and
    the commands this server does not know.

    Raises:
        redis.exceptions.ResponseError: the connection may not run ``COMMAND``.
    """
    info = _command_info(client, acl_commands(db))
    probes = {c: _probe(c, entry) for c, entry in info.items() if entry is not None}
    return probes, [c for c, entry in info.items() if entry is None]


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
    info = _command_info(client, tuple(probes))
    categories = {
        name: {as_text(c).lower() for c in entry[6]}
        for name, entry in info.items()
        if entry is not None
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


def acl_refusals(client: redis.Redis, user: str, prefix: str, db: int = 0) -> list[Refusal]:
    """What ``user`` may not do of `acl_commands` ``(db)``, empty when it may do it all: for each
    refusal the ``ACL SETUSER`` rule that allows it (``+incr``, ``~<prefix>:*``, ``&<prefix>:*``;
    None for a user that does not exist) and what was refused (``"INCR (why)"``). A command the
    server does not know is refused too (``"XADD (unknown to this server)"``).

    Raises:
        redis.exceptions.ResponseError: the connection may not run ``ACL`` (or ``COMMAND``).
    """
    probes, unknown = acl_probes(client, db)
    refused: list[Refusal] = [(f"+{c.lower()}", f"{c} (unknown to this server)") for c in unknown]
    try:
        return _dryrun(client, user, prefix, probes) + refused
    except redis.exceptions.ResponseError as exc:
        if "not found" in str(exc):
            return [(None, f"no such user {user!r}")]
        if "unknown subcommand" in str(exc).lower():
            return _getuser_refusals(client, user, prefix, probes) + refused
        raise
