"""Which optional packages the command line needs, and the line that says how to install them.
Imports nothing beyond the standard library, so it can speak when click itself is missing.

The ``cli`` extra (click, rich) is the command line and the operator's commands; the ``lab`` extra
adds the lab (the ``fencedlease-lab`` distribution: ``fencedlease check``, `LAB_COMMANDS`) and
what it needs (`LAB_PACKAGES`).
"""

from __future__ import annotations

from typing import Final

__all__ = ["EXTRA_OF", "LAB_COMMANDS", "LAB_PACKAGES", "install_line"]

#: The commands the lab (the ``fencedlease-lab`` distribution) adds to ``fencedlease``: without
#: the lab, each says how to install it.
LAB_COMMANDS: Final = ("check",)

#: What the ``lab`` extra adds for ``fencedlease check``: import name -> distribution.
LAB_PACKAGES: Final = {
    "matplotlib": "matplotlib",
    "toxiproxy": "toxiproxy-python",
    "psycopg": "psycopg",
}

#: The top-level modules the command line imports from an extra, and that extra.
EXTRA_OF: Final = {"click": "cli", "rich": "cli", **dict.fromkeys(LAB_PACKAGES, "lab")}


def install_line(who: str, extra: str, missing: str) -> str:
    """``who`` (``the command line``, ``fencedlease check``) needs ``extra``: ``missing`` (a
    module or distribution) is not installed, and the install command; one line, no newline."""
    return (
        f"fencedlease: {who} needs the {extra} extra ({missing} is not installed):"
        f' pip install -e ".[{extra}]" in a clone of fencedlease'
    )
