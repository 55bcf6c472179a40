"""The layer contracts (``[tool.importlinter]`` in pyproject.toml, run by ``lint-imports`` in CI)
cannot go stale, and the rules import-linter cannot state are checked here: no module of the sync
face reaches ``redis.asyncio`` (import-linter sees an external package only as a whole, ``redis``),
and ``import fencedlease`` loads nothing of the asyncio face.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "fencedlease"
tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
grimp = pytest.importorskip("grimp")  # installed with import-linter (the test extra)


def _pyproject() -> dict[str, Any]:
    data: dict[str, Any] = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))
    return data


def _contract(contract_id: str) -> dict[str, Any]:
    contracts = _pyproject()["tool"]["importlinter"]["contracts"]
    (found,) = [c for c in contracts if c["id"] == contract_id]
    return dict(found)


def _private_library_modules() -> set[str]:
    """Every module of the library whose own name starts with one underscore, and every private
    package (e.g. ``fencedlease._redis``) as one name: a forbidden package covers its modules."""
    found = set()
    for path in SRC.rglob("*.py"):
        parts = path.relative_to(SRC).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if not parts or parts[0] == "lab":
            continue
        for depth, part in enumerate(parts):
            if part.startswith("_") and not part.startswith("__"):
                found.add(".".join(("fencedlease", *parts[: depth + 1])))
                break
    return found


LAB_MAY_IMPORT = {"fencedlease._acl"}
"""The private modules the lab reads: ``_acl`` holds the library's one list of the commands a Redis
user needs, which ``fencedlease doctor`` checks a user against (a copy in the lab would drift)."""


def test_the_lab_contract_forbids_every_private_module() -> None:
    """import-linter's wildcards match whole names only, so the private modules are listed: a new
    one must join the list, and a removed one must leave it. Only `LAB_MAY_IMPORT` is left out."""
    contract = _contract("lab-uses-public-api")
    assert contract["type"] == "forbidden"
    assert contract["source_modules"] == ["fencedlease.lab"]
    private = _private_library_modules()
    assert {"fencedlease._sync", "fencedlease._state", "fencedlease._async"} <= private
    assert private >= LAB_MAY_IMPORT
    assert set(contract["forbidden_modules"]) == private - LAB_MAY_IMPORT


def test_the_lab_imports_of_private_modules_are_the_allowed_ones() -> None:
    """What the lab imports of the library's private modules is exactly `LAB_MAY_IMPORT`: an
    entry the lab stopped needing leaves the list."""
    graph = grimp.build_graph("fencedlease", cache_dir=None)
    lab = {"fencedlease.lab", *graph.find_descendants("fencedlease.lab")}
    private = _private_library_modules()
    imported = {
        m
        for module in lab
        for m in graph.find_modules_directly_imported_by(module)
        if any(m == p or m.startswith(p + ".") for p in private)
    }
    assert imported == LAB_MAY_IMPORT


def test_the_contracts_cover_the_layers_the_project_promises() -> None:
    contracts = {c["id"]: c for c in _pyproject()["tool"]["importlinter"]["contracts"]}
    assert contracts["library-below-lab"]["protected_modules"] == ["fencedlease.lab"]
    assert contracts["library-below-lab"]["allowed_importers"] == [
        "fencedlease.lab",
        "fencedlease.__main__",
    ]
    sync = contracts["sync-face-without-asyncio"]
    assert set(sync["source_modules"]) == {
        "fencedlease._sync",
        "fencedlease._redis.semaphore",
        "fencedlease._handoff",
        "fencedlease._urls",
        "fencedlease.redis_fencing",
        "fencedlease.backends.memory",
        "fencedlease.backends.sqlite",
    }
    assert set(sync["forbidden_modules"]) == {"asyncio", "fencedlease.aio", "fencedlease._async"}
    # Every module holds one face: no asyncio edge of the sync face is excused.
    assert "ignore_imports" not in sync
    assert contracts["no-sibling-cycles"]["type"] == "acyclic_siblings"
    assert contracts["no-sibling-cycles"]["ancestors"] == ["fencedlease"]
    assert "ignore_imports" not in contracts["no-sibling-cycles"]
    pure = contracts["pure-core-free-of-redis"]
    assert pure["type"] == "forbidden"
    assert pure["forbidden_modules"] == ["redis"]
    assert "allow_indirect_imports" not in pure  # nor through another module of the library
    assert {
        "fencedlease._attempt",
        "fencedlease._clock",
        "fencedlease._decisions",
        "fencedlease._errors",
        "fencedlease._redis.keys",
        "fencedlease._redis.replies",
        "fencedlease._schedule",
        "fencedlease._state",
        "fencedlease._validate",
        "fencedlease._view",
    } <= set(pure["source_modules"])


def test_every_core_module_is_in_the_pure_contract() -> None:
    """The engine both faces drive (every module of the library the decisions and the renewers
    import) is free of redis: a new module of it joins the redis-free list."""
    graph = grimp.build_graph("fencedlease", include_external_packages=True, cache_dir=None)
    engine = {
        m
        for importer in (
            "fencedlease._decisions",
            "fencedlease._sync.renewer",
            "fencedlease._async.renewer",
        )
        for m in graph.find_modules_directly_imported_by(importer)
        if m.startswith("fencedlease.")
    }
    assert {
        "fencedlease._attempt",
        "fencedlease._clock",
        "fencedlease._schedule",
        "fencedlease._state",
        "fencedlease._view",
    } <= engine
    assert engine <= set(_contract("pure-core-free-of-redis")["source_modules"])


_REDIS_ASYNCIO = re.compile(r"\bredis\.asyncio\b|\bfrom\s+redis\s+import\s+.*\basyncio\b")


def test_the_sync_face_does_not_reach_redis_asyncio() -> None:
    """From each sync module, follow the library's own imports; no module reached imports
    ``redis.asyncio``."""
    contract = _contract("sync-face-without-asyncio")
    graph = grimp.build_graph("fencedlease", include_external_packages=True, cache_dir=None)
    reached: set[str] = set()
    sources = contract["source_modules"]  # a package stands for its modules too
    todo = [m for m in graph.modules if any(m == s or m.startswith(s + ".") for s in sources)]
    assert "fencedlease._sync.redis_backend" in todo
    while todo:
        module = todo.pop()
        if module in reached:
            continue
        reached.add(module)
        todo.extend(
            m
            for m in graph.find_modules_directly_imported_by(module)
            if m.startswith("fencedlease.")
        )
    importers = {}  # every library module importing redis.asyncio, with the lines
    for module in sorted(
        graph.find_children("fencedlease") | graph.find_descendants("fencedlease")
    ):
        if "redis" not in graph.find_modules_directly_imported_by(module):
            continue
        lines = [
            d["line_contents"]
            for d in graph.get_import_details(importer=module, imported="redis")
            if _REDIS_ASYNCIO.search(d["line_contents"])
        ]
        if lines:
            importers[module] = lines
    assert "fencedlease._async.redis_backend" in importers  # the scan sees such an import
    assert "fencedlease._redis.aio" in importers
    offenders = {m: lines for m, lines in importers.items() if m in reached}
    assert offenders == {}


_IMPORTED = """
import ast, importlib.util, json, sys
import redis
redis_loads = sorted(m for m in ("asyncio", "redis.asyncio") if m in sys.modules)
import fencedlease
ours = sorted(m for m in sys.modules if m == "fencedlease" or m.startswith("fencedlease."))
reaches = {}
for name in ours:
    spec = importlib.util.find_spec(name)
    tree = ast.parse(open(spec.origin, encoding="utf-8").read())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        hit = [n for n in names if n in ("asyncio", "redis.asyncio") or n.startswith("asyncio.")]
        if hit:
            reaches.setdefault(name, []).extend(hit)
print(json.dumps({"redis": redis_loads, "ours": ours, "reaches": reaches,
                  "loaded": sorted(m for m in ("asyncio", "redis.asyncio") if m in sys.modules)}))
"""


def test_import_fencedlease_loads_no_asyncio_of_its_own() -> None:
    """``import fencedlease`` (a fresh interpreter) loads no module of the asyncio face, and no
    module it loads imports ``asyncio`` or ``redis.asyncio``, not even lazily. redis-py itself
    imports both (``import redis`` loads ``redis.asyncio``), so their presence in ``sys.modules``
    alone cannot tell; where redis stops doing so, the plain check applies too."""
    out = subprocess.run(
        [sys.executable, "-c", _IMPORTED],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(SRC.parent)},
    )
    found = json.loads(out.stdout)
    assert "fencedlease._sync.redis_backend" in found["ours"]  # the sync Redis face was loaded
    assert [
        m for m in found["ours"] if m.startswith(("fencedlease.aio", "fencedlease._async"))
    ] == []
    assert "fencedlease.backends.sqlite_async" not in found["ours"]
    assert found["reaches"] == {}
    if not found["redis"]:
        assert found["loaded"] == []


def test_the_harness_extra_is_the_lab_extra() -> None:
    """``harness`` is the lab extra's earlier name (the README's first command installs it)."""
    extras = _pyproject()["project"]["optional-dependencies"]
    assert extras["harness"] == extras["lab"]
    assert "click>=8.1" in extras["lab"]
    assert _pyproject()["project"]["scripts"]["fencedlease"] == "fencedlease.lab.entry:main"
