"""The controls: the same pause that fencing survives breaks the counter without full fencing,
and the checker says so (a checker that cannot fail proves nothing)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from fencedlease.lab.harness.run import CheckResult

pytestmark = pytest.mark.chaos

RunCheck = Callable[..., CheckResult]


@pytest.mark.parametrize("mode", ["unfenced", "write-fenced"])
def test_control_shows_a_lost_update(check_run: RunCheck, mode: str) -> None:
    """The paused holder's stale write lands between the new holder's read and its write: an
    acknowledged increment is lost (b), and an older token is accepted after a newer one (a)."""
    result = check_run("pause-holder", mode=mode)
    report = result.report
    assert not report.valid
    assert len(report.property("no-lost-update").violations) == 1, result.report.explain()
    assert report.property("accepted-tokens-monotonic").violations, result.report.explain()
    lost = report.property("no-lost-update").violations[0].message
    assert "acknowledged increment(s) were lost" in lost
    assert "both wrote" in lost
    # the library itself still reported the loss: c and d hold
    assert report.property("loss-reported").violations == ()
    assert report.property("grant-tokens").violations == ()


def test_fenced_mode_under_the_same_pause_has_no_violation(check_run: RunCheck) -> None:
    """The same schedule, fenced reads and writes: no violation."""
    result = check_run("pause-holder", mode="fenced")
    assert result.report.valid, result.report.explain()
    assert result.report.stats["refused_accesses"] >= 1
