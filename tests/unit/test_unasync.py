"""The sync face's I/O (``src/fencedlease/_sync``) is generated from the asyncio face's
(``src/fencedlease/_async``) by ``scripts/unasync.py``: current, marked as generated, and
``--check`` names a stale module."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

# A test runs the script up to four times, each some sixty ruff processes: up to 150 s a test on
# two cores under a full suite's load, past the default 120 s.
pytestmark = pytest.mark.timeout(600)

ROOT = Path(__file__).resolve().parents[2]
ASYNC = ROOT / "src" / "fencedlease" / "_async"
SYNC = ROOT / "src" / "fencedlease" / "_sync"


def _run(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(root / "scripts" / "unasync.py"), *args],
        capture_output=True,
        text=True,
        check=False,
        cwd=root,
    )


def _copy_tree(tmp_path: Path) -> Path:
    """The script, both folders and the ruff config, in a tree of their own (with the package's
    ``__init__``, by which ruff knows ``fencedlease`` as first-party)."""
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "unasync.py", tmp_path / "scripts" / "unasync.py")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    (tmp_path / "src" / "fencedlease").mkdir(parents=True)
    shutil.copy(ROOT / "src" / "fencedlease" / "__init__.py", tmp_path / "src" / "fencedlease")
    for folder in (ASYNC, SYNC):
        shutil.copytree(
            folder,
            tmp_path / folder.relative_to(ROOT),
            ignore=shutil.ignore_patterns("__pycache__"),
        )
    return tmp_path


def test_the_generated_modules_are_current() -> None:
    """``--check`` on the repository passes: no generated module is stale and no rule unused."""
    result = _run(ROOT, "--check")
    assert (result.returncode, result.stderr) == (0, "")


def _excluded() -> set[str]:
    """The script's `EXCLUDED`: the modules of ``_async`` whose ``_sync`` side is hand-written."""
    spec = importlib.util.spec_from_file_location("unasync_script", ROOT / "scripts" / "unasync.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return set(module.EXCLUDED)


def test_every_asyncio_module_not_excluded_has_its_generated_namesake() -> None:
    """The whole folder is generated but for the hand-written exclusions (the ``primitives``
    package among them), each module headed by its source and the command; a hand-written
    namesake of an excluded one is not marked as generated."""
    excluded = _excluded()
    assert excluded == {
        "primitives/waiting.py",
        "primitives/callers.py",
        "primitives/sockets.py",
        "cluster_calls.py",
    }
    every = {p.relative_to(ASYNC) for p in ASYNC.rglob("*.py")}
    generated = {p.as_posix() for p in every} - excluded
    targets = {p.relative_to(SYNC).as_posix() for p in SYNC.rglob("*.py")}
    assert {p.as_posix() for p in every} - generated <= targets  # the hand-written sides exist
    assert generated <= targets
    assert {"lease.py", "manager.py", "primitives/__init__.py", "renewer.py"} <= generated
    for relative in sorted(targets):
        head = (SYNC / relative).read_text("utf-8").splitlines()[:3]
        if relative not in generated:
            assert not head[0].startswith("# GENERATED")
            continue
        assert head == [
            f"# GENERATED from src/fencedlease/_async/{relative} by `python scripts/unasync.py`:",
            "# do not edit. Edit that source, then run it again (CI runs it with --check, failing"
            " while",
            "# stale).",
        ]


def test_check_names_a_stale_module_and_writing_makes_it_current(tmp_path: Path) -> None:
    """A generated module edited by hand is named by ``--check``; writing restores it."""
    root = _copy_tree(tmp_path)
    stale = root / "src" / "fencedlease" / "_sync" / "redis_backend.py"
    stale.write_text(stale.read_text("utf-8") + "# edited by hand\n", "utf-8")
    result = _run(root, "--check")
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "src/fencedlease/_sync/redis_backend.py is stale: not what `python scripts/unasync.py`"
        " makes of its asyncio source; run it"
    ]
    written = _run(root)
    assert (written.returncode, written.stdout) == (
        0,
        "wrote src/fencedlease/_sync/redis_backend.py\n",
    )
    assert stale.read_bytes() == (SYNC / "redis_backend.py").read_bytes()
    assert _run(root, "--check").returncode == 0


def test_a_new_asyncio_module_is_generated_and_a_removed_one_removed(tmp_path: Path) -> None:
    """The folder is the list: a module added to ``_async`` is generated without naming it
    anywhere, and the namesake of a removed one goes (the hand-written primitives stay)."""
    root = _copy_tree(tmp_path)
    new = root / "src" / "fencedlease" / "_async" / "probe.py"
    new.write_text(
        '"""A probe."""\n\nfrom .lease import AsyncLease\n\n\n'
        "async def first(leases: list[AsyncLease]) -> bool:\n"
        "    return await leases[0].renew()\n",
        "utf-8",
    )
    assert _run(root, "--check").stderr == (
        "src/fencedlease/_sync/probe.py is stale: not what `python scripts/unasync.py` makes of"
        " its asyncio source; run it\n"
    )
    assert _run(root).stdout == "wrote src/fencedlease/_sync/probe.py\n"
    generated = (root / "src" / "fencedlease" / "_sync" / "probe.py").read_text("utf-8")
    assert generated.splitlines()[3:] == [
        '"""A probe."""',
        "",
        "from .lease import Lease",
        "",
        "",
        "def first(leases: list[Lease]) -> bool:",
        "    return leases[0].renew()",
    ]
    new.unlink()
    assert _run(root).stdout == "removed src/fencedlease/_sync/probe.py\n"
    assert (root / "src" / "fencedlease" / "_sync" / "primitives" / "waiting.py").exists()
    assert _run(root, "--check").returncode == 0


def test_a_change_to_the_asyncio_source_makes_its_sync_module_stale(tmp_path: Path) -> None:
    """Formatting alone changes nothing; a changed line is carried over, without the keywords."""
    root = _copy_tree(tmp_path)
    source = root / "src" / "fencedlease" / "_async" / "lease.py"
    text = source.read_text("utf-8")
    source.write_text(text.replace("await self._backend.renew(", "await self._backend.renew(\n"))
    assert _run(root, "--check").returncode == 0
    source.write_text(text.replace("# a forked child: the lease", "# forked: the lease"))
    result = _run(root, "--check")
    assert (result.returncode, result.stderr.split(" is stale")[0]) == (
        1,
        "src/fencedlease/_sync/lease.py",
    )
    _run(root)
    generated = (root / "src" / "fencedlease" / "_sync" / "lease.py").read_text("utf-8")
    assert "return False  # forked: the lease is the parent's" in generated
    assert "async " not in generated
    assert "await " not in generated
    assert "import asyncio" not in generated


def test_a_docstring_worded_for_one_face_is_an_error(tmp_path: Path) -> None:
    """A docstring that says "awaited" would say it on the sync face too: the script stops and
    names the module and the word, writing nothing."""
    root = _copy_tree(tmp_path)
    source = root / "src" / "fencedlease" / "_async" / "lease.py"
    text = source.read_text("utf-8")
    source.write_text(text.replace("can be called\n        again", "can be awaited\n        again"))
    before = (root / "src" / "fencedlease" / "_sync" / "lease.py").read_bytes()
    for args in ((), ("--check",)):
        result = _run(root, *args)
        assert result.returncode == 1
        assert result.stderr.endswith(
            "scripts/unasync.py: src/fencedlease/_async/lease.py says awaited where the code does"
            " not: word it for both faces (the rules make it the sync face's)\n"
        )
    assert (root / "src" / "fencedlease" / "_sync" / "lease.py").read_bytes() == before


def test_a_rule_no_module_uses_is_an_error(tmp_path: Path) -> None:
    """A rule left over after the code it served went is named by ``--check``."""
    root = _copy_tree(tmp_path)
    script = root / "scripts" / "unasync.py"
    text = script.read_text("utf-8")
    script.write_text(
        text.replace(
            "RULES: list[tuple[str, str]] = [\n",
            'RULES: list[tuple[str, str]] = [\n    (r"\\bnever_used\\b", "x"),\n',
        )
    )
    result = _run(root, "--check")
    assert (result.returncode, result.stderr) == (
        1,
        "scripts/unasync.py: the rule '\\\\bnever_used\\\\b' changes no module: remove it\n",
    )
