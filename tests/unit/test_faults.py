"""The parts of the newer nemeses that need no server: the jumped clock, a killed worker's
history closed and continued, the kernel links' names and addresses, ``all`` and ``default``."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from fencedlease.testing import FakeClock
from fencedlease_lab.harness.faults_clock import JUMP_TTLS, OffsetClock, run_clock_fault
from fencedlease_lab.harness.faults_network import one_way_toxic
from fencedlease_lab.harness.faults_process import KILLED, close_killed_history, is_dead
from fencedlease_lab.harness.history import HistoryWriter, read_history
from fencedlease_lab.harness.nemesis import (
    ALL_FAULTS,
    DEFAULT_FAULTS,
    FAULTS,
    fault_duration_s,
    parse_faults,
)
from fencedlease_lab.harness.schedule import (
    ALONE,
    LAST,
    OVERLAPPING,
    draw_schedule,
    may_overlap,
)
from fencedlease_lab.servers.netns import WorkerLinks, table_name


def test_offset_clock_moves_wall_time_only() -> None:
    offsets = [0.0, 0.0]
    fake = FakeClock(start_time=1000.0)
    clock = OffsetClock(offsets, 1, base=fake)
    assert (clock.monotonic(), clock.time()) == (0.0, 1000.0)
    offsets[1] = -300.0
    offsets[0] = 7.0  # another worker's
    fake.advance(250)
    assert (clock.monotonic(), clock.time()) == (0.25, 700.25)
    clock.sleep(0.5)
    assert fake.monotonic() == 0.75


def test_clock_fault_steps_and_resets() -> None:
    """The fault jumps forwards, backwards, strobes between the two, and ends at offset 0."""
    offsets: list[float] = []
    done = run_clock_fault(offsets.append, ttl_ms=100, duration_s=0.06, stop=threading.Event())
    assert [s["step"] for s in done["steps"]] == ["forward", "backward", "strobe", "reset"]
    assert [s["offset_ms"] for s in done["steps"]] == [500, -500, 500, 0]
    assert done["jump_ms"] == JUMP_TTLS * 100
    assert done["strobe_flips"] >= 1
    assert offsets[:3] == [0.5, -0.5, 0.5]
    assert set(offsets[3:-1]) <= {0.5, -0.5}
    assert offsets[-1] == 0.0


def test_clock_fault_stopped_early_still_resets() -> None:
    """A fault stopped after its first jump still sets the wall clock back to 0."""
    offsets: list[float] = []
    stop = threading.Event()
    stop.set()
    done = run_clock_fault(offsets.append, ttl_ms=1000, duration_s=30.0, stop=stop)
    assert [s["step"] for s in done["steps"]] == ["forward", "reset"]
    assert offsets == [5.0, 0.0]


def test_a_killed_workers_history_is_closed_and_continued(tmp_path: Path) -> None:
    path = tmp_path / "history-w1.jsonl"
    with HistoryWriter(path, "w1") as writer:
        writer.record("acquire", "invoke", id=0, key="k")
        writer.record("acquire", "ok", id=0, key="k", token=7)
        writer.record("write", "invoke", id=1, grant=0, key="k", token=7, value=3)
    with path.open("a") as file:
        file.write('{"process":"w1","op":"wri')  # killed mid-line
    closed = close_killed_history(path, "w1", 12.5)
    assert closed == {"unfinished": ["write"], "holds": [7]}
    events = read_history(path)
    assert [(e.op, e.type, e.id, e.outcome) for e in events] == [
        ("acquire", "invoke", 0, None),
        ("acquire", "ok", 0, None),
        ("write", "invoke", 1, None),
        ("write", "info", 1, KILLED),
        ("hold", "info", 0, KILLED),
    ]
    assert events[3].value == 3
    assert events[4].detail == {"body_end": 12.5, "killed_at": 12.5}
    # The fresh process under the same name goes on after the largest id.
    with HistoryWriter(path, "w1") as writer:
        assert writer.invoke("acquire", key="k").id == 2
    assert all(json.loads(line) for line in path.read_text().splitlines())


def test_is_dead() -> None:
    import os

    assert not is_dead(os.getpid())
    assert is_dead(2**22 + 12345)  # above pid_max's default: no such process


def test_worker_links_names_fit_the_kernel_and_do_not_meet() -> None:
    links = WorkerLinks("a1b2c3d4", 3).links
    assert [(x.netns, x.host_if, x.ns_if) for x in links] == [
        (f"fencedlease-a1b2c3d4-w{i}", f"fla1b2c3d4h{i}", f"fla1b2c3d4n{i}") for i in range(3)
    ]
    assert all(len(x.host_if) <= 15 for x in links)  # IFNAMSIZ - 1
    assert [(x.host_ip, x.ns_ip) for x in links] == [
        ("10.97.178.1", "10.97.178.2"),
        ("10.97.178.5", "10.97.178.6"),
        ("10.97.178.9", "10.97.178.10"),
    ]
    assert table_name("a1b2c3d4") == "fencedlease_a1b2c3d4"
    with pytest.raises(ValueError, match="at most 60 workers"):
        WorkerLinks("a1b2c3d4", 61)


def test_one_way_toxics() -> None:
    assert one_way_toxic("drop-replies") == {
        "type": "timeout", "name": "nemesis-drop-replies", "stream": "downstream",
        "attributes": {"timeout": 0},
    }  # fmt: skip
    assert one_way_toxic("drop-requests")["stream"] == "upstream"


def test_all_runs_every_kind_default_the_first_ten_clock_and_the_lease_faults_per_kind() -> None:
    assert parse_faults("all") == list(ALL_FAULTS)
    assert sorted(ALL_FAULTS) == sorted(FAULTS)
    assert ALL_FAULTS[-1] == "redis-restart-nopersist"
    assert parse_faults("default") == list(DEFAULT_FAULTS)
    assert len(DEFAULT_FAULTS) == 24
    counts = {kind: DEFAULT_FAULTS.count(kind) for kind in set(DEFAULT_FAULTS)}
    assert counts == {
        **{kind: 1 for kind in ("latency", "pause-holder", "partition", "client-kill",
                                "script-flush", "timeout", "reset-peer", "redis-pause",
                                "redis-restart-aof", "clock", "slow-grant", "slow-handoff",
                                "redis-restart-nopersist")},
        "evict": 3, "slow-cut": 3, "resource-link": 5,
    }  # fmt: skip
    assert DEFAULT_FAULTS[-1] == "redis-restart-nopersist"
    assert parse_faults("clock, kill-holder") == ["clock", "kill-holder"]
    assert [fault_duration_s(k, 1000, 250) for k in ("clock", "kill-holder", "kernel-drop")] == [
        3.0, 0.5, 2.0,
    ]  # fmt: skip


def test_every_kind_has_its_colour_on_the_timeline() -> None:
    from fencedlease_lab.harness.timeline import colors

    colours = colors.FAULT_COLORS
    assert sorted(colours) == sorted(FAULTS)


def test_kernel_faults_say_what_they_lack(monkeypatch: pytest.MonkeyPatch) -> None:
    import os
    import shutil

    from fencedlease_lab.servers.netns import kernel_unavailable_reason

    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert kernel_unavailable_reason() == (
        "needs root for network namespaces and nftables rules (run the check as root)"
    )
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(shutil, "which", lambda tool: None if tool == "nft" else "/bin/x")
    assert kernel_unavailable_reason() == "needs the nft tool (apt-get install nftables)"


def test_worker_links_are_made_only_when_asked_for_and_possible(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from fencedlease_lab.servers import netns
    from fencedlease_lab.servers.netns import worker_links

    monkeypatch.setattr(netns, "kernel_unavailable_reason", lambda: None)
    assert worker_links(["clock"], 3, "a1b2c3d4", resource="sqlite", toxiproxy=True) == (
        None,
        None,
    )
    for resource in ("redis", "postgres-rows", "memory"):
        assert worker_links(["kernel-drop"], 3, "a1b2c3d4", resource=resource, toxiproxy=True) == (
            None,
            "needs an SQLite resource (a worker in its namespace reaches only its proxy)",
        )
    # Every SQLite kind is a file the namespaced worker still reaches: only Toxiproxy is missing.
    for resource in ("sqlite-rows", "sqlite-append"):
        assert worker_links(["kernel-drop"], 3, "a1b2c3d4", resource=resource, toxiproxy=False) == (
            None,
            "needs a Toxiproxy proxy per worker (on the host end of its link)",
        )
    assert worker_links(["kernel-reject"], 3, "a1b2c3d4", resource="sqlite", toxiproxy=False) == (
        None,
        "needs a Toxiproxy proxy per worker (on the host end of its link)",
    )
    monkeypatch.setattr(netns, "kernel_unavailable_reason", lambda: "needs root")
    assert worker_links(["kernel-drop"], 3, "a1b2c3d4", resource="sqlite", toxiproxy=True) == (
        None,
        "needs root",
    )


NEW_KINDS = (
    "clock", "kill-holder", "drop-replies", "drop-requests", "kernel-drop", "kernel-reject",
)  # fmt: skip


def test_the_schedule_knows_every_kind() -> None:
    """No kind but the last one and the ones meant to run alone is left alone for want of a
    rule."""
    assert set(FAULTS) == OVERLAPPING | LAST | ALONE
    assert {"slow-handoff"} == ALONE
    for kind in FAULTS:
        assert not may_overlap("slow-handoff", 0, kind, 1)
        assert not may_overlap(kind, None, "slow-handoff", 0)


def test_where_the_new_kinds_may_overlap() -> None:
    for kind in NEW_KINDS:
        target = 0 if FAULTS[kind].targets else None
        assert may_overlap("clock", None, kind, target) == (kind != "clock")
    for net in ("latency", "partition", "timeout", "reset-peer", "drop-replies", "kernel-drop"):
        # the fresh worker starts behind it (a latency fault's victim holds one lease through
        # it, so nothing that can take that lease is in force on that worker)
        assert may_overlap("kill-holder", 0, net, 0) == (net != "latency")
        assert may_overlap("kill-holder", 0, net, 1)
        # a cut composes with the proxy's faults
        assert may_overlap("kernel-reject", 1, net, 1) == (net != "latency")
    assert may_overlap("kernel-drop", 0, "kernel-reject", 1)
    assert may_overlap("kernel-drop", 0, "kernel-drop", 0)  # a table each
    assert may_overlap("drop-replies", 0, "drop-requests", 0)
    assert may_overlap("drop-replies", 0, "redis-pause", None)
    assert may_overlap("kill-holder", 0, "kill-holder", 1)
    assert not may_overlap("kill-holder", 0, "kill-holder", 0)
    assert may_overlap("kill-holder", 0, "pause-holder", 1)
    assert not may_overlap("kill-holder", 0, "pause-holder", 0)
    assert not may_overlap("kill-holder", 0, "redis-pause", None)
    assert not may_overlap("kill-holder", 0, "redis-restart-aof", None)
    for cut in ("drop-replies", "drop-requests", "kernel-drop", "kernel-reject"):
        assert not may_overlap(cut, 2, "pause-holder", 2)
        assert may_overlap(cut, 2, "pause-holder", 1)
    assert not may_overlap("redis-restart-nopersist", None, "clock", None)


def test_all_schedules_the_new_kinds_with_others() -> None:
    """Over 30 seeds, every new kind is in force with some other fault at least once, and every
    overlapping pair is one the rule allows."""
    together: set[str] = set()
    for seed in range(30):
        schedule = draw_schedule(
            ALL_FAULTS, seed=seed, workers=3, ttl_ms=1000, heartbeat_ms=250, body_ms=1800,
            lead_ms=1000,
        )  # fmt: skip
        assert sorted(schedule.kinds) == sorted(FAULTS)
        for a, b in schedule.overlaps():
            fa, fb = schedule.faults[a], schedule.faults[b]
            assert may_overlap(fa.kind, fa.target, fb.kind, fb.target), (fa, fb)
            together |= {fa.kind, fb.kind}
    assert together >= set(NEW_KINDS)
