"""The ``fencedlease`` script's entry point: the command line of
[`fencedlease.cli.commands`][], or, when a package of its extra is not installed, one line saying
which extra to install (exit status 2) instead of an import traceback: ``cli`` (click, rich) for
every command, ``lab`` (the lab and matplotlib, toxiproxy-python, psycopg) for ``check`` too."""

from __future__ import annotations

import sys

from .extras import EXTRA_OF, install_line

__all__ = ["main"]


def main() -> None:
    """Run the command line; without its extra, say which on stderr and exit 2."""
    try:
        from .commands import main as cli_main

        cli_main()  # a command imports rich or matplotlib when it runs
    except ModuleNotFoundError as exc:
        extra = EXTRA_OF.get((exc.name or "").partition(".")[0])
        if extra is None:
            raise
        sys.stderr.write(install_line("the command line", extra, str(exc.name)) + "\n")
        raise SystemExit(2) from None
