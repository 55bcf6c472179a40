"""``python -m fencedlease``: the same command line as the ``fencedlease`` script (the lab's,
[`fencedlease.lab.cli`][])."""

from __future__ import annotations

from fencedlease.lab.cli import main

if __name__ == "__main__":
    main()
