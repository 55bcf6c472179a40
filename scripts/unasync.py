"""Generate the sync face's I/O (``src/fencedlease/_sync/``) from the asyncio face's
(``src/fencedlease/_async/``), as httpcore does.

Every module of ``_async`` is written by hand; this script writes its ``_sync`` namesake by a short
list of rules, in order: the ``async`` and ``await`` keywords of the code are dropped (a token
pass), then `RULES` rewrite names wherever they stand (code, docstrings, comments), then ``ruff``
sorts the imports, drops the ones left unused and formats. What threads and tasks truly do
differently is the package ``primitives/`` (how each face waits, and what a lease manager's
caller is: thread or task), written by hand on both sides (`EXCLUDED`, with the cluster node
calls): a module imports ``.primitives`` and gets its face's.

Docstrings are written once, for both faces ("waits", "the caller's thread or task"): a generated
module in which ``async``, ``await`` or ``awaited`` is left is an error, and so is a rule no
module uses (a stale rule).

Usage:
    python scripts/unasync.py           write the generated modules (and remove stale ones)
    python scripts/unasync.py --check   exit 1, naming each stale module, when one differs
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

import tokenize_rt

ROOT = Path(__file__).resolve().parent.parent
SOURCE = Path("src/fencedlease/_async")
TARGET = Path("src/fencedlease/_sync")
COMMAND = "python scripts/unasync.py"

EXCLUDED = {
    "primitives/waiting.py",
    "primitives/callers.py",
    "primitives/sockets.py",
    "cluster_calls.py",  # redis-py's two cluster clients differ beyond await: both by hand
}
"""The modules of ``_async`` whose ``_sync`` namesake is written by hand: the two of
``primitives``, the one pair that says what threads and tasks do differently (how a face
waits; what a manager's caller, its spawns, its final release and its body's cancel are), and
the cluster node calls, where redis-py's two cluster clients differ beyond ``await``. Every other
module is written once."""

RULES: list[tuple[str, str]] = [
    # A cross-reference to the asyncio face's class is to the sync face's.
    (r"\bfencedlease\.aio\.(?=Async)", "fencedlease."),
    (r"\bredis\.asyncio\b", "redis"),
    (r"\bfencedlease\._async\b", "fencedlease._sync"),
    # The asyncio names: ``AsyncLease`` -> ``Lease``, ``AbstractAsyncContextManager`` ->
    # ``AbstractContextManager``, ``async_backend_from_url`` -> ``backend_from_url``.
    (r"\bcheck_async_fn\b", "check_sync_fn"),
    (r"Async(?=[A-Z])", ""),
    (r"\basync_(?=[a-z])", ""),
    (r"\baclose\b", "close"),
    (r"\b__aenter__\b", "__enter__"),
    (r"\b__aexit__\b", "__exit__"),
    (r"\bAwaitable\[(\w+)\]", r"\1"),
    # In prose: the ``async with`` block is the ``with`` block.
    (r"``async (with|for)``", r"``\1``"),
    # A module named for the asyncio face has its sync namesake: ``sqlite_async`` -> ``sqlite``.
    (r"\b(fencedlease\.[\w.]+?)_(?:aio|async)\b", r"\1"),
]

LEFT_OVER = re.compile(r"\b(async|await|awaited|awaits|awaiting)\b")
"""Words no generated module may hold: a docstring that says them is worded for one face."""

HEADER = (
    "# GENERATED from {source} by `{command}`:\n"
    "# do not edit. Edit that source, then run it again (CI runs it with --check, failing while\n"
    "# stale).\n"
)


def _drop_keywords(source: str) -> str:
    """The code's ``async`` and ``await`` keywords dropped, with the space after each."""
    tokens = tokenize_rt.src_to_tokens(source)
    kept: list[tokenize_rt.Token] = []
    skip_space = False
    for token in tokens:
        if token.name == "NAME" and token.src in ("async", "await"):
            skip_space = True
            continue
        if skip_space and token.name == tokenize_rt.UNIMPORTANT_WS:
            skip_space = False
            continue
        skip_space = False
        kept.append(token)
    return str(tokenize_rt.tokens_to_src(kept))


def _ruff(text: str, path: Path) -> str:
    """``text`` as ``ruff`` leaves it: imports sorted and the unused ones dropped, formatted."""
    for args in (["check", "--fix", "--select", "I,F401", "--quiet"], ["format", "--quiet"]):
        text = subprocess.run(
            [sys.executable, "-m", "ruff", *args, "--stdin-filename", str(path), "-"],
            input=text,
            capture_output=True,
            text=True,
            check=False,
            cwd=ROOT,
        ).stdout
    return text


def generate(root: Path, source: Path, used: set[int]) -> str:
    """The text of the sync module made from ``source`` (relative to ``root``); the indexes of
    the rules that changed it are added to ``used``."""
    text = _drop_keywords((root / source).read_text(encoding="utf-8"))
    for index, (pattern, repl) in enumerate(RULES):
        text, count = re.subn(pattern, repl, text, flags=re.MULTILINE)
        if count:
            used.add(index)
    left = sorted({m.group(0) for m in LEFT_OVER.finditer(text)})
    if left:
        raise SystemExit(
            f"scripts/unasync.py: {source} says {', '.join(left)} where the code does not: word it"
            " for both faces (the rules make it the sync face's)"
        )
    text = HEADER.format(source=source.as_posix(), command=COMMAND) + text
    return _ruff(text, TARGET / source.relative_to(SOURCE))


def _is_generated(path: Path) -> bool:
    with path.open(encoding="utf-8") as f:
        return f.readline().startswith("# GENERATED from ")


def main(argv: list[str] | None = None, root: Path = ROOT) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 if a generated file is stale"
    )
    args = parser.parse_args(argv)
    used: set[int] = set()
    stale: list[Path] = []
    expected: set[Path] = set()
    for source in sorted((root / SOURCE).rglob("*.py")):
        relative = source.relative_to(root / SOURCE)
        if relative.as_posix() in EXCLUDED:
            continue
        target = TARGET / relative
        expected.add(target)
        text = generate(root, SOURCE / relative, used)
        current = (root / target).read_text(encoding="utf-8") if (root / target).exists() else None
        if text == current:
            continue
        if args.check:
            stale.append(target)
        else:
            (root / target).parent.mkdir(parents=True, exist_ok=True)
            (root / target).write_text(text, encoding="utf-8")
            print(f"wrote {target.as_posix()}")
    for path in sorted((root / TARGET).rglob("*.py")):
        target = path.relative_to(root)
        if target in expected or not _is_generated(path):
            continue
        if args.check:
            stale.append(target)
        else:
            path.unlink()
            print(f"removed {target.as_posix()}")
    for target in stale:
        print(
            f"{target.as_posix()} is stale: not what `{COMMAND}` makes of its asyncio source;"
            " run it",
            file=sys.stderr,
        )
    unused = [RULES[i] for i in range(len(RULES)) if i not in used]
    for pattern, _ in unused:
        print(
            f"scripts/unasync.py: the rule {pattern!r} changes no module: remove it",
            file=sys.stderr,
        )
    return 1 if stale or unused else 0


if __name__ == "__main__":
    sys.exit(main())
