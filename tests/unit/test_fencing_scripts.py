"""The fenced_*.lua scripts: documented headers, and one rule shared by all of them."""

from __future__ import annotations

from importlib import resources

import pytest

from fencedlease import redis_fencing

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
    """The script sent to Redis is fenced_check.lua followed by fenced_<op>.lua, so the rule exists
    once in Lua, and only the check calls HMGET on the fence."""
    loaded = redis_fencing._FencedScript.load(op)
    assert loaded.source == script_text("fenced_check") + "\n" + script_text(f"fenced_{op}")
    assert "HMGET" not in script_text(f"fenced_{op}")
    assert script_text(f"fenced_{op}").count("fence_check()") == 1
    assert len(loaded.sha) == 40
