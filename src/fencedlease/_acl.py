"""What a Redis ACL user needs to run fencedlease, and what to say when Redis refuses.

The rule set is written once here; ``docs/semantics.md`` quotes :func:`acl_setuser_line` and the
live tests create their users from :func:`acl_rules`. A unit test reads every
``scripts/*.lua`` for ``redis.call('X'`` / ``redis.pcall('X'`` and every client call of the
library, and fails when a command is missing from :data:`ACL_COMMANDS`.

Redis checks a script's commands, keys and channels against the caller's ACL at each
``redis.call`` (Redis 6 and 7), so the commands the scripts call are part of the rule set, not
only ``EVALSHA``. Keys are ``<prefix>:*`` (the layout in :mod:`fencedlease._protocol`: every key
and every hand-off channel of a manager starts with ``<prefix>:``, a ``RedisFencedResource``'s
with its own prefix, ``fencedlease:fenced`` by default).
"""

from __future__ import annotations

import re
from typing import Final

from redis.exceptions import NoPermissionError, RedisError

from ._errors import ValidationError
from ._validate import check_prefix

__all__ = [
    "ACL_COMMANDS",
    "CLIENT_COMMANDS",
    "SCRIPT_COMMANDS",
    "acl_denial",
    "acl_rules",
    "acl_setuser_line",
    "glob_escape",
    "register_script",
]

CLIENT_COMMANDS: Final[tuple[str, ...]] = (
    "EVALSHA",  # every lease operation, hand-off queueing and fenced resource access
    "EVAL",  # the same script once more after NOSCRIPT (SCRIPT FLUSH, a restart)
    "SCRIPT|LOAD",  # RedisFencedResource after NOSCRIPT
    "DEL",  # force_release
    "HGET",  # RedisFencedResource.last_token
    "PUBLISH",  # waking the manager's own hand-off listener
    "SUBSCRIBE",  # the hand-off listener
    "UNSUBSCRIBE",  # ... dropping a channel nobody waits on
    "PING",  # redis-py's health checks (health_check_interval), pub/sub keep-alive
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
    "PTTL",
    "TIME",
    "ZADD",
    "ZREM",
    "ZSCORE",
    "ZCARD",
    "ZPOPMIN",
    "HSET",
    "HGET",
    "HDEL",
    "HMGET",
    "HGETALL",
    "PUBLISH",
)
"""Commands the Lua scripts call (``scripts/*.lua``); checked against the files by a unit test."""

ACL_COMMANDS: Final[tuple[str, ...]] = tuple(sorted(set(CLIENT_COMMANDS) | set(SCRIPT_COMMANDS)))
"""Every command a fencedlease user must be allowed, sorted; ``SCRIPT|LOAD`` is one subcommand."""

_GLOB_SPECIAL: Final = re.compile(r"([\\*?\[\]])")


def glob_escape(text: str) -> str:
    """``text`` as a literal in a Redis glob pattern: ``*``, ``?``, ``[``, ``]``, ``\\``
    escaped with a backslash."""
    return _GLOB_SPECIAL.sub(r"\\\1", text)


def acl_rules(*prefixes: str) -> tuple[str, ...]:
    """The ``ACL SETUSER`` rules of a least-privilege fencedlease user for ``prefixes``.

    ``-@all``, one ``+<command>`` per :data:`ACL_COMMANDS` entry, and for each prefix the key
    pattern ``~<prefix>:*`` and the channel pattern ``&<prefix>:*``, after ``resetchannels``
    (needed on Redis 6.2, whose ``acl-pubsub-default`` is ``allchannels``; Redis 7's default
    is ``resetchannels`` already). Give the lease manager's prefix, and a
    ``RedisFencedResource``'s if it is not under the manager's (the default
    ``fencedlease:fenced`` is under ``fencedlease``). Prefixes are glob-escaped.

    Raises:
        ValidationError: no prefix, or one :func:`~fencedlease._validate.check_prefix` refuses.

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
    placeholder ``><password>`` to replace, and :func:`acl_rules` (arguments with spaces or
    quotes are double-quoted).

    Raises:
        ValidationError: as :func:`acl_rules`.
    """
    args = ["ACL", "SETUSER", user, "reset", "on", "><password>", *acl_rules(*prefixes)]
    return " ".join(_cli_quote(arg) for arg in args)


# -- naming a refused command ----------------------------------------------------------------------

_SCRIPTS: dict[str, tuple[str, str]] = {}  # sha -> (name, source)


def register_script(name: str, source: str, sha: str) -> None:
    """Remember a script the library sends, so a refusal inside it can name the command."""
    _SCRIPTS[sha] = (name, source)


# Redis 7.2+: "... to run the 'publish' command"; a key: "... the 'k' key"; 6.2/7.0 below.
_NAMED: Final = re.compile(r"'([A-Za-z|]+)' command")
_CHANNEL: Final = re.compile(r"\bchannels? (?:used|mentioned)|' channel\b")
_KEY: Final = re.compile(r"\bkeys? (?:used|mentioned)|' key\b")
# Redis 7: "... script: <sha>, on @user_script:<line>."
# Redis 6.2: "(call to f_<sha>): @user_script:<line>: ..."
_SCRIPT_SHA: Final = re.compile(r"(?:script: |call to f_)([0-9a-f]{40})")
_SCRIPT_LINE: Final = re.compile(r"@user_script:\s*(\d+)")
_CALLS: Final = re.compile(r"redis\.p?call\(\s*['\"]([A-Za-z]+)['\"]")
_SEE: Final = "see 'Running as a least-privilege ACL user' in docs/semantics.md"
_SCRIPT_REFUSALS: Final = ("The user executing the script can't", "ACL failure in script")


def _in_script(message: str) -> tuple[str | None, str] | None:
    """(the command(s) called on the refused line, "<script>.lua line <n>") from a script
    error's text, when the script is one of the library's."""
    sha, line = _SCRIPT_SHA.search(message), _SCRIPT_LINE.search(message)
    if sha is None or line is None or sha.group(1) not in _SCRIPTS:
        return None
    name, source = _SCRIPTS[sha.group(1)]
    number = int(line.group(1))
    lines = source.splitlines()
    text = lines[number - 1] if 0 < number <= len(lines) else ""
    commands = list(dict.fromkeys(c.upper() for c in _CALLS.findall(text)))
    return (" or ".join(commands) or None), f"{name}.lua line {number}"


def acl_denial(exc: RedisError) -> str | None:
    """What the Redis ACL refused, in words naming the command, or None if ``exc`` is no ACL
    refusal.

    Understands ``NOPERM`` replies (a command, a key or a channel refused) and the errors of a
    refused ``redis.call`` inside a script: Redis 7.2 names the command itself; 7.0 and 6.2 give
    the script's SHA-1 and line, which are looked up in the library's own scripts
    (:func:`register_script`).
    """
    message = str(exc)
    script = any(text in message for text in _SCRIPT_REFUSALS)
    if not script and not isinstance(exc, NoPermissionError):
        return None
    where = _in_script(message) if script else None
    named = _NAMED.search(message)
    if named is not None:
        refused = f"may not run {named.group(1).upper()}"
    elif _CHANNEL.search(message):
        refused = "may not use a channel outside its channel patterns"
    elif _KEY.search(message):
        refused = "may not access a key outside its key patterns"
    elif where is not None and where[0] is not None:
        refused = f"may not run {where[0]}"
    else:
        refused = "may not run a command of this call"
    if where is not None:
        refused += f" in {where[1]}"
    return f"the Redis ACL user {refused} ({_SEE})"
