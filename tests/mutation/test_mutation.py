"""The mutation self-test, quick version: ``fencedlease check`` with default arguments kills the
planted safety bugs of ``scripts/mutate.py --quick`` (one seed each).

About 80 s per mutant, two at once (about 4 minutes), so it runs only when asked:
``FENCEDLEASE_MUTATION=1 python -m pytest -m mutation tests/mutation`` (CI does). The full
score (every mutant, three seeds) is ``python scripts/mutate.py``; docs/harness.md has it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fencedlease_lab.servers.redis import find_redis_binary

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "mutate.py"

pytestmark = [
    pytest.mark.mutation,
    pytest.mark.skipif(
        os.environ.get("FENCEDLEASE_MUTATION") != "1",
        reason="slow (about a minute per mutant): FENCEDLEASE_MUTATION=1 runs it",
    ),
]


@pytest.mark.timeout(3600)
def test_the_quick_mutants_are_killed(tmp_path: Path) -> None:
    if find_redis_binary() is None:
        if os.environ.get("FENCEDLEASE_REQUIRE_SERVERS") == "1":
            pytest.fail("required server unavailable: no redis-server for the harness")
        pytest.skip("no redis-server binary for the harness")
    out = tmp_path / "mutants.json"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--jobs", "2", "--json", str(out),
         "--work-dir", str(tmp_path)],
        capture_output=True, text=True, check=False, timeout=3500,
    )  # fmt: skip
    assert out.exists(), proc.stdout + proc.stderr
    result = json.loads(out.read_text("utf-8"))
    verdicts = {m["name"]: (m["verdict"], m["killed"], len(m["runs"])) for m in result["mutants"]}
    quick = _quick_names()
    expected = {name: ("killed", 1, 1) for name in quick}
    expected["baseline"] = ("clean", 0, 1)  # the unchanged library passes the same run
    assert verdicts == expected, proc.stdout
    assert result["seeds"] == [1]
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _quick_names() -> list[str]:
    listed = subprocess.run(
        [sys.executable, str(SCRIPT), "--list", "--quick"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return [line.split()[0] for line in listed.stdout.splitlines() if line.strip()]
