"""Nothing dies silently: each lane of a worker records its life in the history, and a lane that
died or stopped recording is reported, making the run inconclusive unless what remained still
checked every property."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from fencedlease_lab.harness.checker import check_history
from fencedlease_lab.harness.history import Event, HistoryWriter, read_history
from fencedlease_lab.harness.run import inconclusive_reasons
from fencedlease_lab.harness.synthetic import synthetic_history
from fencedlease_lab.harness.workload import lane_record

ORIGIN = 1000.0  # the synthetic history's run starts here (monotonic seconds)


def test_a_lane_records_its_cycles_when_it_finishes(tmp_path: Path) -> None:
    """A lane's loop is one ``lane`` operation: invoked as it begins, ``ok`` ``finished`` with
    the cycles it began."""
    with HistoryWriter(tmp_path / "h.jsonl", "w0") as writer, lane_record(writer, 2) as tally:
        tally.cycles = 3
    events = read_history(tmp_path / "h.jsonl")
    assert [(e.op, e.type, e.outcome, e.detail) for e in events] == [
        ("lane", "invoke", None, {"lane": 2}),
        ("lane", "ok", "finished", {"lane": 2, "cycles": 3}),
    ]


def test_a_cancelled_asyncio_lane_is_recorded_as_died(tmp_path: Path) -> None:
    """A ``CancelledError`` that leaves an asyncio lane's loop is recorded as its death, and
    goes on."""

    async def lane(writer: HistoryWriter) -> None:
        with lane_record(writer, 1) as tally:
            tally.cycles = 4
            raise asyncio.CancelledError

    with HistoryWriter(tmp_path / "h.jsonl", "w3") as writer, pytest.raises(asyncio.CancelledError):
        asyncio.run(lane(writer))
    died = read_history(tmp_path / "h.jsonl")[-1]
    assert (died.op, died.type, died.outcome, died.detail) == (
        "lane", "fail", "died", {"lane": 1, "cycles": 4, "error": "CancelledError"},
    )  # fmt: skip


def with_lanes(events: list[Event], *lanes: tuple[str, int, str, float | None]) -> list[Event]:
    """``events`` with a lane per ``(worker, id, completion type, end seconds)`` (no end: never
    completed), begun at 0.01 s, in time order."""
    added = list(events)
    for process, op_id, kind, end in lanes:
        added.append(
            Event(process, "lane", "invoke", ORIGIN + 0.01, 0.0, id=op_id, detail={"lane": 0})
        )
        if end is not None:
            outcome = {"ok": "finished", "fail": "died", "info": "killed"}[kind]
            detail: dict[str, object] = {"lane": 0, "cycles": 7}
            if kind == "fail":
                detail["error"] = "CancelledError"
            added.append(
                Event(process, "lane", kind, ORIGIN + end, 0.0, id=op_id, outcome=outcome,  # type: ignore[arg-type]
                      detail=detail)
            )  # fmt: skip
    return sorted(added, key=lambda e: e.mono)


def run_of(faults: bool) -> list[Event]:
    """A healthy two-worker history, with a partition (so that recovery is judged) or none."""
    partition = [("partition", 2.0, 4.0, "w0")] if faults else []
    return synthetic_history(ops=400, keys=4, workers=2, faults=partition)


def test_whole_lanes_are_no_finding() -> None:
    """Lanes that finished, or were killed by the nemesis and replaced, lose nothing."""
    events = with_lanes(
        run_of(False), ("w0", 9000, "info", 3.0), ("w0", 9001, "ok", 9.0), ("w1", 9000, "ok", 9.0)
    )
    report = check_history(events)
    assert report.stats["lanes_lost"] == 0
    assert "workload" not in report.extras
    assert [f for f in report.findings if f.kind == "workload-lost"] == []


def test_a_dead_lane_is_reported_and_the_run_inconclusive_when_a_property_checked_nothing() -> None:
    """A lane that died is a finding with its error and time; with a property left unchecked
    (recovery, in a run without faults) the run proved nothing."""
    events = with_lanes(run_of(False), ("w0", 9000, "ok", 9.0), ("w1", 9000, "fail", 5.0))
    report = check_history(events)
    message = (
        "w1's lane 0 died of CancelledError at 5.00 s after 7 cycle(s); the run went on without it"
    )
    assert report.stats["lanes_lost"] == 1
    assert [(f.kind, f.message) for f in report.findings if f.kind == "workload-lost"] == [
        ("workload-lost", message)
    ]
    assert report.extras["workload"]["unproved"] == ["recovery"]
    assert inconclusive_reasons(report, (), []) == [
        f"the run lost part of its workload ({message}), and what remained proved nothing of"
        " recovery"
    ]


def test_a_lost_lane_leaves_the_verdict_when_what_remained_checked_every_property() -> None:
    """A lane that stopped recording (no completion) is reported at its worker's last event, but
    a run whose other lanes still checked every property is not made inconclusive by it."""
    events = with_lanes(run_of(True), ("w0", 9000, "ok", 9.0), ("w1", 9000, "info", None))
    report = check_history(events)
    last = max(e.mono for e in events if e.process == "w1") - ORIGIN
    assert [f.message for f in report.findings if f.kind == "workload-lost"] == [
        f"w1's lane 0 stopped recording at {last:.2f} s; the run went on without it"
    ]
    assert report.extras["workload"]["unproved"] == []
    assert inconclusive_reasons(report, ("partition",), []) == []


def test_a_worker_without_any_lane_is_lost_as_a_whole() -> None:
    """A worker that recorded no lane while another did never ran its workload."""
    events = with_lanes(run_of(False), ("w0", 9000, "ok", 9.0))
    report = check_history(events)
    assert next(f.message for f in report.findings if f.kind == "workload-lost").startswith(
        "w1 never ran a lane at "
    )
