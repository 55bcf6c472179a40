"""Property ``e``, ``recovery``, key by key.

After each fault heals (at ``E``), every key someone asks for is held again within ttl + margin:
for each key with an acquire outstanding at ``E`` or invoked after it, counted from ``E`` or from
that first acquire's invocation, whichever is later, a grant of the key comes within the bound,
or a holder kept the key through the fault (its release succeeded). A key granted late is a
violation only if an acquire of it was still waiting when the bound passed (a try refused at
once while the old lease expired, with nobody asking again, shows nothing). When nobody asked
for any key after the heal, the run as a whole is judged: some lease must be granted again.
Judged up to the run's stop and the next fault's start; a fault followed too soon by either is
not judged, nor one that heals while another is in force (the last of overlapping faults to heal
is).

``extras["recoveries"]``: per fault, ``after_s`` (seconds to recover, the slowest key; None:
never), the number of ``keys`` judged and the ``slowest_key``.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from ..extract import Attempt, Fault, Grant
from ._base import Context, Outcome, Property, Violation

__all__ = ["PROPERTY"]

KEY = "recovery"


def _first_demand(attempts: list[Attempt], heal: float, horizon: float) -> Attempt | None:
    """The acquire that first asked for the key at or after ``heal``: one outstanding then,
    else the first invoked after it (before ``horizon``)."""
    for attempt in attempts:  # in order of invocation
        if attempt.invoked > horizon:
            return None
        if attempt.invoked <= heal:
            if attempt.completed is None or attempt.completed >= heal:
                return attempt
            continue
        return attempt
    return None


def _waiting_at(attempts: list[Attempt], at: float, horizon: float) -> Attempt | None:
    """An acquire of the key still waiting at ``at`` (invoked by then, not answered yet): the
    key was wanted when it should have been held again. A try refused at once while the old
    lease was still expiring, with nobody asking later, proves no failure to recover."""
    if at > horizon:
        return None
    for attempt in attempts:  # in order of invocation
        if attempt.invoked > at:
            return None
        if attempt.completed is None or attempt.completed > at:
            return attempt
    return None


def _wait(
    grants: list[Grant], since: float, heal: float, horizon: float
) -> tuple[float | None, Grant | None]:
    """Seconds from ``since`` to the key being held again (0: held through the heal), and the
    grant that held it."""
    for grant in grants:
        if grant.granted <= heal and grant.end_type == "ok" and (grant.end or 0.0) >= heal:
            return 0.0, grant
    after = [g for g in grants if since <= g.granted <= horizon]
    first = min(after, key=lambda g: g.granted, default=None)
    return (None, None) if first is None else (first.granted - since, first)


def _judge_fault(
    ctx: Context, fault: Fault, heal: float, horizon: float, wants: dict[str | None, list[Attempt]]
) -> tuple[dict[str, Any], list[Violation], int]:
    bound = (ctx.params.ttl_ms + ctx.params.margin_ms) / 1000
    # key, since, waited, the lines: the fault, the acquire that asked, the grant that came
    cases: list[tuple[str | None, float, float | None, tuple[int, ...]]] = []
    asked_any = False
    for key, attempts in wants.items():
        asked = _first_demand(attempts, heal, horizon)
        if asked is None:
            continue
        asked_any = True
        since = max(heal, asked.invoked)
        waited, grant = _wait(ctx.grants_by_key.get(key, []), since, heal, horizon)
        lines = (fault.line, asked.line) + ((grant.line,) if grant is not None else ())
        if waited is None or waited > bound:
            waiting = _waiting_at(attempts, since + bound, horizon)
            if waiting is None:
                continue  # nobody was asking when the bound passed: not judged
            lines += (waiting.line,) if waiting is not asked else ()
        cases.append((key, since, waited, lines))
    if not asked_any:  # nobody asked: the run as a whole
        waited, grant = _wait(ctx.data.grants, heal, heal, horizon)
        cases.append((None, heal, waited, (fault.line,) + ((grant.line,) if grant else ())))
    judged = [c for c in cases if c[2] is not None or c[1] + bound <= horizon]
    violations: list[Violation] = []
    for key, since, waited, lines in judged:
        if waited is not None and waited <= bound:
            continue
        what = "lease" if key is None else f"lease of key {key!r}"
        when = "" if since == heal else f" (asked for at {ctx.t(since)})"
        seen = (
            "no lease was granted again"
            if waited is None and key is None
            else f"the {what} was not granted again{when}"
            if waited is None
            else f"the next {what} was granted only {waited:.2f} s later{when}"
        )
        violations.append(
            ctx.violation(
                KEY,
                f"after {fault.kind} healed at {ctx.t(heal)}, {seen}; the bound is ttl + margin "
                f"= {bound:.2f} s.",
                heal,
                lines,
                key,
            )
        )
    slowest = max(
        judged or cases, key=lambda c: float("inf") if c[2] is None else c[2], default=None
    )
    waited = None if slowest is None else slowest[2]
    record = {
        "fault": fault.kind,
        "end_s": ctx.rel(heal),
        "after_s": None if waited is None else round(waited, 3),
        "checked": bool(judged),
        "keys": len(judged),
        "slowest_key": None if slowest is None else slowest[0],
    }
    return record, violations, len(judged)


def check(ctx: Context) -> Outcome:
    stop = ctx.data.stop
    wants: dict[str | None, list[Attempt]] = defaultdict(list)
    for attempt in ctx.data.attempts:
        wants[attempt.key].append(attempt)
    violations: list[Violation] = []
    recoveries: list[dict[str, Any]] = []
    checked = 0
    faults = ctx.data.faults
    for fault in faults:
        if fault.end is None:
            continue
        end = fault.end
        if any(o is not fault and o.start <= end < (o.end or float("inf")) for o in faults):
            continue  # another fault is still in force: judged when the last of them heals
        horizon = min(
            stop if stop is not None else float("inf"),
            min((o.start for o in faults if o.start > end), default=float("inf")),
        )
        record, found, judged = _judge_fault(ctx, fault, fault.end, horizon, wants)
        recoveries.append(record)
        violations += found
        checked += judged
    return Outcome(checked, violations, extras={"recoveries": recoveries})


PROPERTY = Property(KEY, "e", "a lease is granted again after faults heal", check)
