"""The fenced_*.lua scripts: documented headers, and one rule shared by all of them."""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

import pytest

from fencedlease._redis.keys import resource_keys
from fencedlease._redis.scripts import Script, definitions

OPS = ["accept", "set", "hset", "get", "hgetall"]


def script_text(name: str) -> str:
    return resources.files("fencedlease").joinpath(f"scripts/{name}.lua").read_text("utf-8")


@pytest.mark.parametrize("name", ["fenced_check"] + [f"fenced_{op}" for op in OPS])
def test_each_script_opens_with_keys_argv_and_returns(name: str) -> None:
    """Every fenced script's opening comment block names its KEYS, ARGV and return shape."""
    header = []
    for line in script_text(name).splitlines():
        if not line.startswith("--"):
            break
        header.append(line)
    text = "\n".join(header)
    assert "KEYS[1]" in text
    assert "ARGV[1" in text
    assert "returns" in text


@pytest.mark.parametrize("op", OPS)
def test_each_loaded_script_is_the_check_then_the_op(op: str) -> None:
    """The script sent to Redis is fenced_check.lua's header and the definitions the op uses
    (the check always), then fenced_<op>.lua, so the rule exists once in Lua, and only the check
    calls HMGET on the fence."""
    loaded = Script.load(f"fenced_{op}", "fenced_check", f"fenced_{op}")
    own = script_text(f"fenced_{op}")
    header, chunks = definitions(script_text("fenced_check"))
    used = [body for name, body in chunks if name != "fenced_read" or op in ("get", "hgetall")]
    assert loaded.source == "\n".join([header, *used, own])
    assert re.search(r"\bfence(_check|d_read)\(", own)
    assert "HMGET" not in script_text(f"fenced_{op}")
    # the check runs once: called by the op, or by fenced_check.lua's fenced_read for a read
    own = script_text(f"fenced_{op}")
    assert own.count("fence_check()") + own.count("fenced_read(") == 1
    assert len(loaded.sha) == 40


def test_tokens_are_never_lua_numbers() -> None:
    """No fenced script turns a token into a Lua number (a double: 2**53 + 1 would become 2**53);
    the check compares decimal strings. The behaviour itself is tested on a real Redis in
    tests/live/test_redis_fencing.py::test_tokens_past_2_53_are_told_apart."""
    for name in ["fenced_check"] + [f"fenced_{op}" for op in OPS]:
        assert "tonumber" not in script_text(name), name
    assert "compare_tokens(token, last)" in script_text("fenced_check")


def test_the_fenced_reads_share_one_function() -> None:
    """fenced_get.lua and fenced_hgetall.lua differ only by their read: the check, the fence's
    move and the reply's shape are fenced_check.lua's fenced_read, which checks once."""
    check = script_text("fenced_check")
    body = check[check.index("local function fenced_read(") :]
    assert body.count("fence_check()") == 1
    assert body.count("fence_commit(fp, key)") == 1
    for op, command in [("get", "GET"), ("hgetall", "HGETALL")]:
        code = [
            line for line in script_text(f"fenced_{op}").splitlines() if not line.startswith("--")
        ]
        assert code == [
            "return fenced_read(function()",
            f"  return redis.call('{command}', KEYS[2])",
            "end)",
        ]


def test_docs_state_the_resource_key_layout() -> None:
    """docs/fencing.md gives RedisFencedResource's keys as <base>:resource and
    <base>:resource:fence, as _redis.keys.resource_keys makes them, and not the layout before."""
    docs = (Path(__file__).resolve().parents[2] / "docs" / "fencing.md").read_text("utf-8")
    assert "`<prefix>:{<name>}:resource`" in docs
    assert "`<prefix>:{<name>}:resource:fence`" in docs
    assert "<prefix>:{<name>}:fence" not in docs
    assert resource_keys("fencedlease:fenced", "profile:42") == (
        "fencedlease:fenced:{profile:42}:resource:fence",
        "fencedlease:fenced:{profile:42}:resource",
    )
    assert "fencedlease:fenced:{profile:42}:resource:fence" in docs
