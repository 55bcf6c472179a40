"""Stale writers on purpose, end to end: with no fault at all, the stale cycles' late writes
are refused by a fenced resource and get through the controls, reported as stale holders."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from fencedlease_lab.harness.run import CheckResult

pytestmark = pytest.mark.chaos

RunCheck = Callable[..., CheckResult]

STALE = "so a stale holder acted on the data."


def test_a_fenced_run_refuses_the_stale_writers(check_run: RunCheck) -> None:
    """Fenced: the late writes of holders that lost their lease are refused, and the run is
    clean."""
    result = check_run(duration_s=6.0, keys=4, body_ms=20, stale_share=0.5)
    report = result.report
    assert report.valid, report.explain()
    assert report.stats["stale_writes_refused"] >= 20, report.stats
    assert result.exit_code == 0


@pytest.mark.parametrize("mode", ["write-fenced", "unfenced"])
def test_the_controls_let_stale_writers_through_and_name_them(
    check_run: RunCheck, mode: str
) -> None:
    """A control without any fault (so no counter rollback): stale holders' writes are
    accepted, property a names them as stale holders, and updates are lost."""
    result = check_run(mode=mode, duration_s=6.0, keys=4, body_ms=20, stale_share=0.5)
    report = result.report
    stale = [v for v in report.property("accepted-tokens-monotonic").violations]
    assert stale and all(v.message.endswith(STALE) for v in stale), report.explain()
    assert report.property("no-lost-update").violations, report.explain()
    assert report.stats["stale_writes_accepted"] >= 5, report.stats
    assert result.exit_code == 1
