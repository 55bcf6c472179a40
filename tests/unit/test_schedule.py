"""The fault schedule: drawn from the seed alone, the same bytes every time, overlapping faults
only where they compose, every kind asked for in it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fencedlease_lab.harness.nemesis import DEFAULT_FAULTS, FAULTS, fault_duration_s
from fencedlease_lab.harness.schedule import (
    ALONE,
    JOINS_ONLY,
    LAST,
    LEADS_ONLY,
    PlannedFault,
    Schedule,
    draw_schedule,
    may_overlap,
    worker_seed,
)

TTL, BEAT, BODY = 1000, 250, 1800


def draw(
    seed: int, kinds: tuple[str, ...] | list[str] = DEFAULT_FAULTS, workers: int = 3
) -> Schedule:
    return draw_schedule(
        kinds, seed=seed, workers=workers, ttl_ms=TTL, heartbeat_ms=BEAT, body_ms=BODY, lead_ms=TTL
    )


DRAW_IN_A_NEW_PROCESS = """
import sys
from fencedlease_lab.harness.nemesis import DEFAULT_FAULTS
from fencedlease_lab.harness.schedule import draw_schedule
s = draw_schedule(DEFAULT_FAULTS, seed=int(sys.argv[1]), workers=3, ttl_ms=1000,
                  heartbeat_ms=250, body_ms=1800, lead_ms=1000)
sys.stdout.write(s.to_json())
"""


def test_the_same_seed_gives_the_same_schedule_byte_for_byte() -> None:
    """Drawn twice here and once in another interpreter (another hash seed): the same bytes."""
    here = draw(7).to_json()
    assert draw(7).to_json() == here
    env = {**os.environ, "PYTHONHASHSEED": "12345", "PYTHONPATH": os.pathsep.join(sys.path)}
    there = subprocess.run(
        [sys.executable, "-c", DRAW_IN_A_NEW_PROCESS, "7"],
        capture_output=True, text=True, check=True, env=env,
    ).stdout  # fmt: skip
    assert there == here


def test_other_seeds_give_other_schedules() -> None:
    """Ten seeds, ten different schedules (kinds' order, victims, offsets or durations)."""
    assert len({draw(seed).to_json() for seed in range(10)}) == 10


def test_every_kind_is_in_a_default_schedule_once_and_the_rollback_is_last() -> None:
    for seed in range(50):
        schedule = draw(seed)
        assert sorted(schedule.kinds) == sorted(DEFAULT_FAULTS)
        last = schedule.episodes()[-1]
        assert [f.kind for f in last] == ["redis-restart-nopersist"]
        assert [f.index for f in schedule.faults] == list(range(len(DEFAULT_FAULTS)))


def test_faults_overlap_and_only_where_they_compose() -> None:
    """Most default schedules hold overlapping faults; each overlapping pair may overlap; the
    cases the schedule exists for occur: a Redis restart during a Redis pause, a latency toxic
    during a partition (of another worker: on its own victim a latency fault is alone, see
    test_a_latency_fault_is_alone_on_its_victim_and_on_redis), a worker paused during a
    restart."""
    seen: set[tuple[str, str, bool]] = set()
    with_overlaps = 0
    for seed in range(50):
        schedule = draw(seed)
        pairs = schedule.overlaps()
        with_overlaps += bool(pairs)
        for a, b in pairs:
            fa, fb = schedule.faults[a], schedule.faults[b]
            assert may_overlap(fa.kind, fa.target, fb.kind, fb.target), (fa, fb)
            seen.add((fa.kind, fb.kind, fa.target == fb.target))
            seen.add((fb.kind, fa.kind, fa.target == fb.target))
    assert with_overlaps >= 45
    assert ("redis-pause", "redis-restart-aof", True) in seen
    assert ("partition", "latency", False) in seen
    assert ("partition", "latency", True) not in seen
    assert ("pause-holder", "redis-restart-aof", False) in seen


def test_episode_shape_offsets_durations_and_victims() -> None:
    """A lead (aimed, offset 0) per episode; the others start inside the lead's window; every
    duration lies between the nominal one and 11/8 of it (a joiner's is its lead's at most); a
    targeted kind has a victim index
    below the worker count, the others none; episodes follow each other a gap apart."""
    for seed in range(30):
        schedule = draw(seed, workers=4)
        assert schedule.gap_ms == TTL
        assert schedule.aim_ms == 2 * (BODY + TTL)
        previous_end = None
        for lead, *others in schedule.episodes():
            assert lead.aim and lead.offset_ms == 0
            if previous_end is not None:
                assert lead.start_ms == previous_end + schedule.gap_ms
            for fault in others:
                assert not fault.aim
                assert 0 <= fault.offset_ms < lead.duration_ms
                assert fault.start_ms == lead.start_ms + fault.offset_ms
            for fault in (lead, *others):
                nominal = round(fault_duration_s(fault.kind, TTL, BEAT) * 1000)
                if fault.kind in JOINS_ONLY:  # as long as its lead, at most its own length
                    assert (fault.offset_ms, fault.aim) == (0, False)
                    assert fault.duration_ms <= min(lead.duration_ms, nominal * 11 // 8)
                    continue
                assert nominal <= fault.duration_ms <= nominal * 11 // 8
                if FAULTS[fault.kind].targets:
                    assert fault.target is not None and 0 <= fault.target < 4
                else:
                    assert fault.target is None
            previous_end = max(f.end_ms for f in (lead, *others))
        assert schedule.faults[0].start_ms == TTL


def test_resource_link_faults_join_episodes_and_move_no_other_fault() -> None:
    """The five ``resource-link`` faults of the default list each join a different episode and
    every other fault is planned exactly as without them (same kinds, victims, starts)."""
    for seed in range(30):
        joined = draw(seed)
        plain = draw(seed, tuple(kind for kind in DEFAULT_FAULTS if kind not in JOINS_ONLY))
        links = [f for f in joined.faults if f.kind == "resource-link"]
        assert len(links) == 5 and len({f.episode for f in links}) == 5
        assert [(f.kind, f.target, f.start_ms, f.duration_ms) for f in joined.faults
                if f.kind != "resource-link"] == [
            (f.kind, f.target, f.start_ms, f.duration_ms) for f in plain.faults
        ]  # fmt: skip


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    kinds=st.lists(st.sampled_from(sorted(FAULTS)), max_size=14),
    workers=st.integers(2, 6),
)
def test_any_list_of_kinds_is_scheduled_exactly(seed: int, kinds: list[str], workers: int) -> None:
    """Whatever kinds are asked for (repeats too): each as often as asked, overlapping only
    where they compose, the kinds that must come last after all others."""
    schedule = draw(seed, kinds, workers)
    assert sorted(schedule.kinds) == sorted(kinds)
    for a, b in schedule.overlaps():
        fa, fb = schedule.faults[a], schedule.faults[b]
        assert may_overlap(fa.kind, fa.target, fb.kind, fb.target)
    firsts = [i for i, f in enumerate(schedule.faults) if f.kind in LAST]
    others = [i for i, f in enumerate(schedule.faults) if f.kind not in LAST]
    assert not firsts or not others or min(firsts) > max(others)
    assert Schedule.from_dict(json.loads(schedule.to_json())) == schedule


def test_no_kind_is_no_fault() -> None:
    assert draw(3, []).faults == ()


def test_bad_input_is_refused() -> None:
    with pytest.raises(ValueError, match=r"unknown fault\(s\) \['nap'\]"):
        draw(1, ["latency", "nap"])
    with pytest.raises(ValueError, match="workers must be at least 1, got 0"):
        draw(1, ["latency"], workers=0)


def test_a_schedule_read_back_is_checked() -> None:
    data = draw(2).to_dict()
    assert Schedule.from_dict(json.loads(json.dumps(data))) == draw(2)
    bad_kind = {**data, "faults": [{**data["faults"][0], "kind": "nap"}]}
    with pytest.raises(ValueError, match="unknown fault kind 'nap' in the schedule"):
        Schedule.from_dict(bad_kind)
    targeted = next(f for f in data["faults"] if f["target"] is not None)
    with pytest.raises(ValueError, match=f"fault {targeted['index']} targets worker 3 of 3"):
        Schedule.from_dict({**data, "faults": [{**targeted, "target": 3}]})
    with pytest.raises(ValueError, match="not a fault schedule"):
        Schedule.from_dict({"seed": 1})


def test_a_latency_fault_is_alone_on_its_victim_and_on_redis() -> None:
    """Its victim holds one lease through it, which a healthy library keeps: nothing that may
    take a lease away is in force with it there."""
    for kind, info in FAULTS.items():
        if not info.disrupts:
            continue
        if info.targets:
            assert not may_overlap("latency", 0, kind, 0), kind
            assert may_overlap("latency", 0, kind, 1) == (kind not in ALONE), kind
        else:
            assert not may_overlap("latency", 0, kind, None), kind
    # Nor anything that makes a renewal pay the delay twice: a reconnect on its victim, a
    # flushed script cache.
    assert not may_overlap("latency", 0, "client-kill", 0)
    assert may_overlap("latency", 0, "client-kill", 1)
    assert not may_overlap("latency", 0, "script-flush", None)
    assert may_overlap("latency", 0, "clock", None)


def test_a_latency_fault_always_leads_its_episode() -> None:
    """Aimed at a holder, a gap of one ttl after the previous episode: its lease is its own."""
    leads = 0
    for seed in range(50):
        schedule = draw(seed)
        for fault in schedule.faults:
            if fault.kind in LEADS_ONLY:
                assert fault.aim and fault.offset_ms == 0, (seed, fault)
                leads += 1
    assert {"latency"} == LEADS_ONLY
    assert leads == 50  # once per default schedule


def test_the_overlap_rule() -> None:
    assert may_overlap("partition", 0, "timeout", 0)  # two faults on one proxy compose
    assert may_overlap("redis-restart-aof", None, "redis-pause", None)
    assert may_overlap("pause-holder", 1, "redis-restart-aof", None)
    assert may_overlap("pause-holder", 1, "partition", 2)
    assert not may_overlap("pause-holder", 1, "partition", 1)
    assert not may_overlap("timeout", 0, "pause-holder", 0)
    assert not may_overlap("redis-pause", None, "client-kill", 0)
    assert not may_overlap("script-flush", None, "redis-restart-aof", None)
    assert not may_overlap("pause-holder", 0, "redis-pause", None)
    assert not may_overlap("redis-restart-nopersist", None, "latency", 0)
    assert not may_overlap("a-kind-not-known", None, "latency", 0)


def test_worker_seeds_come_from_the_seed_and_the_index() -> None:
    seeds = [worker_seed(9, index) for index in range(8)]
    assert seeds == [worker_seed(9, index) for index in range(8)]
    assert len(set(seeds)) == 8
    assert worker_seed(10, 0) != worker_seed(9, 0)
    assert all(0 <= seed < 2**31 for seed in seeds)


def test_planned_fault_end() -> None:
    fault = PlannedFault(0, "latency", 1, 0, 0, 2500, 1000, True)
    assert fault.end_ms == 3500


def test_the_schedule_is_in_report_json_and_replays(tmp_path: Path) -> None:
    """What report.json records reads back as the schedule and config a replay runs."""
    from fencedlease_lab.harness.campaign import read_replay

    schedule = draw(11)
    report: dict[str, Any] = {
        "seed": 11,
        "schedule": schedule.to_dict(),
        "config": {"workers": 3, "duration_s": 12.0, "faults": list(DEFAULT_FAULTS),
                   "mode": "write-fenced", "ttl_ms": 1000, "redis_url": None},
    }  # fmt: skip
    path = tmp_path / "report.json"
    path.write_text(json.dumps(report), "utf-8")
    config = read_replay(path, {"out_dir": tmp_path / "again"})
    assert config.seed == 11
    assert config.schedule == schedule
    assert (config.mode, config.duration_s, config.workers) == ("write-fenced", 12.0, 3)
    assert config.faults == DEFAULT_FAULTS
    assert config.out_dir == tmp_path / "again"
    assert read_replay(path, {"out_dir": tmp_path, "duration_s": 5.0}).duration_s == 5.0
    hidden = {**report, "config": {**report["config"], "redis_url": "redis://:***@h:6379/0"}}
    path.write_text(json.dumps(hidden), "utf-8")
    with pytest.raises(ValueError, match="records --redis-url with its password hidden"):
        read_replay(path, {"out_dir": tmp_path})
    assert read_replay(path, {"redis_url": "redis://h:6379/0"}).redis_url == "redis://h:6379/0"
    path.write_text("{}", "utf-8")
    with pytest.raises(ValueError, match=r"is not a report\.json of fencedlease check"):
        read_replay(path, {})


KINDS8 = ("sync", "threads", "asyncio", "sync", "asyncio", "threads", "sync", "asyncio")


@pytest.mark.parametrize("seed", range(1, 13))
def test_the_lease_faults_hit_every_worker_kind(seed: int) -> None:
    """With the workers' kinds, each default ``evict`` and ``slow-cut`` (three of each) hits
    another worker kind, so every kind is evicted and slowly cut in every run."""
    schedule = draw_schedule(
        DEFAULT_FAULTS, seed=seed, workers=8, ttl_ms=TTL, heartbeat_ms=BEAT, body_ms=20,
        lead_ms=TTL, worker_kinds=KINDS8,
    )  # fmt: skip
    assert sorted(schedule.kinds) == sorted(DEFAULT_FAULTS)
    for kind in ("evict", "slow-cut"):
        hit = sorted(KINDS8[f.target] for f in schedule.faults if f.kind == kind)  # type: ignore[index]
        assert hit == ["asyncio", "sync", "threads"], kind
    for kind in ("pause-holder", "slow-grant"):
        (fault,) = (f for f in schedule.faults if f.kind == kind)
        assert fault.target is not None


def test_a_kind_aware_fault_listed_more_often_than_the_kinds_cycles_over_them() -> None:
    kinds = ("sync", "asyncio", "asyncio")
    schedule = draw_schedule(
        ["evict"] * 4, seed=5, workers=3, ttl_ms=TTL, heartbeat_ms=BEAT, body_ms=20,
        lead_ms=TTL, worker_kinds=kinds,
    )  # fmt: skip
    hit = [kinds[f.target] for f in schedule.faults]  # type: ignore[index]
    assert sorted(hit) == ["asyncio", "asyncio", "sync", "sync"]


def test_worker_kinds_must_name_every_worker() -> None:
    with pytest.raises(ValueError, match="worker_kinds names 2 workers, not 3"):
        draw_schedule(
            ["evict"], seed=1, workers=3, ttl_ms=TTL, heartbeat_ms=BEAT, body_ms=20,
            lead_ms=TTL, worker_kinds=("sync", "asyncio"),
        )  # fmt: skip


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_the_drawn_worker_kinds_hold_every_kind(seed: int, tmp_path: Path) -> None:
    """Without ``--workers-kind`` the kinds are dealt in turn (then shuffled by the seed): 8
    workers are 3 sync, 3 threads and 2 asyncio, the same for the same seed."""
    from fencedlease_lab.harness.run import CheckConfig
    from fencedlease_lab.harness.run.prepare import _Run

    def kinds_of(config: CheckConfig) -> list[str]:
        return list(_Run(config, seed, tmp_path, tmp_path, []).worker_kinds)

    drawn = kinds_of(CheckConfig(workers=8))
    assert sorted(drawn) == ["asyncio"] * 2 + ["sync"] * 3 + ["threads"] * 3
    assert kinds_of(CheckConfig(workers=8)) == drawn
    assert sorted(kinds_of(CheckConfig(workers=3))) == ["asyncio", "sync", "threads"]
    assert kinds_of(CheckConfig(workers=3, workers_kind="asyncio")) == ["asyncio"] * 3
