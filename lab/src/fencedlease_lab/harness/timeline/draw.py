"""The drawing: the faults band, the lanes, the overview's heat map, the Redis-wide faults and
the rollbacks shaded across them, and
[`draw_timeline`][fencedlease_lab.harness.timeline.draw_timeline] putting them together."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from ..checker import CheckReport, Extracted, Fault, Grant, extract
from ..history import Event
from ..properties.grant_tokens import ROLLBACK_BAND, Rollback, bands, describe_rollback
from .colors import FAULT_COLORS, OUTCOME_COLORS, ROLLBACK_COLOR
from .layout import Lane, TimelineLayout, choose_lanes, resource_kinds

if TYPE_CHECKING:
    from matplotlib.axes import Axes

#: Violations numbered on the picture (the rest are marked without a number).
MAX_NUMBERED: Final = 60


def _label(fault: Fault) -> str:
    return f" {fault.kind}" + (f" {fault.target}" if fault.target else "")


def _rows(spans: Sequence[tuple[float, float]]) -> list[int]:
    """A row for each ``(start, stop)`` span (in order of start), greedily, so that spans that
    overlap are on different rows."""
    busy: list[float] = []  # where the last span on each row stops
    rows: list[int] = []
    for start, stop in spans:
        row = next((i for i, until in enumerate(busy) if until <= start), len(busy))
        busy[row : row + 1] = [stop]
        rows.append(row)
    return rows


def _levels(faults: Sequence[Fault], origin: float, end: float) -> list[int]:
    """A row per fault such that faults overlapping in time, or in their names written from
    their start, are on different rows (a character is about ``end / 230`` seconds wide; a fault
    that never ended lasts to ``end``, seconds after ``origin``)."""
    return _rows([
        (f.start, max(f.end if f.end is not None else origin + end,
                      f.start + len(_label(f)) * end / 230))
        for f in faults
    ])  # fmt: skip


def _grant_color(grant: Grant) -> str:
    if grant.end_type == "ok":
        return OUTCOME_COLORS["ok"]
    if grant.end_outcome in ("lease-lost", "stale"):
        return OUTCOME_COLORS[grant.end_outcome]
    return OUTCOME_COLORS["unknown"]


def _draw_faults(ax: Axes, data: Extracted, levels: list[int], end: float) -> None:
    origin = data.origin
    for fault, level in zip(data.faults, levels, strict=True):
        start = fault.start - origin
        stop = (fault.end if fault.end is not None else origin + end) - origin
        color = FAULT_COLORS.get(fault.kind, "#bdbdbd")
        if stop - start < end / 400:
            ax.plot([start, start], [level - 0.4, level + 0.4], color=color, ls="--", lw=1.2)
        else:
            ax.barh(level, stop - start, left=start, height=0.7, color=color, alpha=0.85)
        ax.text(start, level, _label(fault), fontsize=7, va="center", ha="left",
                clip_on=True)  # fmt: skip


def _stack(
    data: Extracted, row: dict[str | None, int], end: float
) -> dict[tuple[str, int], tuple[int, int]]:
    """For each grant of a lane, its level and the lane's number of levels: leases of one key
    that overlap in time (a stale holder beside the new one) go on different levels."""
    by_key: dict[str | None, list[Grant]] = defaultdict(list)
    for grant in data.grants:  # in order of grant
        if grant.key in row:
            by_key[grant.key].append(grant)
    out: dict[tuple[str, int], tuple[int, int]] = {}
    for grants in by_key.values():
        stops = [g.end if g.end is not None else data.origin + end for g in grants]
        levels = _rows([(g.granted, stop) for g, stop in zip(grants, stops, strict=True)])
        for grant, level in zip(grants, levels, strict=True):
            out[(grant.process, grant.id)] = (level, max(levels) + 1)
    return out


def _in_band(at: float, key: str | None, rollbacks: Sequence[Rollback]) -> bool:
    """Whether a refusal at ``at`` (seconds since the start) on ``key`` is one a rollback's band
    counts: drawn as the band, not one by one."""
    return any(r.start_s <= at <= r.end_s and key in r.keys for r in rollbacks)


def _draw_lanes(
    ax: Axes,
    data: Extracted,
    lanes: list[Lane],
    report: CheckReport,
    end: float,
    rollbacks: Sequence[Rollback] = (),
) -> int:
    """Draw the lanes; return how many refused accesses were drawn one by one (a cross each)."""
    origin = data.origin
    row = {lane.key: index for index, lane in enumerate(lanes)}
    bars: dict[tuple[float, float, str], list[tuple[float, float]]] = defaultdict(list)
    label_min = end / 120
    stacked = _stack(data, row, end)
    for grant in data.grants:
        if grant.key not in row:
            continue
        level, levels = stacked[(grant.process, grant.id)]
        height = 0.6 / levels
        y = row[grant.key] - 0.3 + level * height  # overlapping leases of a key side by side
        start = grant.granted - origin
        width = max((grant.end if grant.end is not None else origin + end) - grant.granted, 0.0)
        bars[(y, height, _grant_color(grant))].append((start, max(width, end / 2000)))
        if width >= label_min:
            ax.text(start, y + height / 2, f" {grant.process}:{grant.token}", fontsize=6.5,
                    va="center", ha="left", color="white", fontweight="bold",
                    clip_on=True)  # fmt: skip
        if grant.lost is not None:
            ax.plot([grant.lost - origin] * 2, [y - 0.06, y + height + 0.06], color="black",
                    lw=1.6)  # fmt: skip
    for (y, height, color), spans in bars.items():
        ax.broken_barh(spans, (y, height), color=color, alpha=0.9, edgecolor="white", lw=0.3)
    refused: list[tuple[float, int]] = []
    unknown: list[tuple[float, int]] = []
    for access in data.accesses:
        if access.key not in row:
            continue
        at = (access.completed if access.completed is not None else access.invoked) - origin
        if access.type == "fail" and access.outcome == "stale":
            if not _in_band(at, access.key, rollbacks):
                refused.append((at, row[access.key]))
        elif access.type in ("info", None):
            unknown.append((at, row[access.key]))
    if refused:
        xs, ys = zip(*refused, strict=True)
        ax.plot(xs, [y + 0.32 for y in ys], "x", color="#b71c1c", ms=7, mew=2)
    if unknown:
        xs, ys = zip(*unknown, strict=True)
        ax.plot(xs, [y + 0.32 for y in ys], marker="$?$", lw=0, color="#616161", ms=7)
    for fault in data.faults:
        if fault.target is None:
            continue
        fault_end = fault.end if fault.end is not None else origin + end
        for grant in data.grants:
            stop = grant.end if grant.end is not None else origin + end
            if grant.process != fault.target or grant.key not in row:
                continue
            left, right = max(grant.granted, fault.start), min(stop, fault_end)
            if right > left:
                color = FAULT_COLORS.get(fault.kind, "#bdbdbd")
                y = row[grant.key]
                ax.broken_barh([(left - origin, right - left)], (y - 0.48, 0.96),
                               color=color, alpha=0.3, lw=0)  # fmt: skip
    marks: dict[tuple[float, int], list[int]] = defaultdict(list)  # (row, x slot) -> numbers
    for number, violation in enumerate(report.violations, 1):
        at_y: float = row.get(violation.key, -0.75)
        x = violation.at if violation.at is not None else end * 0.995
        marks[(at_y, round(x / (end / 150)))].append(number)
        ax.plot(x, at_y, marker="*", color="#d50000", ms=13, mec="black", mew=0.6, zorder=5)
    for (at_y, slot), numbers in marks.items():  # stars that touch share one label
        shown = [str(n) for n in numbers if n <= MAX_NUMBERED]
        if shown:
            ax.text(min(slot * end / 150, end * 0.995), at_y - 0.42, ",".join(shown),
                    fontsize=7.5, ha="center", va="bottom", color="#d50000", fontweight="bold",
                    zorder=6)  # fmt: skip
    return len(refused)


def _heat(data: Extracted, keys: list[str | None], end: float, bins: int) -> Any:
    import numpy as np

    heat = np.zeros((max(1, len(keys)), bins))
    index = {key: i for i, key in enumerate(keys)}
    width = end / bins
    for grant in data.grants:
        if grant.key not in index:
            continue
        start = grant.granted - data.origin
        stop = (grant.end if grant.end is not None else data.origin + end) - data.origin
        first, last = int(start / width), min(int(stop / width), bins - 1)
        for b in range(first, last + 1):
            heat[index[grant.key], b] += max(
                0.0, min(stop, (b + 1) * width) - max(start, b * width)
            )
    return heat / width


def _shade_wide_faults(axes: Sequence[Axes], data: Extracted, end: float) -> None:
    for fault in data.faults:
        if fault.target is not None:
            continue
        start = fault.start - data.origin
        stop = (fault.end if fault.end is not None else data.origin + end) - data.origin
        color = FAULT_COLORS.get(fault.kind, "#bdbdbd")
        for ax in axes:
            if stop - start < end / 400:  # an instant fault: a dashed line, as in the strip
                ax.axvline(start, color=color, ls="--", lw=1.0, alpha=0.8)
            else:
                ax.axvspan(start, stop, color=color, alpha=0.14, lw=0)


def _draw_bands(axes: Sequence[Axes], rollbacks: Sequence[Rollback]) -> None:
    """Each rollback as one shaded span across the lanes and the overview, named on the lanes
    (its refusals are not drawn one by one: the band counts them)."""
    for rollback in rollbacks:
        for ax in axes:
            ax.axvspan(rollback.start_s, rollback.end_s, color=ROLLBACK_COLOR, alpha=0.22,
                       lw=0, zorder=0)  # fmt: skip
        keys = f"{len(rollback.keys)} key" + ("" if len(rollback.keys) == 1 else "s")
        axes[0].text(
            rollback.start_s, 0.995, f" {ROLLBACK_BAND} ({rollback.refused} on {keys})",
            transform=axes[0].get_xaxis_transform(), fontsize=8.5, va="top", ha="left",
            color="#b71c1c", fontweight="bold", clip_on=True, zorder=6,
            bbox={"facecolor": "white", "alpha": 0.8, "lw": 0, "pad": 1.5},
        )  # fmt: skip


def draw_timeline(events: Sequence[Event], report: CheckReport, path: str | Path) -> TimelineLayout:
    """Draw the run as a PNG at ``path`` (see the module docstring for the legend) and return
    the [`TimelineLayout`][fencedlease_lab.harness.timeline.TimelineLayout] drawn."""
    import time

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    began = time.perf_counter()
    data = extract(events)
    end = max(max((e.mono for e in events), default=data.origin) - data.origin, 1.0)
    lanes, overview = choose_lanes(data, report, resources=resource_kinds(events))
    rollbacks = bands(report.extras)
    levels = _levels(data.faults, data.origin, end)
    n_levels = max(levels, default=0) + 1
    heights = [0.35 + 0.28 * n_levels, 0.8 + 0.42 * max(1, len(lanes))]
    if overview:
        heights.append(0.5 + min(0.09 * len(overview), 3.5))
    fig, axes = plt.subplots(
        len(heights), 1, sharex=True, figsize=(16, sum(heights) + 1.6),
        gridspec_kw={"height_ratios": heights},
    )  # fmt: skip
    strip, lane_ax = axes[0], axes[1]
    _draw_faults(strip, data, levels, end)
    strip.set_ylim(n_levels - 0.5, -0.5)
    strip.set_yticks([])
    strip.set_ylabel("faults", rotation=0, ha="right", va="center")
    crosses = _draw_lanes(lane_ax, data, lanes, report, end, rollbacks)
    keyed = {lane.key for lane in lanes}
    loose = any(v.key not in keyed for v in report.violations)  # drawn on a row above the lanes
    lane_ax.set_ylim(max(1, len(lanes)) - 0.4, -1.3 if loose or report.violations else -0.6)
    lane_ax.set_yticks(
        [*([-0.75] if loose else []), *range(len(lanes))],
        [*(["other violations"] if loose else []), *(lane.label for lane in lanes)],
        fontsize=8,
    )
    lane_ax.grid(axis="x", alpha=0.3)
    shaded = [lane_ax]
    if overview:
        over_ax = axes[2]
        bins = 400
        over_ax.imshow(
            _heat(data, overview, end, bins), aspect="auto", cmap="Greens", vmin=0, vmax=1,
            extent=(0, end, len(overview), 0), interpolation="nearest",
        )  # fmt: skip
        over_ax.set_ylabel(f"{len(overview)} other keys\n(share of time held)", fontsize=8)
        over_ax.set_yticks([])
        shaded.append(over_ax)
    _shade_wide_faults(shaded, data, end)
    _draw_bands(shaded, rollbacks)
    axes[-1].set_xlim(0, end)
    axes[-1].set_xlabel("seconds since the run started")
    count = len(report.violations)
    verdict = "no violation" if report.valid else f"{count} violation(s)"
    if count > MAX_NUMBERED:
        verdict += f", the first {MAX_NUMBERED} numbered"
    mode = next(
        (e.detail.get("mode") for e in events if e.process == "run" and e.op == "start"), None
    )
    strip.set_title(
        f"fencedlease check — mode {mode} — {report.stats['grants']} grants on "
        f"{len(lanes) + len(overview)} key(s), {report.stats['acknowledged_writes']} acknowledged "
        f"increments — {verdict}" + "".join(f"\n{describe_rollback(r)}" for r in rollbacks),
        fontsize=11,
    )
    legend = [
        Patch(color=OUTCOME_COLORS["ok"], label="lease, ended normally (worker:token)"),
        Patch(color=OUTCOME_COLORS["lease-lost"], label="lease, ended in LeaseLostError"),
        Patch(color=OUTCOME_COLORS["stale"], label="lease, ended in StaleTokenError"),
        Patch(color=OUTCOME_COLORS["unknown"], label="lease, ended in an error"),
        Line2D([], [], color="black", lw=2, label="told: lease lost"),
        Line2D([], [], marker="x", color="#b71c1c", lw=0, mew=2, label="access refused (stale)"),
        Line2D([], [], marker="$?$", color="#616161", lw=0, ms=8, label="access, outcome unknown"),
        Line2D([], [], marker="*", color="#d50000", lw=0, ms=12, label="violation n (console #n)"),
        Patch(color="#bdbdbd", alpha=0.4, label="fault (shaded where it hit)"),
        *([Patch(color=ROLLBACK_COLOR, alpha=0.35, label=ROLLBACK_BAND)] if rollbacks else []),
    ]
    fig.legend(handles=legend, loc="lower center", ncol=5, fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.75 / (sum(heights) + 1.6), 1, 1))  # 0.75 in for the legend
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return TimelineLayout(
        tuple(lanes), tuple(overview), tuple(levels), time.perf_counter() - began,
        tuple((r.start_s, r.end_s) for r in rollbacks), crosses,
    )  # fmt: skip
