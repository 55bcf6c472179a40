"""Whether the workload ran whole: each lane of each worker (a thread or an asyncio task looping
over lease cycles) records a ``lane`` operation around its loop
([`lane_record`][fencedlease_lab.harness.workload.lane_record]); here the history tells which
lanes were lost. Pure: no I/O.

A lane is *lost* when its operation failed (``died``: an exception left its loop) or never
completed (it *stopped recording*: its process died, or the loop hung until the run stopped
it). A lane of a worker that ``kill-holder`` killed is completed ``info`` ``killed`` by the
nemesis and replaced by the fresh process's lanes: not lost. A worker that recorded no lane at
all, while others did, is lost as a whole. Histories written before lanes were recorded have no
``lane`` operation and are not judged.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import attrs

from .history import Event

__all__ = ["LANE_OP", "LostLane", "lost_lanes"]

#: The ``op`` of a lane's operation in the history.
LANE_OP: Final = "lane"


@attrs.frozen
class LostLane:
    """A lane the run lost: worker ``process``, its ``lane`` number (None: the whole worker),
    ``at_s`` (seconds since the start: when it died, or its worker's last event), ``why`` (the
    error it died of, or ``stopped recording``), ``cycles`` it had begun (None: unknown) and the
    history ``line`` (1-based) of its last record."""

    process: str
    lane: int | None
    at_s: float
    why: str
    cycles: int | None
    line: int

    def describe(self) -> str:
        """One sentence for the report."""
        who = self.process if self.lane is None else f"{self.process}'s lane {self.lane}"
        done = "" if self.cycles is None else f" after {self.cycles} cycle(s)"
        return f"{who} {self.why} at {self.at_s:.2f} s{done}; the run went on without it"

    def to_dict(self) -> dict[str, Any]:
        return attrs.asdict(self) | {"message": self.describe()}


def lost_lanes(events: Sequence[Event], origin: float, workers: Sequence[str]) -> list[LostLane]:
    """The lanes of ``events`` (a merged history whose run started at ``origin``, monotonic
    seconds) that died or stopped recording, and the ``workers`` (process names) that recorded
    no lane though another one did; in history order. Empty for a history with no lane."""
    if not any(e.op == LANE_OP for e in events):
        return []
    started: dict[tuple[str, int], tuple[int, Event]] = {}
    lost: list[LostLane] = []
    last_line: dict[str, int] = {}
    for line, event in enumerate(events, 1):
        last_line[event.process] = line
        if event.op != LANE_OP or event.id is None:
            continue
        ident = (event.process, event.id)
        if event.type == "invoke":
            started[ident] = (line, event)
            continue
        started.pop(ident, None)
        if event.type == "fail":
            error = event.detail.get("error") or "an unknown error"
            lost.append(
                LostLane(
                    event.process, _lane(event), round(event.mono - origin, 3),
                    f"died of {error}", _cycles(event), line,
                )
            )  # fmt: skip
    for (process, _), (_, invoke) in started.items():
        line = last_line[process]
        lost.append(
            LostLane(
                process, _lane(invoke), round(events[line - 1].mono - origin, 3),
                "stopped recording", None, line,
            )
        )  # fmt: skip
    laned = {e.process for e in events if e.op == LANE_OP}
    for process in workers:
        if process not in laned:
            line = last_line.get(process, 1)
            at = events[line - 1].mono - origin if events else 0.0
            lost.append(LostLane(process, None, round(at, 3), "never ran a lane", None, line))
    return sorted(lost, key=lambda lane: lane.line)


def _lane(event: Event) -> int | None:
    lane = event.detail.get("lane")
    return lane if isinstance(lane, int) else None


def _cycles(event: Event) -> int | None:
    cycles = event.detail.get("cycles")
    return cycles if isinstance(cycles, int) else None
