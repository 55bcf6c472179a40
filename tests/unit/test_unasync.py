"""The sync modules generated from their asyncio sources (``scripts/unasync.py``) are current,
say so at their top, and ``--check`` names a stale one."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "unasync.py"
GENERATED = {  # the sync module -> its asyncio source
    "_slot_backend.py": "aio/_slot_backend.py",
    "_lease.py": "aio/_lease.py",
    "_manager_base.py": "aio/_manager_base.py",
    "_manager_store.py": "aio/_manager_store.py",
    "_redis_backend.py": "aio/_redis_backend.py",
    "_semaphore.py": "aio/_semaphore.py",
    "_cluster_backend.py": "aio/_cluster_backend.py",
    "_from_env.py": "aio/_from_env.py",
}


def _run(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(root / "scripts" / "unasync.py"), *args],
        capture_output=True,
        text=True,
        check=False,
        cwd=root,
    )


def _copy_tree(tmp_path: Path) -> Path:
    """The script, its sources and targets, and the ruff config, in a tree of their own."""
    (tmp_path / "scripts").mkdir()
    shutil.copy(SCRIPT, tmp_path / "scripts" / "unasync.py")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    for target, source in GENERATED.items():
        for name in (target, source):
            path = tmp_path / "src" / "fencedlease" / name
            path.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(ROOT / "src" / "fencedlease" / name, path)
    return tmp_path


def test_the_generated_modules_are_current() -> None:
    result = _run(ROOT, "--check")
    assert (result.returncode, result.stderr) == (0, "")


def test_each_generated_module_names_its_source_and_the_command() -> None:
    for target, source in GENERATED.items():
        head = (ROOT / "src" / "fencedlease" / target).read_text("utf-8").splitlines()[:3]
        assert head == [
            f"# GENERATED from src/fencedlease/{source} by `python scripts/unasync.py`:",
            "# do not edit. Edit that source, then run it again (CI runs it with --check, failing"
            " while",
            "# stale).",
        ]


def test_check_names_a_stale_module_and_writing_makes_it_current(tmp_path: Path) -> None:
    root = _copy_tree(tmp_path)
    stale = root / "src" / "fencedlease" / "_redis_backend.py"
    stale.write_text(stale.read_text("utf-8") + "# edited by hand\n", "utf-8")
    result = _run(root, "--check")
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "src/fencedlease/_redis_backend.py is stale: not what `python scripts/unasync.py` makes"
        " of its asyncio source; run it"
    ]
    written = _run(root)
    assert (written.returncode, written.stdout) == (0, "wrote src/fencedlease/_redis_backend.py\n")
    assert stale.read_bytes() == (ROOT / "src" / "fencedlease" / "_redis_backend.py").read_bytes()
    assert _run(root, "--check").returncode == 0


def test_a_change_to_the_asyncio_source_makes_its_sync_module_stale(tmp_path: Path) -> None:
    root = _copy_tree(tmp_path)
    source = root / "src" / "fencedlease" / "aio" / "_lease.py"
    text = source.read_text("utf-8")
    source.write_text(text.replace("await self._backend.renew(", "await self._backend.renew(\n"))
    assert _run(root, "--check").returncode == 0  # formatting alone: ruff makes it the same
    source.write_text(text.replace("# a forked child: the lease", "# forked: the lease"))
    result = _run(root, "--check")
    assert (result.returncode, result.stderr.split(" is stale")[0]) == (
        1,
        "src/fencedlease/_lease.py",
    )
    _run(root)
    generated = (root / "src" / "fencedlease" / "_lease.py").read_text("utf-8")
    assert "return False  # forked: the lease is the parent's" in generated
    assert "async " not in generated
    assert "await " not in generated
    assert "asyncio" not in generated


def test_a_phrase_rule_that_no_longer_matches_is_an_error(tmp_path: Path) -> None:
    """A docstring sentence the sync face words otherwise, changed in the source: the script
    stops and shows the rule, instead of writing the asyncio wording into the sync module."""
    root = _copy_tree(tmp_path)
    source = root / "src" / "fencedlease" / "aio" / "_lease.py"
    text = source.read_text("utf-8")
    source.write_text(
        text.replace(
            "or the call is\n        cancelled, the lease keeps", "the lease\n        keeps"
        )
    )
    before = (root / "src" / "fencedlease" / "_lease.py").read_bytes()
    for args in ((), ("--check",)):
        result = _run(root, *args)
        assert result.returncode == 1
        assert result.stderr.startswith(
            "scripts/unasync.py: a phrase rule for _lease.py no longer matches:\n"
        )
        assert "or the call is\n        cancelled, the lease keeps" in result.stderr
    assert (root / "src" / "fencedlease" / "_lease.py").read_bytes() == before


def test_an_async_name_missing_from_the_table_is_an_error(tmp_path: Path) -> None:
    """unasync would turn an unlisted ``AsyncX`` into ``SyncX``; the script refuses instead."""
    root = _copy_tree(tmp_path)
    source = root / "src" / "fencedlease" / "aio" / "_redis_backend.py"
    text = source.read_text("utf-8")
    source.write_text(text.replace("class AsyncRedisBackend:", "class AsyncRedisStore:"))
    result = _run(root, "--check")
    assert result.returncode == 1
    assert result.stderr == (
        "scripts/unasync.py: aio/_redis_backend.py uses SyncRedisStore (from an Async name"
        " missing from NAMES): add its sync name to NAMES\n"
    )
