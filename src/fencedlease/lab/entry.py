"""The ``fencedlease`` script's entry point: the command line of
[`fencedlease.lab.cli`][], or, when the ``lab`` extra is not installed, one line saying how to
install it (exit status 2) instead of an import traceback."""

from __future__ import annotations

import sys
from typing import Final

__all__ = ["LAB_MODULES", "main"]

#: The top-level modules of the ``lab`` extra's packages that the command line imports.
LAB_MODULES: Final = frozenset({"click", "rich", "matplotlib", "toxiproxy", "psycopg"})


def main() -> None:
    """Run the command line; without the ``lab`` extra, say so on stderr and exit 2."""
    try:
        from .cli import main as cli_main

        cli_main()  # a command imports rich or matplotlib when it runs
    except ModuleNotFoundError as exc:
        if (exc.name or "").partition(".")[0] not in LAB_MODULES:
            raise
        sys.stderr.write(
            f"fencedlease: the command line needs the lab extra ({exc.name} is not installed): "
            'pip install -e ".[lab]" in a clone of fencedlease\n'
        )
        raise SystemExit(2) from None
