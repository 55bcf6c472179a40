"""The layer contracts (``[tool.importlinter]`` in pyproject.toml, run by ``lint-imports`` in CI)
cannot go stale, and the one rule import-linter cannot state is checked here: no module of the sync
face reaches ``redis.asyncio`` (import-linter sees an external package only as a whole, ``redis``).
"""

from __future__ import annotations

import re
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
    """Every module of the library whose own name starts with one underscore."""
    found = set()
    for path in SRC.rglob("*.py"):
        parts = path.relative_to(SRC).with_suffix("").parts
        if parts[0] == "lab" or parts[-1] == "__init__":
            continue
        if parts[-1].startswith("_") and not parts[-1].startswith("__"):
            found.add(".".join(("fencedlease", *parts)))
    return found


def test_the_lab_contract_forbids_every_private_module() -> None:
    """import-linter's wildcards match whole names only, so the private modules are listed: a new
    one must join the list, and a removed one must leave it."""
    contract = _contract("lab-uses-public-api")
    assert contract["type"] == "forbidden"
    assert contract["source_modules"] == ["fencedlease.lab"]
    private = _private_library_modules()
    assert {"fencedlease._lease", "fencedlease._manager", "fencedlease.aio._lease"} <= private
    assert set(contract["forbidden_modules"]) == private


def test_the_contracts_cover_the_layers_the_project_promises() -> None:
    contracts = {c["id"]: c for c in _pyproject()["tool"]["importlinter"]["contracts"]}
    assert contracts["library-below-lab"]["protected_modules"] == ["fencedlease.lab"]
    assert contracts["library-below-lab"]["allowed_importers"] == [
        "fencedlease.lab",
        "fencedlease.__main__",
    ]
    sync = contracts["sync-face-without-asyncio"]
    assert set(sync["source_modules"]) == {
        "fencedlease._manager",
        "fencedlease._lease",
        "fencedlease._renewer",
        "fencedlease._redis_backend",
        "fencedlease.backends.memory",
        "fencedlease.backends.sqlite",
    }
    assert set(sync["forbidden_modules"]) == {"asyncio", "fencedlease.aio"}
    assert contracts["no-sibling-cycles"]["type"] == "acyclic_siblings"
    assert contracts["no-sibling-cycles"]["ancestors"] == ["fencedlease"]


_REDIS_ASYNCIO = re.compile(r"\bredis\.asyncio\b|\bfrom\s+redis\s+import\s+.*\basyncio\b")


def test_the_sync_face_does_not_reach_redis_asyncio() -> None:
    """From each sync module, follow the library's own imports (less the edges the contract
    ignores); no module reached imports ``redis.asyncio``, except the modules whose asyncio edge
    the contract ignores for the same reason (each holds a sync thing and its asyncio twin)."""
    contract = _contract("sync-face-without-asyncio")
    ignored = [
        tuple(part.strip() for part in line.split("->")) for line in contract["ignore_imports"]
    ]
    exempt = {importer for importer, _ in ignored}
    graph = grimp.build_graph("fencedlease", include_external_packages=True, cache_dir=None)
    for importer, imported in ignored:
        graph.remove_import(importer=importer, imported=imported)
    reached: set[str] = set()
    todo = list(contract["source_modules"])
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
    assert "fencedlease.aio._redis_backend" in importers  # the scan sees such an import
    offenders = {m: lines for m, lines in importers.items() if m in reached and m not in exempt}
    assert offenders == {}


def test_the_harness_extra_is_the_lab_extra() -> None:
    """``harness`` is the lab extra's earlier name (the README's first command installs it)."""
    extras = _pyproject()["project"]["optional-dependencies"]
    assert extras["harness"] == extras["lab"]
    assert "click>=8.1" in extras["lab"]
    assert _pyproject()["project"]["scripts"]["fencedlease"] == "fencedlease.lab.cli:main"
