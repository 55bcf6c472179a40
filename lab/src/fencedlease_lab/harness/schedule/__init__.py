"""The fault schedule: which faults a run injects, on whom, when and for how long. Pure: no I/O.

[`draw_schedule`][fencedlease_lab.harness.schedule.draw_schedule] turns a seed into a
[`Schedule`][fencedlease_lab.harness.schedule.Schedule]: the same seed and settings give the same
schedule, byte for byte ([`Schedule.to_json`][fencedlease_lab.harness.schedule.Schedule.to_json]),
so a run can be replayed (``fencedlease check --replay report.json``). Every kind asked for appears
once per time it is asked for, in a random order, grouped into *episodes* that run one after the
other:

- an episode's first fault, its *lead*, is *aimed*: when its time comes the nemesis waits (at
  most [`Schedule.aim_ms`][fencedlease_lab.harness.schedule.Schedule.aim_ms]) for its victim, a
  worker index drawn here, to enter its critical section (for a fault with no victim: for any worker
  to be there), so that it hits a holder;
- the others start ``offset_ms`` after the lead began, inside the lead's window, whatever their
  victims are doing then: they *overlap* the lead (a partition of one worker during a latency
  toxic on another, a pause of a worker during a Redis restart, a Redis restart during a Redis
  pause). A [`LEADS_ONLY`][fencedlease_lab.harness.schedule.LEADS_ONLY] kind (``latency``) is
  always a lead: its victim holds one lease through it that must survive. A
  [`JOINS_ONLY`][fencedlease_lab.harness.schedule.JOINS_ONLY] kind (``resource-link``) never
  leads: drawn after the episodes, each joins one it may be in force with (a different one while
  there are enough), from the lead's start for as long as the lead lasts (at most its own drawn
  length), so it moves no other fault and lengthens no episode.

Which kinds may be in force at once is
[`may_overlap`][fencedlease_lab.harness.schedule.may_overlap]'s rule; a kind it does not know
overlaps nothing (it always leads an episode of its own). ``redis-restart-nopersist`` comes last,
alone: after it the resource refuses the new, lower tokens for the rest of the run.

Durations are drawn around [`fault_duration_s`][fencedlease_lab.harness.kinds.fault_duration_s]
(from it to 11/8 of it); instants stay instants. An episode starts a gap of one ttl after the
previous one ended, so recovery from it can be seen before the next begins.

Jepsen's generators schedule faults the same way: a seeded random mix, recorded with the run.

The parts: [`rules`][fencedlease_lab.harness.schedule.rules] (which kinds may overlap),
[`plan`][fencedlease_lab.harness.schedule.plan] (a schedule and its JSON form) and
[`draw`][fencedlease_lab.harness.schedule.draw] (a seed turned into a schedule).
"""

from __future__ import annotations

from .draw import draw_schedule, worker_seed
from .plan import PlannedFault, Schedule
from .rules import (
    ALONE,
    JOINS_ONLY,
    LAST,
    LEADS_ONLY,
    OVERLAPPING,
    TOPOLOGY_FAULTS,
    may_overlap,
)

__all__ = [
    "ALONE",
    "JOINS_ONLY",
    "LAST",
    "LEADS_ONLY",
    "OVERLAPPING",
    "TOPOLOGY_FAULTS",
    "PlannedFault",
    "Schedule",
    "draw_schedule",
    "may_overlap",
    "worker_seed",
]
