"""Rewrite the library's reST-flavoured docstrings into the Markdown mkdocstrings renders, in place.

A one-off, mechanical rewrite, kept so that it can be run again over docstrings written in the
old style (it changes nothing in a docstring that has none of these). In every docstring of
``src/fencedlease`` (the source text itself):

- a Sphinx role (``:class:`~fencedlease.Lease```) becomes mkdocstrings' cross-reference
  ``[`Lease`][fencedlease.Lease]``, its target resolved as a reader of the source would (from the
  docstring's scope outward) and mapped to the public name that exports it; a target that is
  private and exported by no public module, or a standard-library name, becomes plain code;
- ``text::`` and the indented block after it become ``text:`` and a fenced code block;
- a reST simple table (``====  ====`` borders) becomes a Markdown pipe table;
- a line the rewrite made longer than 100 characters is broken at its last space before that.

Run from the repository root: ``python scripts/rst_to_markdown.py`` (then ``ruff format src``).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Final

import griffe

__all__ = ["main", "rewrite_source", "rst_to_markdown"]

_ROLE: Final = re.compile(
    r":(?:py:)?(?:class|meth|func|mod|attr|data|exc|obj):"
    r"`(?P<body>[^`]+)`"
)
_EXPLICIT_TITLE: Final = re.compile(r"\A(?P<title>.*?)\s*<(?P<target>[^<>]+)>\Z", re.DOTALL)
_TABLE_BORDER: Final = re.compile(r"\A *=+(?: +=+)+ *\Z")
_FENCE: Final = "```"


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


Resolve = Callable[[str], "str | None"]
"""Maps a role's target to the path to link to, or None for plain code (no link)."""


def _role(match: re.Match[str], resolve: Resolve) -> str:
    body = match["body"].strip()
    explicit = _EXPLICIT_TITLE.match(body)
    if explicit:
        title, target = explicit["title"], explicit["target"].strip()
    else:
        target = body
        title = ""
    if target.startswith("!"):  # Sphinx: no link wanted
        return f"`{title or target[1:]}`"
    if target.startswith("~"):
        target = target[1:]
        title = title or target.rsplit(".", 1)[-1]
    path = resolve(target)
    if path is None:
        return f"`{title or target}`"
    if (title or target) == path:  # autorefs takes the title for the identifier
        return f"[`{path}`][]"
    return f"[`{title or target}`][{path}]"


def _roles(text: str, resolve: Resolve) -> str:
    """Every role outside a fenced code block into a cross-reference."""
    parts = re.split(r"(^ *```.*?^ *```)", text, flags=re.MULTILINE | re.DOTALL)
    return "".join(
        part if i % 2 else _ROLE.sub(lambda m: _role(m, resolve), part)
        for i, part in enumerate(parts)
    )


def _literal_blocks(lines: list[str]) -> list[str]:
    """``text::`` + an indented block into ``text:`` + a fenced block (a lone ``::`` vanishes)."""
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        stripped = line.rstrip()
        if not stripped.endswith("::"):
            out.append(line)
            i += 1
            continue
        indent = _indent(line)
        j = i + 1
        while j < len(lines) and not lines[j].strip():
            j += 1
        block_end = j
        while block_end < len(lines) and (
            not lines[block_end].strip() or _indent(lines[block_end]) > indent
        ):
            block_end += 1
        while block_end > j and not lines[block_end - 1].strip():
            block_end -= 1
        if block_end == j:  # no indented block follows: not a literal block
            out.append(line)
            i += 1
            continue
        text = stripped[:-2].rstrip()
        if text.strip():
            out.append(text + ":")
        block = lines[j:block_end]
        cut = min(_indent(b) for b in block if b.strip())
        pad = " " * indent
        if out and out[-1].strip():
            out.append("")
        out.append(pad + _FENCE)
        out.extend(pad + b[cut:] if b.strip() else "" for b in block)
        out.append(pad + _FENCE)
        if block_end < len(lines) and lines[block_end].strip():
            out.append("")
        i = block_end
    return out


def _cells(line: str, starts: list[int]) -> list[str]:
    bounds = [*starts[1:], None]
    return [line[start:end].strip() for start, end in zip(starts, bounds, strict=True)]


def _pipe_row(cells: list[str], pad: str) -> str:
    return pad + "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"


def _tables(lines: list[str]) -> list[str]:
    """reST simple tables into pipe tables; a table without a header gets an empty one."""
    out: list[str] = []
    i = 0
    while i < len(lines):
        if not _TABLE_BORDER.match(lines[i]):
            out.append(lines[i])
            i += 1
            continue
        border = lines[i]
        starts = [m.start() for m in re.finditer(r"=+", border)]
        borders = [i]
        j = i + 1
        while j < len(lines) and len(borders) < 3:
            if _TABLE_BORDER.match(lines[j]):
                borders.append(j)
                if j + 1 >= len(lines) or not lines[j + 1].strip():
                    break
            j += 1
        if len(borders) < 2:  # an unclosed border: leave it be
            out.append(lines[i])
            i += 1
            continue
        rows: list[list[str]] = []
        header: list[str] = [""] * len(starts)
        for k in range(i + 1, borders[-1]):
            if k in borders:
                header, rows = rows[0] if rows else header, []
                continue
            if not lines[k].strip():
                continue
            cells = _cells(lines[k], starts)
            if rows and not cells[0]:  # a continuation line
                rows[-1] = [f"{a} {b}".strip() for a, b in zip(rows[-1], cells, strict=True)]
            else:
                rows.append(cells)
        pad = " " * _indent(border)
        if out and out[-1].strip():
            out.append("")
        out.append(_pipe_row(header, pad))
        out.append(pad + "|" + "|".join(" --- " for _ in starts) + "|")
        out.extend(_pipe_row(row, pad) for row in rows)
        i = borders[-1] + 1
        if i < len(lines) and lines[i].strip():
            out.append("")
    return out


def rst_to_markdown(text: str, resolve: Resolve = lambda target: target) -> str:
    """The Markdown mkdocstrings should render for the reST-flavoured docstring ``text``.

    ``resolve`` maps each role's target to the identifier to link to (None: plain code); by
    default the target as written."""
    lines = _tables(_literal_blocks(text.split("\n")))
    return _roles("\n".join(lines), resolve)


def _is_private(path: str) -> bool:
    return any(part.startswith("_") and not part.startswith("__") for part in path.split("."))


class _Resolver:
    """Resolves role targets the way a reader of the source would, to documented paths.

    A target is looked up as written, else from the docstring's scope outward (a class's
    inherited members included); a stdlib name is plain code (the build is offline, with no
    Python inventory). The result is mapped to the public name that exports it
    (``fencedlease._lease.Lease.check`` -> ``fencedlease.Lease.check``); a private object that no
    public module exports is plain code. Anything else stays a link, and a link to nothing fails
    the strict build."""

    def __init__(self, package: griffe.Module) -> None:
        self.collection = package.modules_collection
        self.public: dict[str, str] = {}
        modules = sorted(_modules(package), key=lambda m: (m.path.count("."), m.path))
        for module in modules:
            if _is_private(module.path):
                continue
            self.public.setdefault(module.path, module.path)
            for export in module.exports or ():
                name = export if isinstance(export, str) else str(getattr(export, "name", export))
                canonical = self._canonical(f"{module.path}.{name}")
                if canonical is not None:
                    self.public.setdefault(canonical, f"{module.path}.{name}")

    def _lookup(self, path: str) -> griffe.Object | griffe.Alias | None:
        try:
            found = self.collection[path]
        except (KeyError, ValueError, griffe.AliasResolutionError, griffe.CyclicAliasError):
            return None
        return found if isinstance(found, (griffe.Object, griffe.Alias)) else None

    def _canonical(self, path: str) -> str | None:
        found = self._lookup(path)
        if found is None:
            return None
        try:
            return found.final_target.path if isinstance(found, griffe.Alias) else found.path
        except (griffe.AliasResolutionError, griffe.CyclicAliasError):
            return None

    def _in_scope(self, obj: griffe.Object, target: str) -> str | None:
        first, _, rest = target.partition(".")
        scope: griffe.Object | None = obj
        while scope is not None:
            members = scope.all_members if scope.is_class else scope.members
            if first in members:
                return f"{scope.path}.{target}"
            if scope.is_class and first == scope.name:
                return f"{scope.path}.{rest}" if rest else scope.path
            scope = scope.parent
        return None

    def _public(self, path: str) -> str | None:
        parts = path.split(".")
        for k in range(len(parts), 0, -1):
            canonical = self._canonical(".".join(parts[:k]))
            if canonical is not None and canonical in self.public:
                linked = ".".join([self.public[canonical], *parts[k:]])
                if not _is_private(linked):
                    return linked
        return None if _is_private(path) else path

    def __call__(self, obj: griffe.Object, target: str) -> str | None:
        if self._lookup(target) is not None:
            return self._public(target)
        if "." in target and target.partition(".")[0] in sys.stdlib_module_names:
            return None
        scoped = self._in_scope(obj, target)
        if scoped is not None:
            return self._public(scoped)
        return target  # a link to nothing: the strict build reports it


def _modules(module: griffe.Module) -> Iterator[griffe.Module]:
    yield module
    for member in module.modules.values():
        if isinstance(member, griffe.Module):
            yield from _modules(member)


def _objects(obj: griffe.Object) -> Iterator[griffe.Object]:
    yield obj
    for member in obj.members.values():
        if isinstance(member, griffe.Object):
            yield from _objects(member)


WIDTH: Final = 100
_RAW_DOCSTRING: Final = re.compile(r"""\s*[rR]("{3}|'{3})""")
_TABLE_PIPE: Final = re.compile(r"(?<!\\)\\\|")  # a \| not already written \\|


_NOT_PROSE: Final = re.compile(r"\s*(?:$|```|\||[-*] |\d+\. |\"\"\"|[A-Z]\w*:$)")


def _wrap(lines: list[str]) -> list[str]:
    """Every line longer than :data:`WIDTH` outside a fenced block and a table, broken at its last
    space that fits. The words that do not fit move to the start of the next line when it goes on
    the same paragraph (prose, indented at least as deep), which is then wrapped in turn; else
    they get a line of their own, indented as this one."""
    lines = list(lines)
    out: list[str] = []
    fenced = False
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.strip().startswith(_FENCE):
            fenced = not fenced
        indent = _indent(line)
        cut = line.rfind(" ", indent + 1, WIDTH + 1)
        if len(line) > WIDTH and not fenced and not line.lstrip().startswith("|") and cut > indent:
            head, tail = line[:cut].rstrip(), line[cut:].strip()
            following = lines[i + 1] if i + 1 < len(lines) else ""
            if not _NOT_PROSE.match(following) and _indent(following) >= indent:
                lines[i + 1] = " " * _indent(following) + tail + " " + following.strip()
            else:
                lines.insert(i + 1, " " * indent + tail)
            line = head
        out.append(line)
        i += 1
    return out


def rewrite_source(text: str, spans: list[tuple[int, int, Resolve]]) -> str:
    """``text`` (a module's source) with each docstring span ``(first, last, resolve)`` (1-based
    line numbers, inclusive) rewritten by :func:`rst_to_markdown` and :func:`_wrap`."""
    lines = text.split("\n")
    for first, last, resolve in sorted(spans, key=lambda span: span[0], reverse=True):
        old = lines[first - 1 : last]
        new = rst_to_markdown("\n".join(old), resolve).split("\n")
        if not _RAW_DOCSTRING.match(old[0]):  # a table's \| escape, in a plain str: \\|
            new = [_TABLE_PIPE.sub(r"\\\\|", t) if t.lstrip().startswith("|") else t for t in new]
        if new != old:
            lines[first - 1 : last] = _wrap(new)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Rewrite every docstring of the package under ``src`` (``argv``: ``[src]``, default
    ``src``); print the files changed."""
    src = Path((argv or sys.argv[1:] or ["src"])[0])
    package = griffe.load("fencedlease", search_paths=[str(src)])
    assert isinstance(package, griffe.Module)
    resolver = _Resolver(package)
    spans: dict[Path, list[tuple[int, int, Resolve]]] = {}
    for obj in _objects(package):
        docstring = obj.docstring
        if docstring is None or docstring.lineno is None or docstring.endlineno is None:
            continue
        path = Path(str(obj.filepath))
        spans.setdefault(path, []).append(
            (docstring.lineno, docstring.endlineno, partial(resolver, obj))
        )
    for path, found in sorted(spans.items()):
        text = path.read_text("utf-8")
        new = rewrite_source(text, found)
        if new != text:
            path.write_text(new, "utf-8")
            print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
