"""The report of a run: a summary table (rich), ``report.json``, and ``timeline.png``.

The picture (matplotlib, Agg backend, no display needed): one row per worker, time in seconds
since the run started on the x axis.

- a bar per lease, from the grant to the end of the critical section, labelled with its fencing
  token; green when it ended normally, red when it ended in ``LeaseLostError``, orange in
  ``StaleTokenError``, grey when unknown (a backend error);
- a black tick where the library told the worker its lease was lost;
- a small dot for each accepted write, a red cross for each access the resource refused;
- fault windows shaded: on the row of the worker hit, or across all rows for Redis-wide faults,
  named in the strip at the top; a dashed line for an instant fault;
- a red star in the top strip at each violation.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import attrs

from fencedlease import redact_url

from .checker import CheckReport, extract
from .history import Event

if TYPE_CHECKING:
    from rich.console import Console

    from .model import CheckResult

__all__ = ["draw_timeline", "print_summary", "report_dict", "write_report_json"]

_OUTCOME_COLORS: Final = {
    "ok": "#43a047",
    "lease-lost": "#e53935",
    "stale": "#fb8c00",
    "unknown": "#9e9e9e",
}
_FAULT_COLORS: Final = {
    "latency": "#ffd54f",
    "pause-holder": "#7e57c2",
    "partition": "#29b6f6",
    "client-kill": "#8d6e63",
    "script-flush": "#8d6e63",
    "timeout": "#26a69a",
    "reset-peer": "#ec407a",
    "redis-pause": "#5c6bc0",
    "redis-restart-aof": "#546e7a",
    "redis-restart-nopersist": "#d32f2f",
    "clock": "#9ccc65",
    "kill-holder": "#212121",
    "drop-replies": "#80deea",
    "drop-requests": "#4dd0e1",
    "kernel-drop": "#ffab91",
    "kernel-reject": "#ff7043",
}


def report_dict(result: CheckResult) -> dict[str, Any]:
    """Everything ``report.json`` holds: the checker's report plus the verdict (``pass``,
    ``fail``, ``inconclusive``) and exit code, why the run proved nothing (``inconclusive``), the
    faults ``left_out`` of the schedule, the run's settings (URLs redacted:
    :func:`fencedlease.redact_url`), notes, seed and files."""
    config = attrs.asdict(result.config)
    config["out_dir"] = str(config["out_dir"])
    for field in ("redis_url", "resource_url"):  # a password never reaches the report
        if config[field] is not None:
            config[field] = redact_url(config[field])
    config["faults"] = list(config["faults"])
    return {
        **result.report.to_dict(),
        "verdict": {0: "pass", 1: "fail", 2: "inconclusive"}[result.exit_code],
        "exit_code": result.exit_code,
        "inconclusive": list(result.inconclusive),
        "left_out": list(result.left_out),
        "seed": result.seed,
        "config": config,
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
    """Write :func:`report_dict` to ``path`` (indented JSON)."""
    Path(path).write_text(json.dumps(report_dict(result), indent=2, default=str) + "\n", "utf-8")


def print_summary(console: Console, result: CheckResult, *, max_violations: int = 12) -> None:
    """Print the run's summary: the properties table, the counts, the findings, the first
    ``max_violations`` violations explained, and where the files are."""
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
            f"({prop.letter}) {prop.title}",
            str(prop.checked),
            str(len(prop.violations)),
            f"[{style}]{prop.status}[/]" + (f" ({prop.note})" if prop.note else ""),
        )
    console.print(table)

    stats = report.stats
    counts = Table(show_header=False, box=None, padding=(0, 2))
    counts.add_column()
    counts.add_column(justify="right")
    for label, value in (
        ("grants", stats["grants"]),
        ("acknowledged increments", stats["acknowledged_writes"]),
        ("final counter", stats["final_counter"]),
        ("accesses refused as stale", stats["refused_accesses"]),
        ("leases lost", stats["leases_lost"]),
        ("faults injected", len(stats["faults"])),
        ("seed", result.seed),
    ):
        counts.add_row(label, str(value))
    console.print(counts)
    if stats["faults"]:
        console.print("faults: " + ", ".join(stats["faults"]))
    for finding in report.findings:
        console.print(f"[yellow]note[/] [{finding.kind}] {finding.message}")
        if finding.remedy:
            console.print(f"     [bold]remedy:[/] {finding.remedy}")
    violations = report.violations
    for violation in violations[:max_violations]:
        where = f"lines {', '.join(map(str, violation.lines))}" if violation.lines else ""
        console.print(f"[bold red]violation[/] ({violation.property}) {violation.message} {where}")
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
    console.print(f"{verdict}: {result.history_path}, {result.report_path}, {result.timeline_path}")


def draw_timeline(events: Sequence[Event], report: CheckReport, path: str | Path) -> None:
    """Draw the run as a PNG at ``path`` (see the module docstring for the legend)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch, Rectangle

    data = extract(events)
    origin = data.origin
    workers = sorted(
        {g.process for g in data.grants} | {a.process for a in data.accesses},
        key=lambda name: (len(name), name),
    )
    for event in events:
        if event.process.startswith("w") and event.process not in workers:
            workers.append(event.process)
    row = {name: index for index, name in enumerate(workers)}
    end = max((e.mono for e in events), default=origin) - origin
    end = max(end, 1.0)
    height = 2.2 + 0.75 * max(1, len(workers))
    fig, ax = plt.subplots(figsize=(16, height))
    strip = -1.1  # the fault strip above the workers

    # faults
    label_slots: list[float] = []
    for fault in data.faults:
        start = fault.start - origin
        stop = (fault.end if fault.end is not None else origin + end) - origin
        color = _FAULT_COLORS.get(fault.kind, "#bdbdbd")
        if stop - start < 0.05:
            ax.axvline(start, color=color, linestyle="--", linewidth=1.2, alpha=0.9)
        elif fault.target in row:
            y = row[fault.target]
            ax.add_patch(
                Rectangle((start, y - 0.45), stop - start, 0.9, color=color, alpha=0.28, lw=0)
            )
        else:
            ax.axvspan(start, stop, color=color, alpha=0.16, lw=0)
        ax.add_patch(
            Rectangle((start, strip - 0.3), max(stop - start, 0.08), 0.6, color=color, alpha=0.8)
        )
        level = sum(1 for slot in label_slots if abs(slot - start) < 2.2) % 2
        label_slots.append(start)
        target = f" {fault.target}" if fault.target else ""
        ax.text(
            start, strip - 0.38 - 0.42 * level, f"{fault.kind}{target}", fontsize=7.5,
            va="bottom", ha="left", color="#212121",
        )  # fmt: skip

    # leases
    for grant in data.grants:
        y = row[grant.process]
        start = grant.granted - origin
        stop = (grant.end if grant.end is not None else origin + end) - origin
        if grant.end_type == "ok":
            color = _OUTCOME_COLORS["ok"]
        elif grant.end_outcome in ("lease-lost", "stale"):
            color = _OUTCOME_COLORS[grant.end_outcome]
        else:
            color = _OUTCOME_COLORS["unknown"]
        ax.add_patch(
            Rectangle((start, y - 0.22), max(stop - start, 0.02), 0.44, color=color, alpha=0.9)
        )
        ax.text(
            start + 0.04, y, str(grant.token), fontsize=7.5, va="center", ha="left",
            color="white", fontweight="bold", clip_on=True,
        )  # fmt: skip
        if grant.lost is not None:
            ax.plot([grant.lost - origin] * 2, [y - 0.34, y + 0.34], color="black", lw=2)

    # accesses
    for access in data.accesses:
        if access.completed is None or access.process not in row:
            continue
        x, y = access.completed - origin, row[access.process]
        if access.type == "fail" and access.outcome == "stale":
            ax.plot(x, y + 0.3, marker="x", color="#b71c1c", markersize=9, mew=2.2)
        elif access.type == "ok" and access.op == "write":
            ax.plot(x, y + 0.3, marker="o", color="#1b5e20", markersize=3.5)
        elif access.type == "info":
            ax.plot(x, y + 0.3, marker="$?$", color="#616161", markersize=8)

    # violations
    for violation in report.violations:
        if violation.at is not None:
            ax.plot(violation.at, strip, marker="*", color="#d50000", markersize=15, mec="black")

    ax.set_xlim(0, end)
    ax.set_ylim(len(workers) - 0.4, strip - 1.3)
    ax.set_yticks([strip, *range(len(workers))], ["faults", *workers])
    ax.set_xlabel("seconds since the run started")
    ax.grid(axis="x", alpha=0.3)
    verdict = "no violation" if report.valid else f"{len(report.violations)} violation(s)"
    mode = next(
        (e.detail.get("mode") for e in events if e.process == "run" and e.op == "start"), None
    )
    ax.set_title(
        f"fencedlease check — mode {mode} — {report.stats['grants']} grants, "
        f"{report.stats['acknowledged_writes']} acknowledged increments, "
        f"final counter {report.stats['final_counter']} — {verdict}",
        fontsize=11,
    )
    legend = [
        Patch(color=_OUTCOME_COLORS["ok"], label="lease, ended normally (token inside)"),
        Patch(color=_OUTCOME_COLORS["lease-lost"], label="lease, ended in LeaseLostError"),
        Patch(color=_OUTCOME_COLORS["stale"], label="lease, ended in StaleTokenError"),
        Patch(color=_OUTCOME_COLORS["unknown"], label="lease, ended in an error"),
        Line2D([], [], color="black", lw=2, label="told: lease lost"),
        Line2D([], [], marker="o", color="#1b5e20", lw=0, label="write accepted"),
        Line2D([], [], marker="x", color="#b71c1c", lw=0, mew=2, label="access refused (stale)"),
        Line2D([], [], marker="*", color="#d50000", lw=0, markersize=12, label="violation"),
    ]
    ax.legend(
        handles=legend, loc="upper center", bbox_to_anchor=(0.5, -0.18 - 0.3 / height),
        ncol=4, fontsize=8, frameon=False,
    )  # fmt: skip
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
