"""``python -m fencedlease``: the same command line as the ``fencedlease`` script."""

from __future__ import annotations

from fencedlease.cli import main

if __name__ == "__main__":
    main()
