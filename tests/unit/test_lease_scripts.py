"""The lease scripts share one prelude: lease_common.lua is prepended to each script that uses its
functions, so reading, the token checks and the next-token computation exist once in Lua."""

from __future__ import annotations

import re
from importlib import resources

import pytest

from fencedlease._redis.scripts import ACQUIRE, ENQUEUE, INSPECT, RELEASE, RENEW, RENEW_MANY, Script

SHARED = ["read", "is_token", "lease_value", "lease_at", "next_token", "foreign_type"]


def script_text(name: str) -> str:
    return resources.files("fencedlease").joinpath(f"scripts/{name}.lua").read_text("utf-8")


@pytest.mark.parametrize("script", [ACQUIRE, RELEASE, RENEW, RENEW_MANY, ENQUEUE], ids=str)
def test_each_lease_script_is_the_prelude_then_the_script(script: Script) -> None:
    """The source sent (and the SHA-1 EVALSHA names) is lease_common.lua, a newline, then the
    script's own file; the script uses a function of the prelude and defines none of them."""
    own = script_text(script.name)
    assert script.source == script_text("lease_common") + "\n" + own
    assert script.sha == Script.load(script.name, "lease_common", script.name).sha
    assert any(re.search(rf"\b{name}\(", own) for name in SHARED)
    for name in SHARED:
        assert f"local function {name}(" not in own


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
