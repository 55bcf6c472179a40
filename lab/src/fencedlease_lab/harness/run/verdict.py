"""After the run: the history parts merged and checked, ``timeline.png`` drawn and
``report.json`` written, and why a run proved nothing."""

from __future__ import annotations

import shutil
from pathlib import Path

import attrs

from ..checker import CheckParams, CheckReport, check_history
from ..history import Event, merge_histories
from ..model import CheckResult
from .prepare import _Run


def _collect_and_check(run: _Run) -> tuple[list[Event], CheckReport]:
    """Merge the processes' history parts into ``history.jsonl`` (secrets scrubbed) and check it."""
    history_path = run.out_dir / "history.jsonl"
    parts = sorted(run.parts_dir.glob("history-*.jsonl"))
    redact = run.scrub if run.secret_urls else None
    events = merge_histories(parts, history_path, redact=redact)
    shutil.rmtree(run.parts_dir, ignore_errors=True)
    return events, check_history(events, CheckParams.from_history(events))


def _write_report(
    run: _Run,
    events: list[Event],
    report: CheckReport,
    redis_kind: str,
    toxiproxy_kind: str | None,
) -> CheckResult:
    """Draw ``timeline.png`` (a note if it cannot be drawn) and write ``report.json``."""
    from ..report import draw_timeline, write_report_json

    out_dir = run.out_dir
    report_path = out_dir / "report.json"
    timeline_path: Path | None = out_dir / "timeline.png"
    result = CheckResult(
        run.config, report, out_dir, out_dir / "history.jsonl", report_path, timeline_path,
        tuple(run.notes), run.seed, redis_kind, toxiproxy_kind, tuple(run.left_out),
        tuple(inconclusive_reasons(report, run.config.faults, run.left_out)), run.schedule,
    )  # fmt: skip
    try:
        draw_timeline(events, report, out_dir / "timeline.png")
    except Exception as exc:  # the picture is a convenience; the verdict stands without it
        run.notes.append(run.scrub(f"timeline.png not drawn: {type(exc).__name__}: {exc}"))
        result = attrs.evolve(result, timeline_path=None, notes=tuple(run.notes))
    write_report_json(report_path, result)
    return result


def inconclusive_reasons(
    report: CheckReport, faults: tuple[str, ...] | list[str], left_out: list[str]
) -> list[str]:
    """Why a run proved nothing, from its ``report`` and the ``faults`` asked for (of which
    ``left_out`` were not scheduled); empty when it proved something. A run proves nothing when
    no lease was granted, when the resource accepted no access (no fencing was exercised), or
    when faults were asked for and none was injected (no fault completed), or when it lost
    part of its workload (a lane died or stopped recording) and what remained left a property
    with nothing checked."""
    reasons: list[str] = []
    stats = report.stats
    if stats["grants"] == 0:
        reasons.append(
            "no lease was granted: the workers could not use Redis (unreachable, a wrong"
            " password, a user without the needed commands?); see history.jsonl"
        )
    elif stats["accepted_accesses"] == 0:
        reasons.append("the resource accepted no access: nothing was written under a lease")
    workload = report.extras.get("workload", {})
    if workload.get("unproved"):
        lost = "; ".join(lane["message"] for lane in workload["lost"])
        reasons.append(
            f"the run lost part of its workload ({lost}), and what remained proved nothing of"
            f" {', '.join(workload['unproved'])}"
        )
    if faults and stats["faults_injected"] == 0:
        why = f" ({', '.join(left_out)} left out)" if left_out else ""
        reasons.append(f"no fault was injected though faults were asked for{why}")
    return reasons
