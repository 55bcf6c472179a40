"""The schedule on real servers: a replay runs the same faults on the same worker indexes, and
faults that overlap (a Redis restart during a Redis pause) compose without a deadlock."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from fencedlease_lab.harness.campaign import read_replay
from fencedlease_lab.harness.run import CheckResult, run_check
from fencedlease_lab.harness.schedule import Schedule, draw_schedule

pytestmark = pytest.mark.chaos

RunCheck = Callable[..., CheckResult]


def first_seed(kinds: tuple[str, ...], wanted: Callable[[Schedule], bool]) -> int:
    """The first seed whose schedule for ``kinds`` (the chaos runs' settings) is ``wanted``."""
    for seed in range(1000):
        schedule = draw_schedule(
            kinds, seed=seed, workers=3, ttl_ms=1000, heartbeat_ms=250, body_ms=1800,
            lead_ms=1000,
        )  # fmt: skip
        if wanted(schedule):
            return seed
    raise AssertionError("no seed gives the schedule wanted")


def invoked_faults(result: CheckResult) -> list[tuple[int, str, Any]]:
    """(index, kind, target) of every fault the run began, in index order."""
    return sorted((f.detail["index"], f.kind, f.target) for f in result.history().faults)


def test_a_replay_runs_the_same_schedule_on_the_same_workers(
    check_run: RunCheck, tmp_path: Path
) -> None:
    """Run, then replay its report.json: the same seed and schedule (the same bytes), and in
    both histories every fault hits the worker the schedule names, not whoever held the lease."""
    kinds = ("partition", "latency", "pause-holder", "redis-restart-aof")
    seed = first_seed(kinds, lambda s: len(s.overlaps()) >= 2)
    first = check_run(*kinds, seed=seed, duration_s=20.0)
    assert first.report.valid, first.report.explain()
    assert first.schedule is not None
    config = read_replay(first.report_path, {"out_dir": tmp_path / "replay"})
    again = run_check(config)
    assert again.report.valid, again.report.explain()
    assert again.seed == seed
    recorded = json.loads(first.report_path.read_text("utf-8"))["schedule"]
    replayed = json.loads(again.report_path.read_text("utf-8"))["schedule"]
    assert json.dumps(replayed, sort_keys=True) == json.dumps(recorded, sort_keys=True)
    planned = [
        (f.index, f.kind, None if f.target is None else f"w{f.target}")
        for f in first.schedule.faults
    ]
    assert invoked_faults(first) == planned
    assert invoked_faults(again) == planned


def test_a_redis_restart_during_a_redis_pause(check_run: RunCheck) -> None:
    """The restart kills the stopped server and starts a new one; the pause ends with it; the
    run goes on, every property holds and a lease is granted again after both."""
    kinds = ("redis-pause", "redis-restart-aof")
    seed = first_seed(kinds, lambda s: s.overlaps() == [(0, 1)] and s.faults[1].offset_ms > 100)
    result = check_run(*kinds, seed=seed)
    assert result.report.valid, result.report.explain()
    pause, restart = sorted(result.history().faults, key=lambda f: f.detail["index"])
    assert (pause.kind, restart.kind) == kinds
    assert pause.type == restart.type == "ok"
    assert pause.start < restart.start < (pause.end or 0)
    assert restart.detail["during_pause"] is True
    assert restart.detail["counter_before"] is None  # a paused Redis is not asked
    assert restart.detail["counter_after"] is not None
    assert pause.detail["ended_by_restart"] is True
    after = [g for g in result.history().grants if g.granted > (pause.end or 0)]
    assert after, "no lease was granted after the pause and the restart"
    assert result.report.property("recovery").checked == 1


def test_a_campaign_of_controls_exits_1(tmp_path: Path) -> None:
    """``--runs 2`` of the unfenced control at the command line: seeds 30 and 31, each in its
    own directory with its report, a table, campaign.json, and exit status 1 (violations)."""
    from click.testing import CliRunner

    from fencedlease.cli.commands import main
    from fencedlease_lab.servers.redis import find_redis_binary

    if find_redis_binary() is None:
        pytest.skip("no redis-server binary for the harness")
    out = tmp_path / "campaign"
    result = CliRunner().invoke(
        main,
        ["check", "--mode", "unfenced", "--faults", "pause-holder", "--duration", "10",
         "--runs", "2", "--seed", "30", "--out", str(out)],
    )  # fmt: skip
    assert result.exit_code == 1, result.output
    data = json.loads((out / "campaign.json").read_text("utf-8"))
    assert data["exit_code"] == 1
    assert [run["seed"] for run in data["runs"]] == [30, 31]
    assert any(run["verdict"] == "fail" and run["violations"] > 0 for run in data["runs"])
    for run in data["runs"]:
        report = json.loads((out / f"seed-{run['seed']}" / "report.json").read_text("utf-8"))
        assert report["seed"] == run["seed"]
        assert report["verdict"] == run["verdict"]
        assert run["operations"] > 0
