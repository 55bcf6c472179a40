"""The lease scripts share one prelude: each script is sent with the definitions of lease_common.lua
it uses, so reading, the token checks and the next-token computation exist once in Lua."""

from __future__ import annotations

import hashlib
import re
from importlib import resources

import pytest

from fencedlease._redis.scripts import (
    ACQUIRE,
    ENQUEUE,
    INSPECT,
    RELEASE,
    RENEW,
    RENEW_MANY,
    SHARED_HERE,
    Script,
    assemble,
    definitions,
)

SHARED = ["read", "is_token", "lease_value", "lease_at", "next_token", "foreign_type"]
ALL_SHARED = {
    name
    for name, _ in definitions(
        resources.files("fencedlease").joinpath("scripts/lease_common.lua").read_text("utf-8")
    )[1]
}


def script_text(name: str) -> str:
    return resources.files("fencedlease").joinpath(f"scripts/{name}.lua").read_text("utf-8")


@pytest.mark.parametrize("script", [ACQUIRE, RELEASE, RENEW, RENEW_MANY, ENQUEUE], ids=str)
def test_each_lease_script_is_the_prelude_it_uses_then_the_script(script: Script) -> None:
    """The source sent (and the SHA-1 EVALSHA names) is lease_common.lua's header and the shared
    definitions the script uses, then the script's own file, with the shared definitions that only
    the code after its SHARED_HERE line uses there; taken out again, the own file is left."""
    own = script_text(script.name)
    header, chunks = definitions(script_text("lease_common"))
    assert script.source.startswith(header + "\n")
    assert script.sha == hashlib.sha1(script.source.encode()).hexdigest()
    left = script.source.removeprefix(header + "\n")
    for _, body in chunks:
        left = left.replace(body + "\n", "", 1)
    assert left == own
    assert any(re.search(rf"\b{name}\(", own) for name in SHARED)
    for name in SHARED:
        assert f"local function {name}(" not in own


@pytest.mark.parametrize("script", [ACQUIRE, RELEASE, RENEW, RENEW_MANY, ENQUEUE], ids=str)
def test_each_shared_name_is_defined_once_before_its_first_use_and_used(script: Script) -> None:
    """Every shared definition in the source is used by the code, defined once, and before
    any line of code that names it runs (a definition after a use would be a nil call)."""
    code = [line.split("--", 1)[0] for line in script.source.splitlines()]
    made = [
        (m.group(1), i)
        for i, line in enumerate(code)
        if (m := re.match(r"local (?:function )?(\w+)\b", line)) and m.group(1) in ALL_SHARED
    ]
    defined = dict(made)
    assert len(defined) == len(made), f"{script.name}: a shared name defined twice"
    for name, at in defined.items():
        uses = [i for i, line in enumerate(code) if re.search(rf"\b{name}\b", line) and i != at]
        assert uses, f"{script.name}: {name} defined, never used"
        assert min(uses) > at, f"{script.name}: {name} used on line {min(uses) + 1} first"
    for name in ALL_SHARED - defined.keys():
        assert not any(re.search(rf"\b{name}\b", line) for line in code), (script.name, name)


def test_acquire_and_release_make_only_their_fast_paths_definitions_first() -> None:
    """The common grant and the common release run before the rarer paths' definitions."""
    for script, first in (
        (ACQUIRE, ["primary_id"]),
        (RELEASE, []),
    ):
        before = script.source.split(f"\n{SHARED_HERE}\n")[0]
        assert re.findall(r"^local (?:function )?(\w+)", before, re.M)[: len(first)] == first
        assert [
            n for n in re.findall(r"^local (?:function )?(\w+)", before, re.M) if n in ALL_SHARED
        ] == first


def test_each_shared_function_exists_once() -> None:
    """No script file but lease_common.lua defines a shared function or MAX_TOKEN."""
    folder = resources.files("fencedlease").joinpath("scripts")
    texts = {p.name: p.read_text("utf-8") for p in folder.iterdir() if p.name.endswith(".lua")}
    for name in [*SHARED, "MAX_TOKEN"]:
        defined = [
            f for f, text in texts.items() if re.search(rf"^local (function )?{name}\b", text, re.M)
        ]
        assert defined == ["lease_common.lua"], name


def test_inspect_needs_no_prelude() -> None:
    assert INSPECT.source == script_text("inspect")


LIBRARY = """-- header of the library

-- a constant
local LIMIT = '9'
local function low(s)
  return s <= LIMIT
end
-- uses low
local function mid(s)
  return low(s)
end
local function unused()
  return 1
end
local function late(s)  -- mid( in a comment does not count
  return #s
end
"""


def test_assemble_takes_only_the_definitions_used_and_theirs_in_file_order() -> None:
    own = "return mid(ARGV[1]) -- late(x) is a comment; 'unused(' a string\n"
    source = assemble([LIBRARY], own)
    header, chunks = definitions(LIBRARY)
    assert header == "-- header of the library"
    assert [name for name, _ in chunks] == ["LIMIT", "low", "mid", "unused", "late"]
    bodies = dict(chunks)
    assert bodies["LIMIT"] == "-- a constant\nlocal LIMIT = '9'"
    assert source == "\n".join([header, bodies["LIMIT"], bodies["low"], bodies["mid"], own])


def test_assemble_puts_the_definitions_only_later_code_uses_after_the_marker() -> None:
    own = f"local x = low(ARGV[1])\n{SHARED_HERE}\nreturn late(ARGV[1]) and mid(ARGV[1])\n"
    source = assemble([LIBRARY], own)
    _, chunks = definitions(LIBRARY)
    bodies = dict(chunks)
    assert source == "\n".join(
        [
            "-- header of the library",
            bodies["LIMIT"],
            bodies["low"],
            f"local x = low(ARGV[1])\n{SHARED_HERE}",
            bodies["mid"],
            bodies["late"],
            "return late(ARGV[1]) and mid(ARGV[1])\n",
        ]
    )
    assert assemble([], own) == own


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("redis.call('PING')", "a statement outside any definition: \"redis.call('PING')\""),
        ("local a, b = 1, 2", "not a definition of one name: 'local a, b = 1, 2'"),
        ("if x then", "a statement outside any definition: 'if x then'"),
    ],
)
def test_a_shared_file_with_code_outside_a_definition_is_refused(line: str, message: str) -> None:
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        definitions(LIBRARY + line + "\n")
