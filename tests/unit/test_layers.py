"""The layer contracts (``[tool.importlinter]`` in pyproject.toml, run by ``lint-imports`` in CI)
cannot go stale, and the rules import-linter cannot state are checked here: no module of the sync
face reaches ``redis.asyncio`` (import-linter sees an external package only as a whole, ``redis``),
``import fencedlease`` loads nothing of the asyncio face nor of the lab's packages, and the
library's wheel holds no lab code.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import zipfile
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
        if not parts:
            continue
        for depth, part in enumerate(parts):
            if part.startswith("_") and not part.startswith("__"):
                found.add(".".join(("fencedlease", *parts[: depth + 1])))
                break
    return found


def _covered(listed: list[str]) -> set[str]:
    """The modules a contract's list covers: each listed one, and every module of a listed
    package (import-linter reads a package as the package and its descendants)."""
    graph = grimp.build_graph("fencedlease", cache_dir=None)
    return {
        m
        for name in listed
        for m in (name, *(graph.find_descendants(name) if name in graph.modules else ()))
    }


def test_the_lab_contract_forbids_every_private_module() -> None:
    """import-linter's wildcards match whole names only, so the private modules are listed: a new
    one must join the list, and a removed one must leave it."""
    contract = _contract("lab-uses-public-api")
    assert contract["type"] == "forbidden"
    assert contract["source_modules"] == ["fencedlease_lab"]
    private = _private_library_modules()
    assert {
        "fencedlease._redis",
        "fencedlease._sync",
        "fencedlease._core",
        "fencedlease._async",
    } <= private
    assert set(contract["forbidden_modules"]) == private


def test_the_lab_imports_no_private_module() -> None:
    """The lab imports none of the library's private modules, directly: what grimp sees agrees
    with the contract."""
    graph = grimp.build_graph("fencedlease", "fencedlease_lab", cache_dir=None)
    lab = {"fencedlease_lab", *graph.find_descendants("fencedlease_lab")}
    assert "fencedlease_lab.harness.nemesis" in lab
    private = _private_library_modules()
    imported = {
        m
        for module in lab
        for m in graph.find_modules_directly_imported_by(module)
        if any(m == p or m.startswith(p + ".") for p in private)
    }
    assert imported == set()


def test_only_the_pytest_plugin_imports_the_lab() -> None:
    """Of the library's modules, the pytest plugin alone imports the lab (to start a Redis)."""
    graph = grimp.build_graph("fencedlease", "fencedlease_lab", cache_dir=None)
    library = {"fencedlease", *graph.find_descendants("fencedlease")}
    importers = {
        module
        for module in library
        if any(
            m.startswith("fencedlease_lab") for m in graph.find_modules_directly_imported_by(module)
        )
    }
    assert importers == {"fencedlease.pytest_plugin"}


def test_the_contracts_cover_the_layers_the_project_promises() -> None:
    contracts = {c["id"]: c for c in _pyproject()["tool"]["importlinter"]["contracts"]}
    assert _pyproject()["tool"]["importlinter"]["root_packages"] == [
        "fencedlease",
        "fencedlease_lab",
    ]
    assert contracts["library-below-lab"]["protected_modules"] == ["fencedlease_lab"]
    assert contracts["library-below-lab"]["allowed_importers"] == [
        "fencedlease_lab",
        "fencedlease.pytest_plugin",
    ]
    sync = contracts["sync-face-without-asyncio"]
    assert set(sync["source_modules"]) == {
        "fencedlease._sync",
        "fencedlease._redis.semaphore",
        "fencedlease._handoff",
        "fencedlease.redis_fencing",
        "fencedlease.backends.memory",
        "fencedlease.backends.sqlite",
        "fencedlease.backends._slots",
        "fencedlease.backends._sqlite_file",
    }
    assert set(sync["forbidden_modules"]) == {"asyncio", "fencedlease.aio", "fencedlease._async"}
    # Every module holds one face: no asyncio edge of the sync face is excused.
    assert "ignore_imports" not in sync
    assert contracts["no-sibling-cycles"]["type"] == "acyclic_siblings"
    assert contracts["no-sibling-cycles"]["ancestors"] == ["fencedlease", "fencedlease_lab"]
    assert "ignore_imports" not in contracts["no-sibling-cycles"]
    shared = contracts["shared-pieces-free-of-redis"]
    assert shared["type"] == "forbidden"
    assert shared["forbidden_modules"] == ["redis"]
    assert "allow_indirect_imports" not in shared  # nor through another module of the library
    assert set(shared["source_modules"]) == {
        "fencedlease._handoff",
        "fencedlease._redis.keys",
        "fencedlease._redis.replies",
        "fencedlease._async.primitives",
        "fencedlease._sync.primitives",
    }


def test_one_contract_says_what_the_core_may_not_import() -> None:
    """Only core-imports-no-io forbids the core anything: no other forbidden contract lists
    fencedlease._core with an import the core contract already forbids."""
    core = _contract("core-imports-no-io")
    forbidden_to_core = set(core["forbidden_modules"])
    repeats = {
        c["id"]: sorted(forbidden_to_core & set(c["forbidden_modules"]))
        for c in _pyproject()["tool"]["importlinter"]["contracts"]
        if c["id"] != "core-imports-no-io"
        and c["type"] == "forbidden"
        and "fencedlease._core" in c["source_modules"]
    }
    assert repeats == {}


def test_every_core_module_is_in_the_pure_contract() -> None:
    """The engine both faces drive (every module of the library the decisions and the renewers
    import) is free of redis: a new module of it joins the redis-free list."""
    graph = grimp.build_graph("fencedlease", include_external_packages=True, cache_dir=None)
    engine = {
        m
        for importer in (
            "fencedlease._core.decisions",
            "fencedlease._sync.renewer",
            "fencedlease._async.renewer",
        )
        for m in graph.find_modules_directly_imported_by(importer)
        if m.startswith("fencedlease.")
    }
    assert {
        "fencedlease._core.attempt",
        "fencedlease._core.clock",
        "fencedlease._core.schedule",
        "fencedlease._core.state",
        "fencedlease._core.view",
    } <= engine
    redis_free = [
        *_contract("core-imports-no-io")["source_modules"],
        *_contract("shared-pieces-free-of-redis")["source_modules"],
    ]
    assert engine <= _covered(redis_free)


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
    assert "fencedlease._async.scripts" in importers
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


LAB = "fencedlease-lab @ {root:uri}/lab"
"""The lab distribution as the root project's extras name it: the folder of this clone."""


def test_the_lab_and_test_extras_install_the_lab_of_this_clone() -> None:
    """``lab`` (and ``harness``, its earlier name) and ``test`` pull in the fencedlease-lab
    distribution from ./lab, which registers ``check`` for the library's ``fencedlease`` script
    (the README's two commands need both)."""
    extras = _pyproject()["project"]["optional-dependencies"]
    assert extras["harness"] == extras["lab"] == ["click>=8.1", "rich>=13", LAB]
    assert LAB in extras["test"]
    assert _pyproject()["tool"]["hatch"]["metadata"]["allow-direct-references"] is True
    assert _pyproject()["project"]["scripts"] == {"fencedlease": "fencedlease.cli.entry:main"}
    lab: dict[str, Any] = tomllib.loads((ROOT / "lab" / "pyproject.toml").read_text("utf-8"))
    assert lab["project"]["name"] == "fencedlease-lab"
    assert lab["project"]["entry-points"] == {
        "fencedlease.commands": {"check": "fencedlease_lab.cli:check"}
    }
    assert lab["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"] == ["src/fencedlease_lab"]
    assert (ROOT / "lab" / "src" / "fencedlease_lab" / "py.typed").is_file()


def test_the_library_wheel_holds_no_lab_code(tmp_path: Path) -> None:
    """The wheel hatchling builds from the root project holds the library's package alone (its
    command line and pytest plugin included): no file of the lab, whatever its folder."""
    wheel_builder = pytest.importorskip("hatchling.builders.wheel")  # the test extra installs it
    (built,) = wheel_builder.WheelBuilder(str(ROOT)).build(
        directory=str(tmp_path), versions=["standard"]
    )
    with zipfile.ZipFile(built) as wheel:
        names = wheel.namelist()
        entry_points = wheel.read("fencedlease-0.1.0.dist-info/entry_points.txt").decode()
    assert {name.split("/")[0] for name in names} == {"fencedlease", "fencedlease-0.1.0.dist-info"}
    assert [n for n in names if "lab" in n.split("/")[:-1]] == []  # no folder named lab
    assert "fencedlease/cli/commands.py" in names
    assert "fencedlease/pytest_plugin.py" in names
    assert "fencedlease = fencedlease.cli.entry:main" in entry_points
    assert "fencedlease = fencedlease.pytest_plugin" in entry_points


_LOADED = """
import json, sys
import fencedlease
import fencedlease.aio
heavy = ("matplotlib", "click", "rich", "toxiproxy", "psycopg", "fencedlease_lab")
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in heavy)))
"""


def test_import_fencedlease_loads_no_lab_and_none_of_its_packages() -> None:
    """``import fencedlease; import fencedlease.aio`` (a fresh interpreter) loads no module of
    matplotlib, click, rich, toxiproxy, psycopg or the lab."""
    out = subprocess.run(
        [sys.executable, "-c", _LOADED], check=True, capture_output=True, text=True
    ).stdout
    assert json.loads(out) == []


MAX_MODULE_LINES = 400
"""The most lines a module of the package may have: a longer one holds more than one thing, and
is split by meaning (a package of modules in its place keeps its import path)."""


def _long_modules(root: Path, *, skip: str | None = None) -> dict[str, int]:
    """Each module under ``root`` (outside the folder ``skip``) of more than `MAX_MODULE_LINES`
    lines, by its path in the source tree, with its count of lines."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        name = path.relative_to(ROOT).as_posix()
        if skip is not None and path.is_relative_to(root / skip):
            continue
        lines = len(path.read_text("utf-8").splitlines())
        if lines > MAX_MODULE_LINES:
            found[name] = lines
    return found


def test_no_module_of_the_lab_is_over_400_lines() -> None:
    """Every module of ``fencedlease_lab`` has at most 400 lines; a longer one is named with its
    count."""
    assert _long_modules(ROOT / "lab" / "src" / "fencedlease_lab") == {}


def test_no_module_of_the_library_is_over_400_lines() -> None:
    """Every module of the library has at most 400 lines; a longer one is named with its count."""
    assert _long_modules(SRC) == {}


def _names_redis_exceptions(tree: ast.AST) -> list[int]:
    """The lines of ``tree`` that name one of redis-py's exception classes to catch or test
    one: an import from ``redis.exceptions`` (or of an ``...Error`` from ``redis``),
    ``redis.exceptions.X``, or ``redis.XError`` / ``redis.XException`` anywhere but as the
    class a ``raise`` makes (a reply the adapter reads as redis-py's own error)."""
    raised = {
        id(node.exc.func)
        for node in ast.walk(tree)
        if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call)
    }
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module is not None:
            if node.module == "redis.exceptions" or (
                node.module.split(".")[0] == "redis"
                and any(a.name.endswith(("Error", "Exception")) for a in node.names)
            ):
                lines.append(node.lineno)
        elif (
            isinstance(node, ast.Attribute)
            and id(node) not in raised
            and isinstance(node.value, ast.Name)
            and node.value.id == "redis"
            and (node.attr == "exceptions" or node.attr.endswith(("Error", "Exception")))
        ):
            lines.append(node.lineno)
    return lines


def test_only_the_error_mapper_names_redis_pys_exception_classes() -> None:
    """No module of the library but fencedlease._redis.errors names a redis-py exception class:
    a call that must tell one from another runs inside its map_exceptions and catches the
    library's kinds. (The operator's command line, ``fencedlease.cli``, drives Redis itself as the
    lab does: its own commands, not the lease machinery's.)"""
    mapper = SRC / "_redis" / "errors.py"
    offenders = {}
    for path in sorted(SRC.rglob("*.py")):
        if path.relative_to(SRC).parts[0] == "cli" or path == mapper:
            continue
        lines = _names_redis_exceptions(ast.parse(path.read_text("utf-8")))
        if lines:
            offenders[str(path.relative_to(SRC))] = lines
    assert offenders == {}
    assert _names_redis_exceptions(ast.parse(mapper.read_text("utf-8")))


def test_the_core_contract_forbids_redis_asyncio_and_every_other_module() -> None:
    """fencedlease._core imports neither redis nor asyncio nor any module of the library beside
    it: the contract lists every sibling of the package (a new module must join the list)."""
    contract = _contract("core-imports-no-io")
    assert (contract["type"], contract["source_modules"]) == ("forbidden", ["fencedlease._core"])
    assert "allow_indirect_imports" not in contract
    siblings = {
        f"fencedlease.{path.stem}"
        for path in SRC.iterdir()
        if (path.suffix == ".py" and path.name != "__init__.py")
        or (path.is_dir() and path.name != "_core" and (path / "__init__.py").exists())
    }
    assert "fencedlease._redis" in siblings
    assert set(contract["forbidden_modules"]) == {"redis", "asyncio", *siblings}


TOP_LEVEL_PRIVATE_MODULES: set[str] = set()
"""The private modules allowed at the top level of the package, beside the public ones: every
other private module lives in a folder of the layout (``_core``, ``_redis``, ``_async``,
``_sync``, ``_handoff``), and the README gives their count (none today)."""

README_COUNT = re.compile(
    r"holds (\d+) private modules, counted by\s+"
    r"`find src/fencedlease -maxdepth 1 -name '_\[a-z\]\*\.py' \| wc -l`"
)


def _top_level_private_modules() -> set[str]:
    """The private modules directly in ``src/fencedlease``, as the README's command finds them."""
    return {path.stem for path in SRC.glob("_[a-z]*.py")}  # not __init__, __main__


def test_the_top_level_holds_only_the_allowed_private_modules() -> None:
    """A private module added at the top level of the package is named (as one is that is gone):
    a new one belongs in a folder of the layout."""
    found = _top_level_private_modules()
    assert {
        "new": found - TOP_LEVEL_PRIVATE_MODULES,
        "gone": TOP_LEVEL_PRIVATE_MODULES - found,
    } == {
        "new": set(),
        "gone": set(),
    }


def test_the_readme_counts_the_top_level_private_modules() -> None:
    """The README's contributing section states the count of top-level private modules, with the
    command that counts them, and the count is the allowed set's."""
    found = README_COUNT.search((ROOT / "README.md").read_text("utf-8"))
    assert found is not None
    assert int(found[1]) == len(TOP_LEVEL_PRIVATE_MODULES)


def test_the_health_report_and_its_errors_are_core_and_only_the_redis_pieces_stay_redis() -> None:
    """The health check's report and the errors of a slow check or an unreachable store are in
    the core (public path unchanged); the Redis module of the check keeps the no-op script and the
    start-up backoff only."""
    import fencedlease
    from fencedlease._core import health as core_health
    from fencedlease._redis import health as redis_health

    assert fencedlease.HealthReport is core_health.HealthReport
    assert {"HealthReport", "too_slow", "connect_error"} <= set(core_health.__all__)
    assert redis_health.__all__ == ["NOOP", "connect_backoff_s"]
    assert not set(core_health.__all__) & set(vars(redis_health))
