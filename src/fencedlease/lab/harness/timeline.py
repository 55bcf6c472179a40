"""``timeline.png``: a run drawn so that it reads at 10,000 operations over 32 keys.

The picture (matplotlib, Agg backend, no display needed), time in seconds since the run started
on the x axis, in three bands:

- **faults**: one bar per fault, named (kind and target), overlapping faults on rows of their own
  so that each stays visible; a dashed line for an instant fault. Redis-wide faults are also
  shaded across the lanes and the overview (a dashed line for an instant one), a fault aimed at
  a worker only where that worker held a key of a lane while it lasted;
- **lanes**: one row per key where something happened
  ([`choose_lanes`][fencedlease.lab.harness.timeline.choose_lanes]): a violation, a lost lease, or a
  fault's victim (a lease held by the worker a fault hit). On a lane: a bar per lease from the grant
  to the end of the hold, green (ended normally), red (``LeaseLostError``), orange
  (``StaleTokenError``) or grey (another error), labelled with worker and token where it is wide
  enough; a black tick where the holder was told its lease was lost; a red cross for an access the
  resource refused, a grey ``?`` for one of unknown outcome; each violation a red star numbered as
  in the console's list (the ones without a time at the right edge);
- **overview**: every other key, one thin row each, shaded by how much of each time slice its
  lease was held (a heat map), with the Redis-wide faults shaded across it.

A history with at most [`ALL_LANES_UP_TO`][fencedlease.lab.harness.timeline.ALL_LANES_UP_TO] keys
gets a lane for every key.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Container, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import attrs

from .checker import CheckReport, Extracted, Fault, Grant, extract
from .extract import natural_key
from .history import Event
from .properties.grant_tokens import ROLLBACK_BAND, Rollback, bands, describe_rollback
from .resource_spec import MIXED_KINDS

if TYPE_CHECKING:
    from matplotlib.axes import Axes

__all__ = [
    "ALL_LANES_UP_TO",
    "Lane",
    "TimelineLayout",
    "choose_lanes",
    "draw_timeline",
    "resource_kinds",
]

#: Histories with this many keys or fewer get a lane for every key.
ALL_LANES_UP_TO: Final = 4
#: At most this many lanes; keys beyond them (the least eventful) go to the overview.
MAX_LANES: Final = 24
#: Violations numbered on the picture (the rest are marked without a number).
MAX_NUMBERED: Final = 60

OUTCOME_COLORS: Final = {
    "ok": "#43a047",
    "lease-lost": "#e53935",
    "stale": "#fb8c00",
    "unknown": "#9e9e9e",
}
FAULT_COLORS: Final = {
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
    "evict": "#ab47bc",
    "slow-cut": "#0288d1",
    "replica-lag": "#fbc02d",
    "sentinel-failover": "#00897b",
    "sentinel-kill-primary": "#4e342e",
    "lag-failover": "#c62828",
    "deposed-primary": "#6a1b9a",
    "cluster-failover": "#00695c",
    "cluster-kill-master": "#3e2723",
    "slow-grant": "#00838f",
    "slow-handoff": "#5e35b1",
}


@attrs.frozen
class Lane:
    """A key drawn on a lane of its own, and why: ``reasons`` among ``violation``, ``loss``,
    ``victim`` (empty when every key gets a lane); ``violations``: the numbers (1-based, as in the
    console) of its violations."""

    key: str | None
    reasons: tuple[str, ...]
    violations: tuple[int, ...] = ()
    resource: str | None = None

    @property
    def label(self) -> str:
        """What the lane is and why it is drawn: ``key k05 (sqlite)  v1 loss``."""
        name = "(no key)" if self.key is None else f"key {self.key}"
        kind = "" if self.resource is None else f" ({self.resource})"
        why = [f"v{n}" for n in self.violations[:3]] + [r for r in self.reasons if r != "violation"]
        if len(self.violations) > 3:
            why.insert(3, "...")
        return f"{name}{kind}  {' '.join(why)}".rstrip()


@attrs.frozen
class TimelineLayout:
    """What [`draw_timeline`][fencedlease.lab.harness.report.draw_timeline] drew: the ``lanes``, the
    ``overview`` keys, the fault rows (``fault_levels``: the row of each fault, in order of start),
    how long drawing took (``seconds``), the counter rollbacks' bands (``bands``: start and end,
    seconds since the run started) and how many refused accesses were drawn one by one
    (``crosses``: those inside a band are not)."""

    lanes: tuple[Lane, ...]
    overview: tuple[str | None, ...]
    fault_levels: tuple[int, ...]
    seconds: float = 0.0
    bands: tuple[tuple[float, float], ...] = ()
    crosses: int = 0


def _victims(data: Extracted) -> set[str | None]:
    """The keys held by a worker while a fault aimed at it lasted."""
    keys: set[str | None] = set()
    for fault in data.faults:
        if fault.target is None:
            continue
        end = fault.end if fault.end is not None else float("inf")
        for grant in data.grants:
            stop = grant.end if grant.end is not None else float("inf")
            if grant.process == fault.target and grant.granted < end and stop > fault.start:
                keys.add(grant.key)
    return keys


def resource_kinds(events: Sequence[Event]) -> dict[str, str]:
    """The resource kind of each of the run's keys, from its ``run`` ``start`` event: the run's
    ``resource``, or for ``mixed`` the kind each key is dealt (``MIXED_KINDS[index % 7]``)."""
    start = next((e for e in events if e.process == "run" and e.op == "start"), None)
    kind = None if start is None else start.detail.get("resource")
    keys = None if start is None else start.detail.get("keys")
    if not isinstance(kind, str) or not isinstance(keys, list):
        return {}  # a history of another shape (a synthetic one counts its keys) names none
    keys = [str(k) for k in keys]
    if kind == "mixed":
        return {key: MIXED_KINDS[i % len(MIXED_KINDS)] for i, key in enumerate(keys)}
    return dict.fromkeys(keys, kind)


def choose_lanes(
    data: Extracted,
    report: CheckReport,
    *,
    max_lanes: int = MAX_LANES,
    resources: dict[str, str] | None = None,
) -> tuple[list[Lane], list[str | None]]:
    """The keys drawn on lanes (in key order, numbers as numbers: ``k2`` before ``k10``) and
    the rest, drawn in the overview; each lane names the resource kind of its key
    (``resources``: key to kind, see `resource_kinds`).

    A key gets a lane when one of the report's violations names it, a lease of it was lost
    (a loss notice, or a hold ending in ``LeaseLostError``/``StaleTokenError``), or a fault aimed
    at a worker hit it (`_victims`). Beyond ``max_lanes`` the keys with violations come
    first, then those with losses, then victims, each by the number of events of that kind.
    """
    keys = {g.key for g in data.grants} | {a.key for a in data.accesses}
    numbers: dict[str | None, list[int]] = defaultdict(list)
    for number, violation in enumerate(report.violations, 1):
        if violation.key in keys:
            numbers[violation.key].append(number)
    losses: dict[str | None, int] = defaultdict(int)
    for grant in data.grants:
        if grant.lost is not None or grant.end_outcome in ("lease-lost", "stale"):
            losses[grant.key] += 1
    victims = _victims(data)
    if len(keys) <= ALL_LANES_UP_TO:
        chosen = set(keys)
    else:
        ranked = sorted(
            (k for k in keys if k in numbers or k in losses or k in victims),
            key=lambda k: (-len(numbers.get(k, ())), -losses.get(k, 0), k not in victims,
                           natural_key(k)),
        )  # fmt: skip
        chosen = set(ranked[:max_lanes])
    hits: dict[str, Container[str | None]] = {
        "violation": numbers, "loss": losses, "victim": victims,
    }  # fmt: skip
    kinds = resources or {}
    lanes = [
        Lane(
            key, tuple(r for r, found in hits.items() if key in found), tuple(numbers.get(key, ())),
            None if key is None else kinds.get(key),
        )
        for key in sorted(chosen, key=natural_key)
    ]  # fmt: skip
    return lanes, sorted(keys - chosen, key=natural_key)


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


#: The colour of a counter rollback's band.
ROLLBACK_COLOR: Final = "#e57373"


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
    the [`TimelineLayout`][fencedlease.lab.harness.timeline.TimelineLayout] drawn."""
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
