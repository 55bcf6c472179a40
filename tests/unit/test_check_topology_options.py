"""``fencedlease check --topology``, ``--replica-acks``, ``--fencing`` without a server: what is
refused before anything starts, which faults each topology draws, the URLs the workers read, and
the replay of the three settings."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from fencedlease.cli.commands import main
from fencedlease_lab.harness.campaign import read_replay
from fencedlease_lab.harness.kinds import (
    DEFAULT_FAULTS,
    FAULTS,
    TOPOLOGY_DEFAULTS,
    off_topology,
)
from fencedlease_lab.harness.nemesis import NemesisEnv, unavailable_reason
from fencedlease_lab.harness.schedule import draw_schedule
from fencedlease_lab.harness.topology import check_topology, split_url


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"topology": "ring"}, "topology must be standalone, sentinel or cluster; got 'ring'"),
        (
            {"topology": "sentinel", "redis_url": "redis://127.0.0.1:1/0"},
            "--topology sentinel starts its own servers: leave out --redis-url",
        ),
        (
            {"replica_acks": 1},
            "replica_acks must be 0 (or 1 with --topology sentinel: its one replica); got 1 on"
            " standalone",
        ),
        (
            {"topology": "sentinel", "replica_acks": 2},
            "replica_acks must be 0 (or 1 with --topology sentinel: its one replica); got 2 on"
            " sentinel",
        ),
        (
            {"topology": "cluster", "replica_acks": 1},
            "replica_acks must be 0 (or 1 with --topology sentinel: its one replica); got 1 on"
            " cluster",
        ),
        (
            {"topology": "cluster", "fencing": "clock"},
            "the cluster store makes counter tokens only: --fencing counter",
        ),
        ({"fencing": "wall"}, "fencing must be counter or clock; got 'wall'"),
    ],
)
def test_settings_that_cannot_work_are_refused(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)) as caught:
        check_topology(**{"topology": "standalone", **changes})
    assert str(caught.value) == message


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"fencing": "clock"},
        {"topology": "sentinel", "replica_acks": 1, "fencing": "clock"},
        {"topology": "cluster"},
    ],
)
def test_settings_that_work_pass(changes: dict[str, Any]) -> None:
    check_topology(**{"topology": "standalone", **changes})


def test_the_cli_refuses_them_before_anything_starts(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = CliRunner().invoke(
        main,
        ["check", "--topology", "cluster", "--replica-acks", "1", "--out", str(out)],
    )
    assert result.exit_code == 2, result.output
    assert "replica_acks must be 0" in " ".join(result.output.split())
    assert not (out / "report.json").exists()


def test_each_topology_runs_its_own_faults() -> None:
    """A kind runs where it can: the Redis process, proxy and key faults on one server; the
    failovers on their deployment; a worker's pause and clock anywhere."""
    assert off_topology(DEFAULT_FAULTS, "standalone") == []
    assert off_topology(TOPOLOGY_DEFAULTS["sentinel"], "sentinel") == []
    assert off_topology(TOPOLOGY_DEFAULTS["cluster"], "cluster") == []
    assert off_topology(TOPOLOGY_DEFAULTS["sentinel"], "cluster") == [
        "sentinel-failover",
        "sentinel-kill-primary",
        "deposed-primary",
    ]
    assert off_topology(DEFAULT_FAULTS, "sentinel") == [
        kind for kind in dict.fromkeys(DEFAULT_FAULTS) if kind not in ("pause-holder", "clock")
    ]
    everywhere = sorted(k for k, info in FAULTS.items() if len(info.topologies) == 3)
    assert everywhere == ["clock", "pause-holder"]
    assert off_topology(["lag-failover", "replica-lag", "cluster-kill-master"], "standalone") == [
        "lag-failover",
        "replica-lag",
        "cluster-kill-master",
    ]


def test_a_topology_fault_needs_its_deployment() -> None:
    env = NemesisEnv(
        writer=None,  # type: ignore[arg-type]
        board=None,  # type: ignore[arg-type]
        worker_names=["w0", "w1"],
        admin_url="redis://127.0.0.1:1/0",
        prefix="p",
        key="k",
        ttl_ms=1000,
        heartbeat_ms=250,
        body_ms=1800,
    )
    assert unavailable_reason("lag-failover", env) == "needs --topology sentinel"
    assert unavailable_reason("cluster-failover", env) == "needs --topology cluster"
    assert unavailable_reason("replica-lag", env) == "needs --topology sentinel or cluster"


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (
            "redis+sentinel://127.0.0.1:26379,127.0.0.1:26380/fencedlease",
            (
                "redis+sentinel",
                [("127.0.0.1", 26379), ("127.0.0.1", 26380)],
                "fencedlease",
                {"username": None, "password": None},
            ),
        ),
        (
            "redis+cluster://app:s%40cret@10.0.0.1:7000,10.0.0.2:7001",
            (
                "redis+cluster",
                [("10.0.0.1", 7000), ("10.0.0.2", 7001)],
                "",
                {"username": "app", "password": "s@cret"},
            ),
        ),
    ],
)
def test_worker_urls_are_read(url: str, expected: object) -> None:
    assert split_url(url) == expected


def test_a_url_without_a_port_is_refused() -> None:
    with pytest.raises(ValueError, match="a redis\\+cluster URL lists host:port pairs; got 'h'"):
        split_url("redis+cluster://h")


def test_a_replay_keeps_the_topology_and_the_grant_options(tmp_path: Path) -> None:
    schedule = draw_schedule(
        ["lag-failover"], seed=7, workers=3, ttl_ms=1000, heartbeat_ms=250, body_ms=20, lead_ms=1000
    )
    config = {
        "workers": 3,
        "faults": ["lag-failover"],
        "topology": "sentinel",
        "replica_acks": 1,
        "fencing": "clock",
    }
    path = tmp_path / "report.json"
    path.write_text(json.dumps({"seed": 7, "config": config, "schedule": schedule.to_dict()}))
    replay = read_replay(path, {"out_dir": tmp_path / "again"})
    assert (replay.topology, replay.replica_acks, replay.fencing) == ("sentinel", 1, "clock")
    assert replay.schedule == schedule
    given = read_replay(path, {"out_dir": tmp_path / "again", "replica_acks": 0})
    assert given.replica_acks == 0


@pytest.mark.parametrize(
    ("args", "acks"),
    [
        (["--topology", "sentinel"], 1),
        (["--topology", "sentinel", "--replica-acks", "0"], 0),
        (["--topology", "sentinel", "--replica-acks", "1"], 1),
        ([], 0),
        (["--topology", "cluster"], 0),
    ],
)
def test_replica_acks_default_to_one_on_sentinel_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], acks: int
) -> None:
    """Not given, ``--replica-acks`` is 1 on Sentinel (a failover then hands no counter token
    out twice) and 0 elsewhere; given, it is what was given (0 on Sentinel: the control)."""
    import fencedlease_lab.harness.run as harness_run

    seen: list[int] = []

    def record(config: Any, on_progress: object = None) -> Any:
        seen.append(config.replica_acks)
        raise RuntimeError("recorded")  # the run itself is not this test's

    monkeypatch.setattr(harness_run, "run_check", record)
    result = CliRunner().invoke(main, ["check", *args, "--out", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    assert "RuntimeError: recorded" in result.output
    assert seen == [acks]
