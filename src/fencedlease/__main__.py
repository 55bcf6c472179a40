"""``python -m fencedlease``: the same command line as the ``fencedlease`` script
([`fencedlease.cli.entry`][])."""

from __future__ import annotations

from fencedlease.cli.entry import main

if __name__ == "__main__":
    main()
