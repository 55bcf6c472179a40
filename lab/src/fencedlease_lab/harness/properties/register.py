"""Property ``g``, ``linearizable-register``: the data, key by key
([`linearizable`][fencedlease_lab.harness.linearizable] does the work).

Every key of the resource behaves as a fenced register, one linearization explaining every
read's value and every access's acceptance or refusal, unknown outcomes taken as maybe-applied
(Wing & Gong 1993; Lowe 2017; Horn & Kroening 2015 for checking key by key).
"""

from __future__ import annotations

from ..linearizable import check_register, ops_from_history
from ._base import Context, Outcome, Property

__all__ = ["PROPERTY"]

KEY = "linearizable-register"


def check(ctx: Context) -> Outcome:
    ops, lacking = ops_from_history(ctx.events)
    if lacking is not None:
        return Outcome(0, note=f"not judged: {lacking}")
    initial = 0
    for event in ctx.events:
        if event.process == "run" and event.op == "start":
            raw = event.detail.get("initial")
            if isinstance(raw, int) and not isinstance(raw, bool):
                initial = raw
            break
    result = check_register(ops, initial=initial)
    violations = [
        ctx.violation(
            KEY,
            failure.explain(ctx.data.origin),
            failure.culprit.completed,
            failure.lines,
            failure.key,
        )
        for failure in result.failures
    ]
    note = f"{result.ops} operation(s) over {result.keys} key(s), the counter starting at {initial}"
    return Outcome(result.ops, violations, note)


PROPERTY = Property(KEY, "g", "the resource is a linearizable fenced register", check)
