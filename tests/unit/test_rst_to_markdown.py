"""scripts/rst_to_markdown.py: the one-off rewrite of the reST-flavoured docstrings into the
Markdown mkdocstrings renders, and that no docstring of the library is left in the old style.

Needs Griffe (the ``docs`` extra, which CI installs); skipped without it.
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

pytest.importorskip("griffe")
import griffe

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "rst_to_markdown.py"
SRC = Path(__file__).resolve().parents[2] / "src"


@pytest.fixture(scope="module")
def rst() -> Iterator[ModuleType]:
    spec = importlib.util.spec_from_file_location("rst_to_markdown", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["rst_to_markdown"] = module
    spec.loader.exec_module(module)
    yield module
    del sys.modules["rst_to_markdown"]


def test_roles_become_cross_references(rst: ModuleType) -> None:
    text = (
        "See :class:`~fencedlease.Lease`, :meth:`hold`, :func:`fencedlease.db.fence_guard`, "
        ":class:`the manager <fencedlease.LeaseManager>` and :func:`!time.time`."
    )
    assert rst.rst_to_markdown(text) == (
        "See [`Lease`][fencedlease.Lease], [`hold`][], "
        "[`fencedlease.db.fence_guard`][], "
        "[`the manager`][fencedlease.LeaseManager] and `time.time`."
    )


def test_a_target_resolved_to_none_is_plain_code(rst: ModuleType) -> None:
    assert rst.rst_to_markdown(":func:`~a._private.thing`", lambda target: None) == "`thing`"


def test_a_literal_block_becomes_a_fenced_block(rst: ModuleType) -> None:
    text = "Accepted URLs::\n\n    redis://host\n      memory://\n\nAfter, :mod:`x`."
    assert rst.rst_to_markdown(text) == (
        "Accepted URLs:\n\n```\nredis://host\n  memory://\n```\n\nAfter, [`x`][]."
    )


def test_a_lone_double_colon_vanishes_and_roles_inside_code_stay(rst: ModuleType) -> None:
    text = "Tree:\n\n::\n\n    A\n    └── :class:`B`\n"
    assert rst.rst_to_markdown(text) == "Tree:\n\n```\nA\n└── :class:`B`\n```\n"


def test_a_simple_table_becomes_a_pipe_table(rst: ModuleType) -> None:
    text = (
        "Keys:\n\n"
        "=========  =============\n"
        "``<base>``  the lease\n"
        "``:fence``  the counter,\n"
        "            never deleted\n"
        "=========  =============\n\n"
        "Done."
    )
    assert rst.rst_to_markdown(text) == (
        "Keys:\n\n"
        "|  |  |\n"
        "| --- | --- |\n"
        "| ``<base>`` | the lease |\n"
        "| ``:fence`` | the counter, never deleted |\n\n"
        "Done."
    )


def test_a_table_with_a_header(rst: ModuleType) -> None:
    text = "=====  =====\nkind   what\n=====  =====\na|b    one\n=====  =====\n"
    assert rst.rst_to_markdown(text) == ("| kind | what |\n| --- | --- |\n| a\\|b | one |\n")


def test_a_long_line_carries_its_last_words_into_the_rest_of_its_paragraph(
    rst: ModuleType,
) -> None:
    words = " ".join(["word"] * 24)  # 119 characters
    lines = ["    Raises:", f"        ValidationError: {words}", "            more.", "", "    x"]
    assert rst._wrap(lines) == [
        "    Raises:",
        "        ValidationError: " + " ".join(["word"] * 15),
        "            " + " ".join(["word"] * 9) + " more.",
        "",
        "    x",
    ]
    # Before a blank line (or a list item, a fence, a table) the words get a line of their own.
    assert rst._wrap([f"    {words}", "    - item"]) == [
        "    " + " ".join(["word"] * 19),
        "    " + " ".join(["word"] * 5),
        "    - item",
    ]


@pytest.fixture(scope="module")
def rewritten(rst: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> griffe.Module:
    """A copy of src, rewritten (a no-op once the rewrite has run on it), then loaded."""
    src = tmp_path_factory.mktemp("src")
    shutil.copytree(SRC / "fencedlease", src / "fencedlease")
    assert rst.main([str(src)]) == 0
    loaded = griffe.load("fencedlease", search_paths=[str(src)])
    assert isinstance(loaded, griffe.Module)
    return loaded


def _docstrings(package: griffe.Module) -> Iterator[tuple[str, str]]:
    todo: list[griffe.Object] = [package]
    while todo:
        obj = todo.pop()
        if obj.docstring is not None:
            yield obj.path, obj.docstring.value
        todo.extend(m for m in obj.members.values() if isinstance(m, griffe.Object))


def test_no_docstring_of_the_library_has_a_rest_role_or_literal_block(rst: ModuleType) -> None:
    """Every docstring is in mkdocstrings' Markdown: no Sphinx role, no ``::`` literal block (a
    docstring written in the old style is rewritten by ``python scripts/rst_to_markdown.py``)."""
    package = griffe.load("fencedlease", search_paths=[str(SRC)])
    assert isinstance(package, griffe.Module)
    found = dict(_docstrings(package))
    assert len(found) > 300
    assert [path for path, text in found.items() if rst._ROLE.search(text)] == []
    assert [path for path, text in found.items() if rst.rst_to_markdown(text) != text] == []


def test_the_rewrite_changes_nothing_twice(
    rst: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Run over the library's sources (rewritten already), the rewrite changes no file: a table's
    escaped ``|`` in a plain string (``\\\\|``) is not escaped again."""
    shutil.copytree(SRC / "fencedlease", tmp_path / "fencedlease")
    before = {p: p.read_bytes() for p in tmp_path.rglob("*.py")}
    assert rst.main([str(tmp_path)]) == 0
    assert capsys.readouterr().out == ""
    assert {p: p.read_bytes() for p in tmp_path.rglob("*.py")} == before
    table = (tmp_path / "fencedlease" / "lab" / "toxiproxy" / "__init__.py").read_text("utf-8")
    assert "| ``POST\\\\|PATCH /proxies/{p}`` |" in table


def test_targets_resolve_to_the_documented_public_names(rewritten: griffe.Module) -> None:
    lease = rewritten["_lease.Lease"].docstring
    assert lease is not None
    # Inherited from a private base: linked under the public class.
    assert "[`check`][fencedlease.Lease.check]" in lease.value
    # A private class no public module exports: plain code, no link.
    assert "`LeaseView`" in lease.value
    assert "[`LeaseView`]" not in lease.value


def test_a_stdlib_target_is_plain_code(rewritten: griffe.Module) -> None:
    clock = rewritten["_clock.SystemClock"].docstring
    assert clock is not None
    assert clock.value.startswith(
        "The real clock: `time.monotonic`, `time.time` and `time.sleep`. (The"
    )
