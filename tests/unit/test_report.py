"""The report at volume: the timeline's lanes on a synthetic 10,000-operation, 32-key run with
a loss, a victim and a violation planted, and the console summary's numbered violations with
their operations, and its notes said once."""

from __future__ import annotations

import io
import time
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from fencedlease_lab.harness.checker import check_history
from fencedlease_lab.harness.history import Event
from fencedlease_lab.harness.report import print_summary, report_dict
from fencedlease_lab.harness.run import CheckConfig, CheckResult
from fencedlease_lab.harness.synthetic import synthetic_history
from fencedlease_lab.harness.timeline import Lane, draw_timeline


def _at(events: list[Event], origin: float, seconds: float, process: str, op: str, kind: Any,
        **fields: Any) -> None:  # fmt: skip
    events.append(Event(process, op, kind, origin + seconds, 1e9 + seconds, **fields))


def _last_token(events: list[Event], key: str) -> int:
    return max(e.token or 0 for e in events if e.key == key and e.op == "acquire")


def planted() -> list[Event]:
    """10,000 healthy operations on k00..k31, then, in the quiet 6 s before the stop:

    - w9 holds k05, is partitioned (1.5 s), told its lease is lost 0.9 s into the cut, its hold
      ends in LeaseLostError; it takes k05 again after the heal (a loss on k05, a victim too);
    - w10 holds k23 through a pause-holder aimed at it and releases normally (a victim only);
    - w11's write of k17 with token 1 is accepted after the last (a violation of a, b and g).
    """
    events = synthetic_history(ops=10_000, keys=32, workers=8, seed=3, quiet_s=6.0)
    origin = events[0].mono
    stop = next(e.mono for e in events if e.process == "run" and e.op == "stop") - origin
    t0 = stop - 5.8
    k05, k23 = _last_token(events, "k05"), _last_token(events, "k23")
    add: list[Event] = []
    lease = {"key": "k05", "token": k05 + 1, "grant": 0}
    _at(add, origin, t0, "w9", "acquire", "invoke", id=0, key="k05")
    _at(add, origin, t0 + 0.01, "w9", "acquire", "ok", id=0, key="k05", token=k05 + 1)
    _at(add, origin, t0 + 0.1, "nemesis", "fault", "invoke", id=100,
        detail={"fault": "partition", "target": "w9"})  # fmt: skip
    _at(add, origin, t0 + 1.0, "w9", "lease-lost", "info", outcome="lease-lost", **lease)
    _at(add, origin, t0 + 1.2, "w9", "hold", "fail", id=0, outcome="lease-lost",
        detail={"body_end": origin + t0 + 1.19}, **lease)  # fmt: skip
    _at(add, origin, t0 + 1.6, "nemesis", "fault", "ok", id=100,
        detail={"fault": "partition", "target": "w9"})  # fmt: skip
    again = {"key": "k05", "token": k05 + 2, "grant": 1}
    _at(add, origin, t0 + 1.7, "w9", "acquire", "invoke", id=1, key="k05")
    _at(add, origin, t0 + 1.8, "w9", "acquire", "ok", id=1, key="k05", token=k05 + 2)
    _at(add, origin, t0 + 2.0, "w9", "hold", "ok", id=1, detail={"body_end": origin + t0 + 1.9},
        **again)  # fmt: skip
    held = {"key": "k23", "token": k23 + 1, "grant": 0}
    _at(add, origin, t0 + 2.1, "w10", "acquire", "invoke", id=0, key="k23")
    _at(add, origin, t0 + 2.11, "w10", "acquire", "ok", id=0, key="k23", token=k23 + 1)
    _at(add, origin, t0 + 2.2, "nemesis", "fault", "invoke", id=101,
        detail={"fault": "pause-holder", "target": "w10"})  # fmt: skip
    _at(add, origin, t0 + 2.4, "nemesis", "fault", "ok", id=101,
        detail={"fault": "pause-holder", "target": "w10"})  # fmt: skip
    _at(add, origin, t0 + 2.5, "w10", "hold", "ok", id=0, detail={"body_end": origin + t0 + 2.49},
        **held)  # fmt: skip
    stale = {"key": "k17", "token": 1, "grant": 0, "value": 1}
    _at(add, origin, t0 + 3.0, "w11", "write", "invoke", id=1, **stale)
    _at(add, origin, t0 + 3.01, "w11", "write", "ok", id=1, outcome="accepted", **stale)
    return sorted(events + add, key=lambda e: e.mono)


def test_timeline_at_volume_draws_lanes_only_where_something_happened(tmp_path: Path) -> None:
    """k05 (a loss, and the partition's victim), k17 (the violations, numbered 1 to 3 as in the
    console) and k23 (the pause's victim) get lanes; the 29 other keys are in the overview; the
    pause-holder starting while the partition's name is still written goes to a second row; the
    PNG is written."""
    events = planted()
    began = time.perf_counter()
    report = check_history(events)
    checked = time.perf_counter() - began
    assert sorted((v.property, v.key) for v in report.violations) == [
        ("accepted-tokens-monotonic", "k17"), ("linearizable-register", "k17"),
        ("no-lost-update", "k17"),
    ]  # fmt: skip
    layout = draw_timeline(events, report, tmp_path / "timeline.png")
    print(
        f"\n{sum(1 for e in events if e.type != 'invoke')} completions, {len(events)} events: "
        f"checked in {checked:.2f} s, drawn in {layout.seconds:.2f} s"
    )
    assert layout.lanes == (
        Lane("k05", ("loss", "victim")),
        Lane("k17", ("violation",), (1, 2, 3)),
        Lane("k23", ("victim",)),
    )
    assert layout.overview == tuple(f"k{i:02d}" for i in range(32) if i not in (5, 17, 23))
    assert layout.fault_levels == (0, 1)
    assert (tmp_path / "timeline.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_overlapping_faults_get_rows_of_their_own(tmp_path: Path) -> None:
    """A partition inside a latency window goes to a second row; one after both, back to the
    first."""
    events = synthetic_history(
        ops=200, keys=8, workers=3,
        faults=[("latency", 1.0, 3.0, "w0"), ("partition", 2.0, 2.5, "w1"),
                ("redis-pause", 3.5, 3.6, None)],
    )  # fmt: skip
    layout = draw_timeline(events, check_history(events), tmp_path / "t.png")
    assert layout.fault_levels == (0, 1, 0)


def _result(events: list[Event], tmp_path: Path, notes: tuple[str, ...]) -> CheckResult:
    return CheckResult(
        CheckConfig(out_dir=tmp_path), check_history(events), tmp_path, tmp_path / "h",
        tmp_path / "r", tmp_path / "t", notes, 1, "ours", None,
    )  # fmt: skip


def test_the_summary_numbers_violations_with_their_operations_and_says_each_note_once(
    tmp_path: Path,
) -> None:
    """Each violation numbered with the events proving it (capped, "and N more"); a note the
    run recorded in its history and one it added afterwards are each printed once."""
    events = planted()
    origin = events[0].mono
    _at(events, origin, 0.0, "run", "note", "info", outcome="run-note",
        detail={"message": "fault timeout skipped: no toxiproxy"})  # fmt: skip
    events.sort(key=lambda e: e.mono)
    result = _result(
        events, tmp_path, ("fault timeout skipped: no toxiproxy", "timeline.png not drawn: X")
    )
    out = io.StringIO()
    print_summary(Console(file=out, width=300, color_system=None), result, max_violations=2,
                  max_ops=1)  # fmt: skip
    text = out.getvalue()
    assert text.count("fault timeout skipped: no toxiproxy") == 1
    assert "note [run-note] fault timeout skipped: no toxiproxy" in text
    assert text.count("timeline.png not drawn: X") == 1
    first, second, _ = result.report.violations
    assert f"violation 1 ({first.property}) {first.message}" in text
    assert f"    {first.ops[0].describe()}\n    ... and 1 more\n" in text
    assert first.ops[1].describe() not in text
    assert f"violation 2 ({second.property})" in text
    assert "violation 3" not in text
    assert "... and 1 more in report.json" in text
    assert first.ops[0].describe().startswith("line ")
    assert " w" in first.ops[0].describe() and "key 'k17'" in first.ops[1].describe()
    listed = report_dict(result)["properties"][0]["violations"][0]
    assert [(op["process"], op["key"], op["token"]) for op in listed["ops"]][-1] == (
        "w11", "k17", 1,
    )  # fmt: skip


def test_the_cli_says_each_note_of_a_run_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``fencedlease check`` printed the run's notes itself and then again in the summary (as
    findings of the history): each is said once now."""
    from click.testing import CliRunner

    from fencedlease.cli.commands import main
    from fencedlease_lab.harness import run

    note = "fault partition skipped: did not fit in the run's duration"
    events = synthetic_history(ops=100, keys=4, workers=2)
    origin = events[0].mono
    _at(events, origin, 0.0, "run", "note", "info", outcome="run-note", detail={"message": note})
    events.sort(key=lambda e: e.mono)
    result = _result(events, tmp_path, (note,))
    monkeypatch.setattr(run, "run_check", lambda config, show: result)
    out = CliRunner().invoke(main, ["check", "--duration", "1", "--out", str(tmp_path / "o")])
    assert out.exit_code == 0, out.output
    assert out.output.count(note) == 1
    assert "note [run-note] " + note in out.output


def test_a_synthetic_run_is_healthy_by_every_property() -> None:
    """The benchmark's history: every property checked and passed, key by key, faults and all."""
    events = synthetic_history(
        ops=3000, keys=32, workers=8, seed=5,
        faults=[("latency", 1.0, 1.5, "w1"), ("redis-pause", 3.0, 3.2, None)],
    )  # fmt: skip
    report = check_history(events)
    # A counter workload has no list-append transactions: property h has nothing to judge.
    statuses = {p.key: p.status for p in report.properties}
    assert statuses == {**dict.fromkeys(statuses, "pass"), "transactions": "not checked"}, (
        report.explain()
    )
    assert report.stats["keys"] == 32
    assert report.stats["final_counter"] == report.stats["acknowledged_writes"]
    assert [r["checked"] for r in report.recoveries] == [True, True]
    assert events == synthetic_history(
        ops=3000, keys=32, workers=8, seed=5,
        faults=[("latency", 1.0, 1.5, "w1"), ("redis-pause", 3.0, 3.2, None)],
    )  # fmt: skip


def test_a_synthetic_run_refuses_sizes_below_one() -> None:
    with pytest.raises(ValueError, match="ops, keys and workers must be >= 1, got 10, 0, 2"):
        synthetic_history(ops=10, keys=0, workers=2)


def test_past_the_lane_cap_violations_come_first_then_losses_then_victims() -> None:
    """Two lanes for three eventful keys: k17 (violations) and k05 (a loss) keep theirs, k23
    (only a victim) goes to the overview."""
    from fencedlease_lab.harness.extract import extract
    from fencedlease_lab.harness.timeline import choose_lanes

    events = planted()
    lanes, overview = choose_lanes(extract(events), check_history(events), max_lanes=2)
    assert [lane.key for lane in lanes] == ["k05", "k17"]
    assert "k23" in overview
    assert len(overview) == 30


def drawn_and_said(
    events: list[Event], tmp_path: Path
) -> tuple[tuple[tuple[float, float], ...], int, str]:
    """The bands and crosses ``timeline.png`` drew for ``events``, and the printed summary."""
    result = _result(events, tmp_path, ())
    layout = draw_timeline(events, result.report, tmp_path / "t.png")
    out = io.StringIO()
    print_summary(Console(file=out, width=300, color_system=None), result)
    return layout.bands, layout.crosses, out.getvalue()


def test_the_picture_draws_a_rollback_to_the_end_of_the_run_as_one_band(tmp_path: Path) -> None:
    """A restart without persistence followed only by refusals: one band from the restart to
    the run's stop, its refusals not drawn one by one, and the summary names it the same way."""
    from test_checker import rollback

    events = rollback(resource_refuses=True)
    (record,) = check_history(events).extras["rollbacks"]
    assert (record["start_s"], record["end_s"], record["refused"]) == (2.0, 6.0, 1)
    bands, crosses, text = drawn_and_said(events, tmp_path)
    assert (bands, crosses) == (((2.0, 6.0),), 0)
    assert (
        "counter rolled back: accesses refused as stale from 2.00 s to the end of the run "
        "(6.00 s), 1 on 1 key\n" in text
    )
    assert "no violation (but stuck: the counter rolled back)" in text


def test_the_rollback_band_ends_when_the_last_key_is_accepted_again(tmp_path: Path) -> None:
    """After a recovery the band ends at the last refused key's first accepted access (4.02 s),
    and the summary gives that end."""
    from test_checker import restart_on_two_keys

    events = restart_on_two_keys(recover_k2=True)
    bands, crosses, text = drawn_and_said(events, tmp_path)
    assert (bands, crosses) == (((2.0, 4.02),), 0)
    assert (
        "counter rolled back: accesses refused as stale from 2.00 s to 4.02 s, 3 on 2 keys\n"
        in (text)
    )
    assert "but stuck" not in text


def test_lanes_sort_numbers_as_numbers_and_name_key_and_resource() -> None:
    """Keys k1, k2, k10 of a mixed resource: lanes in that order, each named with its key and
    the kind its counter was dealt; the per-worker counts list w2 before w10."""
    from test_checker import History

    from fencedlease_lab.harness.extract import extract
    from fencedlease_lab.harness.timeline import choose_lanes, resource_kinds

    h = History()
    h.events[0].detail.update(resource="mixed", keys=["k1", "k2", "k10"])
    h.lease("w10", 1, 0.1, end=(0.5, "ok", None), key="k10")
    h.lease("w2", 1, 0.2, end=(0.6, "ok", None), key="k2")
    h.lease("w1", 1, 0.3, end=(0.7, "ok", None), key="k1")
    events = h.finish(1.0, None)
    report = check_history(events)
    lanes, _ = choose_lanes(extract(events), report, resources=resource_kinds(events))
    assert [lane.label for lane in lanes] == [
        "key k1 (sqlite)", "key k2 (memory)", "key k10 (redis)",
    ]  # fmt: skip
    assert list(report.stats["per_worker"]) == ["w1", "w2", "w10"]
