"""Every docstring of the library is in the Markdown mkdocstrings renders: no reST left (a Sphinx
role, a ``::`` literal block, a simple ``===  ===`` table), which would show up raw on the
reference site.

Needs Griffe (in the ``test`` extra, and the ``docs`` one).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import griffe

SRC = Path(__file__).resolve().parents[2] / "src"

ROLE = re.compile(r":(?:py:)?(?:class|meth|func|mod|attr|data|exc|obj):`[^`]+`")
TABLE_BORDER = re.compile(r"\A *=+(?: +=+)+ *\Z")
FENCED = re.compile(r"^ *```.*?^ *```", re.MULTILINE | re.DOTALL)


def rest_left(text: str) -> list[str]:
    """The reST constructs in ``text`` outside its fenced code blocks, each named with its line."""
    found = []
    lines = FENCED.sub("", text).split("\n")
    for i, line in enumerate(lines):
        if ROLE.search(line):
            found.append(f"role: {line.strip()}")
        if TABLE_BORDER.match(line):
            found.append(f"simple table: {line.strip()}")
        following = next((later for later in lines[i + 1 :] if later.strip()), "")
        indent = len(line) - len(line.lstrip(" "))
        if line.rstrip().endswith("::") and len(following) - len(following.lstrip(" ")) > indent:
            found.append(f"literal block: {line.strip()}")
    return found


def _docstrings(package: griffe.Module) -> Iterator[tuple[str, str]]:
    todo: list[griffe.Object] = [package]
    while todo:
        obj = todo.pop()
        if obj.docstring is not None:
            yield obj.path, obj.docstring.value
        todo.extend(m for m in obj.members.values() if isinstance(m, griffe.Object))


def test_each_rest_construct_is_found_and_markdown_is_not() -> None:
    rest = (
        "See :class:`~fencedlease.Lease` and :func:`!time.time`.\n\n"
        "Accepted URLs::\n\n    redis://host\n\n"
        "=====  =====\nkind   what\n=====  =====\n"
    )
    assert rest_left(rest) == [
        "role: See :class:`~fencedlease.Lease` and :func:`!time.time`.",
        "literal block: Accepted URLs::",
        "simple table: =====  =====",
        "simple table: =====  =====",
    ]
    markdown = (
        "See [`Lease`][fencedlease.Lease] and `time.time`.\n\n"
        "Accepted URLs:\n\n```\nredis://host\nsee :class:`B`\n===  ===\n```\n\n"
        "| kind | what |\n| --- | --- |\n| a | one |\n"
        "A C++ name such as std::\nin a sentence is no block."
    )
    assert rest_left(markdown) == []


def test_no_docstring_of_the_library_is_left_in_rest() -> None:
    package = griffe.load("fencedlease", search_paths=[str(SRC)])
    assert isinstance(package, griffe.Module)
    found = dict(_docstrings(package))
    assert len(found) > 300
    assert {path: rest_left(text) for path, text in found.items() if rest_left(text)} == {}
