"""Which keys get a lane of their own
([`choose_lanes`][fencedlease_lab.harness.timeline.choose_lanes]) and which go to the overview,
and the layout drawn
([`TimelineLayout`][fencedlease_lab.harness.timeline.TimelineLayout])."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Container, Sequence
from typing import Final

import attrs

from ..checker import CheckReport, Extracted
from ..extract import natural_key
from ..history import Event
from ..resource_spec import MIXED_KINDS

#: Histories with this many keys or fewer get a lane for every key.
ALL_LANES_UP_TO: Final = 4
#: At most this many lanes; keys beyond them (the least eventful) go to the overview.
MAX_LANES: Final = 24


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
    """What [`draw_timeline`][fencedlease_lab.harness.report.draw_timeline] drew: the ``lanes``, the
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
