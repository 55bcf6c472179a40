"""``fencedlease check --topology``: each topology's short check, and the control pair on
Sentinel: a replica that lags, then the primary killed, hands out the same counter tokens twice
unless each grant waits for the replica (``replica_acks=1``) or tokens come from the clock."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from fencedlease.cli.commands import main
from fencedlease_lab.harness.run import CheckResult
from fencedlease_lab.servers.redis import find_redis_binary

pytestmark = pytest.mark.chaos

RunCheck = Callable[..., CheckResult]


def _report(result: CheckResult) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(result.report_path.read_text("utf-8"))
    return data


def _fault_details(result: CheckResult) -> dict[str, dict[str, Any]]:
    """Each injected fault's completion detail, by kind."""
    return {f.kind: f.detail for f in result.history().faults if f.end is not None}


def test_standalone_stays_the_default(check_run: RunCheck) -> None:
    """No --topology: one redis-server, workers on redis://, counter tokens, no replica acks;
    report.json says so."""
    # 12 s: with three test processes on two cores, the workers' start and the aim at a holder
    # in its body can take a 6 s run past the point where the fault fits (it is then skipped)
    result = check_run("pause-holder", duration_s=12.0)
    assert result.passed, result.report.explain()
    report = _report(result)
    assert report["topology"] == "standalone"
    assert report["config"]["topology"] == "standalone"
    assert report["config"]["replica_acks"] == 0
    assert report["config"]["fencing"] == "counter"
    assert result.redis.startswith("embedded redis-server")


def test_sentinel_short_check(check_run: RunCheck) -> None:
    """A Sentinel deployment: a lagging replica, an unplanned failover (the primary killed) and a
    paused holder, with every grant acknowledged by the replica: no violation, and the
    failover really moved the primary."""
    result = check_run(
        "replica-lag",
        "sentinel-kill-primary",
        "pause-holder",
        duration_s=25.0,
        topology="sentinel",
        replica_acks=1,
        keys=2,
    )
    assert result.passed, result.report.explain()
    assert result.report.stats["faults_injected"] == 3, result.notes
    details = _fault_details(result)
    killed = details["sentinel-kill-primary"]
    assert killed["new_primary"] != killed["old_primary"]
    assert details["replica-lag"]["paused"] != []
    report = _report(result)
    assert report["topology"] == "sentinel"
    assert report["config"]["replica_acks"] == 1
    assert "Sentinel deployment" in result.redis


def test_sentinel_check_passes_with_its_defaults(tmp_path: Path) -> None:
    """``fencedlease check --topology sentinel`` and nothing else (the seed pinned to make a
    failure replayable): every grant and renewal acknowledged by the replica (the topology's
    default), so its failovers hand out no token twice: exit 0."""
    if find_redis_binary() is None:
        pytest.skip("no redis-server binary for the harness")
    out = tmp_path / "out"
    result = CliRunner().invoke(
        main, ["check", "--topology", "sentinel", "--seed", "11", "--out", str(out)]
    )
    report = json.loads((out / "report.json").read_text("utf-8"))
    assert result.exit_code == 0, result.output
    assert report["config"]["replica_acks"] == 1
    assert (report["verdict"], report["violation_count"]) == ("pass", 0)
    assert report["stats"]["faults_injected"] >= 3, report["stats"]


@pytest.mark.cluster
def test_cluster_short_check(check_run: RunCheck) -> None:
    """A Redis Cluster of three masters with a replica each: a manual failover of the first
    key's master, a lagging replica and a paused holder: no violation, and the failover moved
    the key's slot to the old replica."""
    result = check_run(
        "cluster-failover", "replica-lag", "pause-holder", duration_s=20.0, topology="cluster"
    )
    assert result.passed, result.report.explain()
    assert result.report.stats["faults_injected"] == 3, result.notes
    moved = _fault_details(result)["cluster-failover"]
    assert moved["new_master"] != moved["old_master"]
    assert _report(result)["topology"] == "cluster"
    assert "Redis Cluster" in result.redis


def test_control_lag_and_failover_duplicate_counter_tokens(check_run: RunCheck) -> None:
    """The control: no replica acknowledgement, counter tokens. The grants the primary made in
    the ttl before it was killed never reached the replica; the promoted replica's counter
    hands the same tokens out again. The checker reports the duplicates (exit 1)."""
    result = check_run("lag-failover", duration_s=12.0, topology="sentinel", replica_acks=0, keys=2)
    assert result.exit_code == 1, result.report.explain()
    duplicates = [
        v
        for v in result.report.property("grant-tokens").violations
        if "was granted twice" in v.message
    ]
    assert duplicates, result.report.explain()
    detail = _fault_details(result)["lag-failover"]
    assert detail["new_primary"] in detail["paused"]  # the lagging replica was promoted


@pytest.mark.parametrize(
    ("option", "value"), [("replica_acks", 1), ("fencing", "clock")], ids=["acks", "clock"]
)
def test_control_lag_and_failover_safe_with_acks_or_clock(
    check_run: RunCheck, option: str, value: object
) -> None:
    """The same fault with each grant acknowledged by the replica (an unacknowledged one is
    taken back), or with clock tokens (larger than any the lost counter gave): no duplicate,
    no violation."""
    result = check_run(
        "lag-failover", duration_s=12.0, topology="sentinel", keys=2, **{option: value}
    )
    assert result.passed, result.report.explain()
    assert result.report.stats["faults_injected"] == 1
    detail = _fault_details(result)["lag-failover"]
    assert detail["new_primary"] in detail["paused"]
    assert _report(result)["config"][option] == value
