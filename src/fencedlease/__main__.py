"""``python -m fencedlease``: the same command line as the ``fencedlease`` script (the lab's,
[`fencedlease.lab.cli`][], through [`fencedlease.lab.entry`][])."""

from __future__ import annotations

from fencedlease.lab.entry import main

if __name__ == "__main__":
    main()
