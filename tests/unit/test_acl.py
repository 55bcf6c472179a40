"""The ACL rule set cannot go stale: every command the scripts and the client code send is in it,
and the docs quote it; ACL refusals are named in words."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from redis.exceptions import NoPermissionError, ResponseError, WatchError

from fencedlease._core.acl import (
    ACL_COMMANDS,
    CLIENT_COMMANDS,
    CLUSTER_COMMANDS,
    SCRIPT_COMMANDS,
    acl_rules,
    acl_setuser_line,
    glob_escape,
)
from fencedlease._core.errors import ValidationError
from fencedlease._redis.errors import acl_denial
from fencedlease._redis.scripts import RELEASE
from fencedlease.redis_fencing import _SET

SRC = Path(__file__).resolve().parents[2] / "src" / "fencedlease"
DOCS = Path(__file__).resolve().parents[2] / "docs"

# What is not the library a lease user runs: the operator's command line (run as the operator:
# docs/operations.md) and the pytest plugin (it cleans a test's keys on a test's Redis).
NOT_LIBRARY = {"cli", "pytest_plugin.py"}

# redis-py methods the library calls on a client or a pub/sub object, and the command each sends.
CLIENT_METHODS: dict[str, str | None] = {
    "evalsha": "EVALSHA",
    "eval": "EVAL",
    "script_load": "SCRIPT|LOAD",
    "delete": "DEL",
    "hget": "HGET",
    "publish": "PUBLISH",
    "subscribe": "SUBSCRIBE",
    "unsubscribe": "UNSUBSCRIBE",
    "ping": "PING",
    "pubsub": None,  # no command: a pub/sub object
    "client": None,  # no command: a client on one connection of the same pool
    "pipeline": None,  # no command: its EVALs are sent as EVAL
    "get_message": None,  # reads
    "get_sharded_message": None,  # reads
    "get_default_node": None,  # no command: the cluster client's own map
    "ssubscribe": "SSUBSCRIBE",
    "sunsubscribe": "SUNSUBSCRIBE",
    "info": "INFO",
    "close": None,
    "aclose": None,
}


_WRAPPER = re.compile(r"local function (\w+)\(\.\.\.\)")


def _script_calls() -> dict[str, set[str]]:
    """Every ``redis.call``/``redis.pcall`` of each script, by file name."""
    found: dict[str, set[str]] = {}
    paths = sorted((SRC / "scripts").glob("*.lua"))
    # A script may wrap pcall in a forwarding helper (`local function read(...)`, defined in the
    # script or in a part prepended to it, lease_common.lua): the helper's own call is
    # `redis.pcall(...)`, and its callers name the command instead.
    wrappers = {w for path in paths for w in re.findall(_WRAPPER, path.read_text("utf-8"))}
    assert "read" in wrappers  # the scan sees lease_common.lua's helper
    for path in paths:
        text = path.read_text("utf-8")
        calls = re.findall(r"redis\.p?call\(\s*([^,)]*)", text)
        calls = [c for c in calls if c.strip() != "..."]
        for wrapper in wrappers:
            calls += re.findall(
                rf"\b{wrapper}\(\s*([^,)]*)", text.replace(f"function {wrapper}(", "")
            )
        assert calls or path.name == "fenced_accept.lua", path.name
        for first in calls:
            literal = re.fullmatch(r"""['"]([A-Za-z]+)['"]""", first.strip())
            assert literal, f"{path.name}: command is not a literal: redis.call({first}"
            found.setdefault(path.name, set()).add(literal.group(1).upper())
    return found


def test_every_script_command_is_in_the_rule_set() -> None:
    calls = _script_calls()
    assert len(calls) >= 10
    used = set().union(*calls.values())
    allowed = set(SCRIPT_COMMANDS) | set(CLUSTER_COMMANDS)
    missing = {name: sorted(c - allowed) for name, c in calls.items()}
    assert {name: c for name, c in missing.items() if c} == {}
    assert used <= set(ACL_COMMANDS) | set(CLUSTER_COMMANDS)
    assert {"INCR", "SET", "PEXPIRE", "PUBLISH", "ZPOPMIN", "HMGET"} <= used  # the scan sees them


def _client_calls() -> set[tuple[str, str]]:
    found: set[tuple[str, str]] = set()
    for path in SRC.rglob("*.py"):
        if NOT_LIBRARY & set(path.relative_to(SRC).parts):
            continue
        text = path.read_text("utf-8")
        assert "execute_command(" not in text, f"{path.name}: a raw command the scan cannot see"
        for method in re.findall(r"\b(?:_?client|pubsub)\.(\w+)\(", text):
            found.add((path.name, method))
    return found


def test_every_client_command_is_in_the_rule_set() -> None:
    calls = _client_calls()
    unknown = sorted(call for call in calls if call[1] not in CLIENT_METHODS)
    assert unknown == [], "map these redis-py methods to their command in CLIENT_METHODS"
    sent = {CLIENT_METHODS[method] for _, method in calls} - {None}
    assert sent <= set(CLIENT_COMMANDS) | set(CLUSTER_COMMANDS)
    # force_release is a script (the lease and its grant details at once): no DEL of the client's
    assert {"EVALSHA", "EVAL", "HGET", "PUBLISH", "SUBSCRIBE"} <= sent
    assert "DEL" not in sent
    # One NOSCRIPT policy (EVAL of the source) for every script: no SCRIPT LOAD is sent.
    assert "SCRIPT|LOAD" not in sent


def test_acl_commands_is_the_sorted_union() -> None:
    assert list(ACL_COMMANDS) == sorted(set(CLIENT_COMMANDS) | set(SCRIPT_COMMANDS))
    assert len(set(ACL_COMMANDS)) == len(ACL_COMMANDS)


def test_docs_quote_the_rule_set() -> None:
    """docs/semantics.md shows exactly the line the module builds for the default prefix."""
    line = acl_setuser_line("fencedlease", "fencedlease")
    assert line in (DOCS / "semantics.md").read_text("utf-8").splitlines()


def test_rules_for_a_prefix() -> None:
    rules = acl_rules("app:locks")
    assert rules[0] == "-@all"
    assert rules[1 : 1 + len(ACL_COMMANDS)] == tuple(f"+{c.lower()}" for c in ACL_COMMANDS)
    assert rules[1 + len(ACL_COMMANDS) :] == ("~app:locks:*", "resetchannels", "&app:locks:*")
    assert acl_rules("a", "b")[-5:] == ("~a:*", "~b:*", "resetchannels", "&a:*", "&b:*")


def test_prefix_is_glob_escaped() -> None:
    assert glob_escape("a*b?c[d]e\\f") == "a\\*b\\?c\\[d\\]e\\\\f"
    assert acl_rules("x*")[-3:] == ("~x\\*:*", "resetchannels", "&x\\*:*")


def test_line_quotes_arguments_with_spaces() -> None:
    line = acl_setuser_line("u", 'my "app"')
    assert line.startswith("ACL SETUSER u reset on ><password> -@all +del +eval ")
    assert line.endswith(' "~my \\"app\\":*" resetchannels "&my \\"app\\":*"')


@pytest.mark.parametrize("bad", ["", "a{b", "a}b"])
def test_bad_prefix_is_refused(bad: str) -> None:
    with pytest.raises(ValidationError) as caught:
        acl_rules(bad)
    assert caught.value.argument == "prefix"


def test_no_prefix_is_refused() -> None:
    with pytest.raises(ValidationError) as caught:
        acl_rules()
    assert caught.value.argument == "prefixes"


# -- naming a refusal ------------------------------------------------------------------------------

SEE = " (see 'Running as a least-privilege ACL user' in docs/semantics.md)"
PUBLISH_LINE = next(
    i for i, t in enumerate(RELEASE.source.splitlines(), 1) if "call('PUBLISH'" in t
)
SET_LINE = next(i for i, t in enumerate(_SET.source.splitlines(), 1) if "redis.call('SET'" in t)


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        # Redis 6.2 and 7.0, top level (recorded from live servers)
        (
            NoPermissionError("this user has no permissions to run the 'evalsha' command"),
            "may not run EVALSHA",
        ),
        (
            NoPermissionError(
                "this user has no permissions to run the 'publish' command or its subcommand"
            ),
            "may not run PUBLISH",
        ),
        (
            NoPermissionError("this user has no permissions to run the 'script|load' command"),
            "may not run SCRIPT|LOAD",
        ),
        (
            NoPermissionError(
                "this user has no permissions to access one of the keys used as arguments"
            ),
            "may not access a key outside its key patterns",
        ),
        (
            NoPermissionError(
                "this user has no permissions to access one of the channels used as arguments"
            ),
            "may not use a channel outside its channel patterns",
        ),
        # Redis 7.0 inside a script: the command is found on the script's line
        (
            ResponseError(
                "The user executing the script can't run this command or subcommand script: "
                f"{RELEASE.sha}, on @user_script:{PUBLISH_LINE}."
            ),
            f"may not run PUBLISH in release.lua line {PUBLISH_LINE}",
        ),
        (
            ResponseError(
                "The user executing the script can't publish to the channel mentioned in the "
                f"command script: {RELEASE.sha}, on @user_script:{PUBLISH_LINE}."
            ),
            "may not use a channel outside its channel patterns in release.lua line "
            f"{PUBLISH_LINE}",
        ),
        # Redis 6.2 inside a script; a fenced script (two files joined) is found too
        (
            ResponseError(
                f"Error running script (call to f_{_SET.sha}): @user_script:{SET_LINE}: "
                f"@user_script: {SET_LINE}: The user executing the script can't run this command "
                "or subcommand"
            ),
            f"may not run SET in fenced_set.lua line {SET_LINE}",
        ),
        (
            ResponseError(
                f"Error running script (call to f_{RELEASE.sha}): @user_script:{PUBLISH_LINE}: "
                f"@user_script: {PUBLISH_LINE}: The user executing the script can't access at "
                "least one of the keys mentioned in the command arguments"
            ),
            f"may not access a key outside its key patterns in release.lua line {PUBLISH_LINE}",
        ),
        # Redis 7.2+: the command, key or channel is named, whoever the user is
        (
            ResponseError(
                "ACL failure in script: User keys-and-channels has no permissions to run the "
                f"'publish' command script: {RELEASE.sha}, on @user_script:{PUBLISH_LINE}."
            ),
            f"may not run PUBLISH in release.lua line {PUBLISH_LINE}",
        ),
        (
            NoPermissionError("User u has no permissions to access the 'other:{k}' key"),
            "may not access a key outside its key patterns",
        ),
        (
            NoPermissionError(
                "User u has no permissions to access the 'other:{k}:handoff' channel"
            ),
            "may not use a channel outside its channel patterns",
        ),
        # a script that is not the library's, or a line without a call: still an ACL refusal
        (
            ResponseError(
                "The user executing the script can't run this command or subcommand script: "
                f"{'0' * 40}, on @user_script:3."
            ),
            "may not run a command of this call",
        ),
        (
            ResponseError(
                "The user executing the script can't run this command or subcommand script: "
                f"{RELEASE.sha}, on @user_script:1."
            ),
            "may not run a command of this call in release.lua line 1",
        ),
    ],
)
def test_denial_is_named(error: Exception, expected: str) -> None:
    assert isinstance(error, ResponseError)
    assert acl_denial(error) == f"the Redis ACL user {expected}{SEE}"


@pytest.mark.parametrize(
    "error",
    [
        ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value"),
        ResponseError("NOSCRIPT No matching script. Please use EVAL."),
        WatchError("the key changed"),
        ResponseError("user_script:1: Script attempted to access nonexistent global variable"),
    ],
)
def test_other_errors_are_not_denials(error: ResponseError) -> None:
    assert acl_denial(error) is None
