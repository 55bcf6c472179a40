"""A Redis ACL refusal in words: which command, key or channel the user may not use, and in a
script of the library's, which script line. Read from the server's reply text, which differs by
version (Redis 7.2 names the command; 7.0 and 6.2 give the script's SHA-1 and line, looked up in
the scripts the library registers as it makes them). Which redis-py error is an ACL refusal is
`fencedlease._redis.errors.acl_denial`'s to say; this module reads only text.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["describe_refusal", "register_script"]

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


def describe_refusal(message: str, *, noperm: bool) -> str | None:
    """What the Redis ACL refused, in words naming the command, from an error's ``message``; None
    when it is no ACL refusal. ``noperm``: the error is a ``NOPERM`` reply (a command, a key or a
    channel refused); else only a refused ``redis.call`` inside a script is one."""
    script = any(text in message for text in _SCRIPT_REFUSALS)
    if not script and not noperm:
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
