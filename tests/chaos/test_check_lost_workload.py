"""A worker process that dies outside the nemesis's plan is not passed over in silence: the
report names its lanes, and the run proves nothing when what remained left a property
unchecked."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable

import pytest

from fencedlease_lab.harness.run import CheckResult, Progress

pytestmark = pytest.mark.chaos

RunCheck = Callable[..., CheckResult]


def test_a_worker_killed_behind_the_runs_back_is_reported_and_the_run_inconclusive(
    check_run: RunCheck,
) -> None:
    """SIGKILL of a worker process 1 s into a fault-free run: its lane stopped recording, the
    report says so, and, recovery having nothing to judge, the run exits 2."""
    killed: list[int] = []

    def kill_w1(progress: Progress) -> None:
        pid = progress.workers[1]["pid"]
        if not killed and progress.elapsed_s >= 1.0 and pid:
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)

    result = check_run(duration_s=4.0, workers=2, keys=4, on_progress=kill_w1)
    assert killed
    lost = [f.message for f in result.report.findings if f.kind == "workload-lost"]
    assert len(lost) == 1 and lost[0].startswith("w1's lane 0 stopped recording at "), lost
    assert result.report.stats["lanes_lost"] == 1
    assert result.exit_code == 2
    assert result.inconclusive == (
        f"the run lost part of its workload ({lost[0]}), and what remained proved nothing of"
        " recovery",
    )
