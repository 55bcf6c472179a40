"""``timeline.png``: a run drawn so that it reads at 10,000 operations over 32 keys.

The picture (matplotlib, Agg backend, no display needed), time in seconds since the run started
on the x axis, in three bands:

- **faults**: one bar per fault, named (kind and target), overlapping faults on rows of their own
  so that each stays visible; a dashed line for an instant fault. Redis-wide faults are also
  shaded across the lanes and the overview (a dashed line for an instant one), a fault aimed at
  a worker only where that worker held a key of a lane while it lasted;
- **lanes**: one row per key where something happened
  ([`choose_lanes`][fencedlease_lab.harness.timeline.choose_lanes]): a violation, a lost lease, or a
  fault's victim (a lease held by the worker a fault hit). On a lane: a bar per lease from the grant
  to the end of the hold, green (ended normally), red (``LeaseLostError``), orange
  (``StaleTokenError``) or grey (another error), labelled with worker and token where it is wide
  enough; a black tick where the holder was told its lease was lost; a red cross for an access the
  resource refused, a grey ``?`` for one of unknown outcome; each violation a red star numbered as
  in the console's list (the ones without a time at the right edge);
- **overview**: every other key, one thin row each, shaded by how much of each time slice its
  lease was held (a heat map), with the Redis-wide faults shaded across it.

A history with at most [`ALL_LANES_UP_TO`][fencedlease_lab.harness.timeline.ALL_LANES_UP_TO] keys
gets a lane for every key.

The parts: [`layout`][fencedlease_lab.harness.timeline.layout] (which keys get a lane),
[`colors`][fencedlease_lab.harness.timeline.colors] and
[`draw`][fencedlease_lab.harness.timeline.draw] (the picture).
"""

from __future__ import annotations

from .draw import draw_timeline
from .layout import ALL_LANES_UP_TO, Lane, TimelineLayout, choose_lanes, resource_kinds

__all__ = [
    "ALL_LANES_UP_TO",
    "Lane",
    "TimelineLayout",
    "choose_lanes",
    "draw_timeline",
    "resource_kinds",
]
