"""A drawn schedule ([`Schedule`][fencedlease_lab.harness.schedule.Schedule]): its faults
([`PlannedFault`][fencedlease_lab.harness.schedule.PlannedFault]), grouped into episodes, and
its JSON form for a replay. Pure: no I/O."""

from __future__ import annotations

import json
from typing import Any

import attrs

from ..kinds import FAULTS


@attrs.frozen
class PlannedFault:
    """One fault of a [`Schedule`][fencedlease_lab.harness.schedule.Schedule].

    ``index``: its place in the schedule (it also names its toxics). ``kind``: a key of
    [`FAULTS`][fencedlease_lab.harness.kinds.FAULTS]. ``target``: the victim's worker index, or
    None for a fault with no victim. ``episode``: the episode it belongs to. ``offset_ms``:
    milliseconds after its episode's lead began (0 for the lead). ``duration_ms``: how long it
    is in force (0: an instant). ``start_ms``: its planned start, milliseconds after the run
    began, had no lead waited for its victim. ``aim``: it is its episode's lead.
    """

    index: int
    kind: str
    target: int | None
    episode: int
    offset_ms: int
    duration_ms: int
    start_ms: int
    aim: bool

    @property
    def end_ms(self) -> int:
        """The planned end, milliseconds after the run began."""
        return self.start_ms + self.duration_ms


@attrs.frozen
class Schedule:
    """A run's faults and what they were drawn for.

    ``seed``: the run's seed. ``workers``, ``ttl_ms``, ``heartbeat_ms``, ``body_ms``: the run's
    settings. ``lead_ms``: when the first episode begins, after the run's start. ``gap_ms``:
    between the end of an episode and the start of the next. ``aim_ms``: the longest a lead
    waits for its victim. ``faults``: ordered by episode, then offset.
    """

    seed: int
    workers: int
    ttl_ms: int
    heartbeat_ms: int
    body_ms: int
    lead_ms: int
    gap_ms: int
    aim_ms: int
    faults: tuple[PlannedFault, ...]

    @property
    def kinds(self) -> list[str]:
        """The kinds scheduled, in schedule order."""
        return [fault.kind for fault in self.faults]

    def episodes(self) -> list[list[PlannedFault]]:
        """The faults grouped by episode, in order; a list's first fault is the lead."""
        grouped: dict[int, list[PlannedFault]] = {}
        for fault in self.faults:
            grouped.setdefault(fault.episode, []).append(fault)
        return [grouped[episode] for episode in sorted(grouped)]

    def overlaps(self) -> list[tuple[int, int]]:
        """The pairs of fault indexes whose planned windows overlap (an instant overlaps a
        window it falls in)."""

        def inside(a: PlannedFault, b: PlannedFault) -> bool:  # b starts while a is in force
            return a.start_ms <= b.start_ms < max(a.end_ms, a.start_ms + 1)

        return [
            (a.index, b.index)
            for a in self.faults
            for b in self.faults
            if a.index < b.index and (inside(a, b) or inside(b, a))
        ]

    def to_dict(self) -> dict[str, Any]:
        """The schedule as plain JSON-able data (what ``report.json`` holds)."""
        return attrs.asdict(self)

    def to_json(self) -> str:
        """The schedule as canonical JSON (sorted keys, no spaces): the same schedule gives the
        same bytes."""
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Schedule:
        """Read [`to_dict`][fencedlease_lab.harness.schedule.Schedule.to_dict]'s shape back. Raises
        ``ValueError`` for a missing field, an unknown kind or a victim out of range."""
        try:
            faults = tuple(PlannedFault(**fault) for fault in data["faults"])
            schedule = cls(**{**data, "faults": faults})
        except (KeyError, TypeError) as exc:
            raise ValueError(f"not a fault schedule: {exc}") from None
        for fault in faults:
            if fault.kind not in FAULTS:
                raise ValueError(f"unknown fault kind {fault.kind!r} in the schedule")
            if fault.target is not None and not 0 <= fault.target < schedule.workers:
                raise ValueError(f"fault {fault.index} targets worker {fault.target} of "
                                 f"{schedule.workers}")  # fmt: skip
        return schedule
