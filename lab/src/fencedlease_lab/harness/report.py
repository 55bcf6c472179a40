"""The report of a run: a summary on the console (rich), ``report.json``, and ``timeline.png``
(drawn by [`timeline`][fencedlease_lab.harness.timeline]).

The summary: the properties table, the counts, each counter rollback's span of refusals (named as
on the picture), the findings and notes (each once), then each
violation numbered (the numbers of ``timeline.png``) with the history events that prove it (line,
worker, key, token, time), a few per violation, capped with "and N more".
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from fencedlease import redact_url

from .properties.grant_tokens import bands, describe_rollback
from .timeline import draw_timeline

if TYPE_CHECKING:
    from rich.console import Console

    from .model import CheckResult

__all__ = ["draw_timeline", "print_summary", "report_dict", "write_report_json"]


def report_dict(result: CheckResult) -> dict[str, Any]:
    """Everything ``report.json`` holds: the checker's report plus the verdict (``pass``,
    ``fail``, ``inconclusive``) and exit code, why the run proved nothing (``inconclusive``), the
    faults ``left_out`` of the schedule, the run's settings (URLs redacted:
    [`fencedlease.redact_url`][]), notes, seed, the ``schedule`` planned
    ([`to_dict`][fencedlease_lab.harness.schedule.Schedule.to_dict]) and files."""
    config = attrs.asdict(result.config)
    config["out_dir"] = str(config["out_dir"])
    for field in ("redis_url", "resource_url"):  # a password never reaches the report
        if config[field] is not None:
            config[field] = redact_url(config[field])
    config["faults"] = list(config["faults"])
    config.pop("schedule", None)  # given for a replay; the schedule run is below
    return {
        **result.report.to_dict(),
        "verdict": {0: "pass", 1: "fail", 2: "inconclusive"}[result.exit_code],
        "exit_code": result.exit_code,
        "inconclusive": list(result.inconclusive),
        "left_out": list(result.left_out),
        "seed": result.seed,
        "topology": result.config.topology,
        "config": config,
        "schedule": None if result.schedule is None else result.schedule.to_dict(),
        "redis": result.redis,
        "toxiproxy": result.toxiproxy,
        "notes": list(result.notes),
        "files": {
            "history": str(result.history_path),
            "report": str(result.report_path),
            "timeline": None if result.timeline_path is None else str(result.timeline_path),
        },
    }


def write_report_json(path: str | Path, result: CheckResult) -> None:
    """Write [`report_dict`][fencedlease_lab.harness.report.report_dict] to ``path`` (indented
    JSON)."""
    Path(path).write_text(json.dumps(report_dict(result), indent=2, default=str) + "\n", "utf-8")


def print_summary(
    console: Console, result: CheckResult, *, max_violations: int = 12, max_ops: int = 4
) -> None:
    """Print the run's summary: the properties table, the counts, the findings and the run's
    notes (each once), the first ``max_violations`` violations numbered, each with up to
    ``max_ops`` of the events that prove it, and where the files are."""
    from rich.markup import escape
    from rich.table import Table

    report = result.report
    table = Table(title=f"fencedlease check: mode {result.config.mode}", title_justify="left")
    table.add_column("property")
    table.add_column("checked", justify="right")
    table.add_column("violations", justify="right")
    table.add_column("verdict")
    for prop in report.properties:
        style = {"pass": "green", "fail": "bold red", "not checked": "yellow"}[prop.status]
        table.add_row(
            f"({prop.letter}) {escape(prop.title)}",
            str(prop.checked),
            str(len(prop.violations)),
            f"[{style}]{prop.status}[/]" + (f" ({escape(prop.note)})" if prop.note else ""),
        )
    console.print(table)

    stats = report.stats
    counts = Table(show_header=False, box=None, padding=(0, 2))
    counts.add_column()
    counts.add_column(justify="right")
    for label, value in (
        ("grants", stats["grants"]),
        ("keys", stats.get("keys")),
        ("acknowledged increments", stats["acknowledged_writes"]),
        ("final counter", stats["final_counter"]),
        ("accesses refused as stale", stats["refused_accesses"]),
        ("accesses with an unknown outcome", stats.get("unknown_accesses")),
        ("stale writes refused (lease lost)", stats.get("stale_writes_refused")),
        ("stale writes accepted (lease lost)", stats.get("stale_writes_accepted")),
        ("leases lost", stats["leases_lost"]),
        ("faults injected", len(stats["faults"])),
        ("seed", result.seed),
    ):
        counts.add_row(label, str(value))
    console.print(counts)
    if stats["faults"]:
        console.print("faults: " + ", ".join(stats["faults"]))
    rollbacks = bands(report.extras)
    for rollback in rollbacks:  # named as on timeline.png
        console.print(f"[bold yellow]{escape(describe_rollback(rollback))}[/]")
    said = set()
    for finding in report.findings:
        said.add(finding.message)
        console.print(f"[yellow]note[/] {escape(f'[{finding.kind}]')} {escape(finding.message)}")
        if finding.remedy:
            console.print(f"     [bold]remedy:[/] {escape(finding.remedy)}")
    for note in result.notes:  # those the history could not hold (written after it was checked)
        if note not in said:
            said.add(note)
            console.print(f"[yellow]note[/] {escape(note)}")
    violations = report.violations
    for number, violation in enumerate(violations[:max_violations], 1):
        console.print(
            f"[bold red]violation {number}[/] ({violation.property}) {escape(violation.message)}"
        )
        for op in violation.ops[:max_ops]:
            console.print(f"    {escape(op.describe())}")
        if len(violation.ops) > max_ops:
            console.print(f"    ... and {len(violation.ops) - max_ops} more")
    if len(violations) > max_violations:
        console.print(f"... and {len(violations) - max_violations} more in report.json")
    for reason in result.inconclusive:
        console.print(f"[bold red]proved nothing:[/] {reason}")
    if not report.valid:
        verdict = f"[bold red]{len(violations)} violation(s)[/]"
    elif result.inconclusive:
        verdict = "[bold red]inconclusive: the run proved nothing[/]"
    else:
        verdict = "[bold green]no violation[/]"
        if any(r.stuck for r in rollbacks):
            verdict += " [bold yellow](but stuck: the counter rolled back)[/]"
    console.print(f"{verdict}: {result.history_path}, {result.report_path}, {result.timeline_path}")
