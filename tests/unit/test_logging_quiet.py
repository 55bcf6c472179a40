"""Expected outcomes are not printed: with no logging configured, the library writes nothing to
stderr (its logger has a NullHandler; a loss the caller is told of is logged at INFO)."""

from __future__ import annotations

import logging
import re
import subprocess
import sys
from pathlib import Path

import fencedlease

README = Path(__file__).resolve().parents[2] / "README.md"

# The README's block runs after a hold of order:42 (the README's earlier blocks), here on memory://.
SETUP = """\
from fencedlease import LeaseManager
leases = LeaseManager.from_url("memory://", prefix="my-app:locks")
with leases.hold("order:42", ttl_ms=10_000) as lease:
    pass
"""


def _persist_and_restore_block() -> str:
    """The README's ```python block that ends in ``lease.renew()`` on a released lease."""
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.DOTALL)
    found = [block for block in blocks if "lease.renew()        # False here" in block]
    assert len(found) == 1
    return str(found[0])


def test_the_readmes_renew_on_a_lost_lease_prints_nothing() -> None:
    """The README's restore-and-renew example (renew() False: the lease is lost) run in a fresh
    interpreter with no logging configured writes nothing to stderr."""
    script = SETUP + _persist_and_restore_block() + "print(lease.renew(), lease.lost)\n"
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "False True\n", "")


def test_the_library_logger_has_a_null_handler() -> None:
    """`import fencedlease` puts a NullHandler on the "fencedlease" logger and nothing else."""
    assert fencedlease.__name__ == "fencedlease"
    handlers = logging.getLogger("fencedlease").handlers
    assert [type(h) for h in handlers] == [logging.NullHandler]
