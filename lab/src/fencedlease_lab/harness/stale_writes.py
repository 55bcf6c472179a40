"""Which writes came from holders that had lost their lease. Pure: no I/O.

A write is a *stale holder's* when, before it was invoked, the key had been granted to another
lease with a larger token: its holder's lease was gone, whatever the holder believed. Writes of
grants made once a restart without persistence had begun are left out: their tokens come from
a counter started again, below the fence, so their refusals are the rollback's, not a stale
holder's (the ``counter-rollback`` finding counts those).
"""

from __future__ import annotations

from bisect import bisect_left
from collections import defaultdict
from itertools import accumulate

from .extract import Extracted, Grant
from .mutex import EMPTYING_FAULTS

__all__ = ["stale_writes"]


def stale_writes(data: Extracted) -> dict[str, int]:
    """``{"refused": n, "accepted": m}``: the stale holders' writes of ``data`` the resource
    refused as stale, and those it accepted (in a fenced run, accepted only when nobody had used
    the key since: the newer holder had not touched it yet)."""
    rollback = min(
        (f.start for f in data.faults if f.kind in EMPTYING_FAULTS and f.type == "ok"),
        default=float("inf"),
    )
    by_key: dict[str | None, list[Grant]] = defaultdict(list)
    for grant in data.grants:
        by_key[grant.key].append(grant)
    times: dict[str | None, list[float]] = {}
    highest: dict[str | None, list[int]] = {}
    for key, grants in by_key.items():
        grants.sort(key=lambda g: g.granted)
        times[key] = [g.granted for g in grants]
        highest[key] = list(accumulate((g.token for g in grants), max))
    grant_of = {(g.process, g.id): g for g in data.grants}
    counts = {"refused": 0, "accepted": 0}
    for write in data.accesses:
        if write.op != "write" or write.grant is None:
            continue
        mine = grant_of.get((write.process, write.grant))
        if mine is None or mine.granted >= rollback:
            continue
        before = bisect_left(times[mine.key], write.invoked)
        if before == 0 or highest[mine.key][before - 1] <= mine.token:
            continue
        if write.type == "fail" and write.outcome == "stale":
            counts["refused"] += 1
        elif write.type == "ok":
            counts["accepted"] += 1
    return counts
