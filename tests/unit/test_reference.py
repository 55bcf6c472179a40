"""The API reference (docs/reference/*.md, built by ``mkdocs build --strict``) cannot go stale.

A pure text check of the pages against the code, needing no mkdocs: every name in the ``__all__``
of a public module has a ``::: path`` directive, every directive names an object that exists, the
key layout and the error tree are rendered from the modules that define them, and every page is in
the site's nav.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docs" / "reference"
PUBLIC_MODULES = (
    "fencedlease",
    "fencedlease.aio",
    "fencedlease.aio.testing",
    "fencedlease.backends",
    "fencedlease.db",
    "fencedlease.otel",
    "fencedlease.redis_fencing",
    "fencedlease.testing",
)
_DIRECTIVE = re.compile(r"^::: *(?P<path>[A-Za-z_][\w.]*) *$", re.MULTILINE)


def _directives() -> dict[str, list[str]]:
    """Each reference page's ``::: path`` directives, in order."""
    return {
        page.name: _DIRECTIVE.findall(page.read_text("utf-8"))
        for page in sorted(REFERENCE.glob("*.md"))
    }


def _documented() -> set[tuple[str, str]]:
    """(module, name) for every directive ``module.name`` whose module is a public module."""
    pairs = set()
    for paths in _directives().values():
        for path in paths:
            module, _, name = path.rpartition(".")
            if module in PUBLIC_MODULES:
                pairs.add((module, name))
    return pairs


def _resolve(path: str) -> object:
    """The object a directive names: the longest importable module, then attributes."""
    parts = path.split(".")
    for k in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:k]))
        except ModuleNotFoundError:
            continue
        for part in parts[k:]:
            obj = getattr(obj, part)
        return obj
    raise ModuleNotFoundError(path)


def test_the_reference_pages_use_directives() -> None:
    directives = _directives()
    assert set(directives) == {
        "aio.md",
        "backends.md",
        "db.md",
        "errors.md",
        "fencing.md",
        "index.md",
        "key-layout.md",
        "manager.md",
        "otel.md",
        "testing.md",
    }
    assert all(directives.values()), "a reference page without a ::: directive"


@pytest.mark.parametrize("module_name", PUBLIC_MODULES)
def test_every_public_name_has_a_reference_entry(module_name: str) -> None:
    """``module.name`` is documented as itself, or (a re-export) as the same object under another
    public module (``fencedlease.aio.BackendError`` is ``fencedlease.BackendError``)."""
    module = importlib.import_module(module_name)
    documented = _documented()
    missing = []
    for name in module.__all__:
        value = getattr(module, name)
        if not any(
            doc_name == name and getattr(importlib.import_module(doc_module), name) is value
            for doc_module, doc_name in documented
        ):
            missing.append(f"{module_name}.{name}")
    assert missing == []


def test_every_public_module_has_all() -> None:
    for module_name in PUBLIC_MODULES:
        module = importlib.import_module(module_name)
        assert isinstance(module, ModuleType)
        assert module.__all__, module_name


def test_every_directive_names_an_existing_object() -> None:
    stale = []
    for page, paths in _directives().items():
        for path in paths:
            try:
                _resolve(path)
            except (ModuleNotFoundError, AttributeError):
                stale.append(f"{page}: {path}")
    assert stale == []


def test_the_key_layout_and_error_tree_are_rendered_from_the_code() -> None:
    """The pages render the module docstrings that hold them, so they cannot diverge."""
    directives = _directives()
    assert "fencedlease._redis.keys" in directives["key-layout.md"]
    assert "fencedlease._core.errors" in directives["errors.md"]
    protocol = importlib.import_module("fencedlease._redis.keys").__doc__ or ""
    suffixes = (
        ":fence", ":waiters", ":waiters:meta", ":handoff:<listener id>", ":resource",
        ":resource:fence",
    )  # fmt: skip
    for suffix in suffixes:
        assert f"``<base>{suffix}``" in protocol
    errors = importlib.import_module("fencedlease._core.errors").__doc__ or ""
    for name in importlib.import_module("fencedlease._core.errors").__all__:
        assert name in errors


def test_every_page_is_in_the_nav() -> None:
    config = (ROOT / "mkdocs.yml").read_text("utf-8")
    pages = sorted(str(p.relative_to(ROOT / "docs")) for p in (ROOT / "docs").rglob("*.md"))
    assert pages
    missing = [page for page in pages if not re.search(rf"\s{re.escape(page)}\s*$", config, re.M)]
    assert missing == []


def test_the_site_home_page_tells_the_readme_s_story() -> None:
    """docs/index.md carries the README's introduction and quickstart (links made relative to
    docs/), so the two cannot drift apart."""
    readme = (ROOT / "README.md").read_text("utf-8")
    index = (ROOT / "docs" / "index.md").read_text("utf-8")
    start = "Distributed leases on Redis that are safe to build on."
    story = readme[readme.index(start) : readme.index("## Documents")]
    assert story.replace("](docs/", "](").replace("[docs/", "[") in index
