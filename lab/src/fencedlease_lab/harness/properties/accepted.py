"""Property ``a``, ``accepted-tokens-monotonic``, key by key.

Once the resource has accepted an access of a key with token ``t`` (the access completed), no
access of that key invoked afterwards is accepted with a smaller token. Reads count: a read
served to a newer holder and then a write accepted from an older one is exactly a stale holder
getting through (Kleppmann, "How to do distributed locking", 2016). Tokens are per key, so keys
are never compared with each other.

A strict store accepts each token once: a worker that holds a lease on a strict store
re-presents, after its fenced read was accepted, the same token in strict mode (a ``recheck``);
a recheck the store accepted is a violation too (its token was accepted twice).
"""

from __future__ import annotations

from ..extract import Access, Fault
from ._base import Context, Outcome, Property, Violation

__all__ = ["PROPERTY"]

KEY = "accepted-tokens-monotonic"


def _describe(a: Access) -> str:
    return f"{a.process}'s {a.op} with token {a.token}"


def check(ctx: Context) -> Outcome:
    violations: list[Violation] = []
    checked = 0
    granted = {(g.process, g.id): g.granted for g in ctx.data.grants}
    for key, accesses in ctx.accesses_by_key.items():
        rolled: list[tuple[Access, Access, Fault]] = []
        accepted = [a for a in accesses if a.type == "ok" and a.token is not None]
        checked += len(accepted)
        by_completion = sorted(accepted, key=lambda a: a.completed or 0.0)
        best: Access | None = None
        index = 0
        for access in accepted:  # in order of invocation
            while index < len(by_completion) and (by_completion[index].completed or 0.0) < (
                access.invoked
            ):
                done = by_completion[index]
                if best is None or (done.token or 0) > (best.token or 0):
                    best = done
                index += 1
            if best is not None and access.token is not None and access.token < (best.token or 0):
                rollback = _rolled_back(ctx, granted, best, access)
                if rollback is not None:
                    rolled.append((best, access, rollback))
                    continue
                violations.append(
                    ctx.violation(
                        KEY,
                        f"{ctx.on(key)}{_describe(access)} was accepted at "
                        f"{ctx.t(access.completed)}, although {_describe(best)} had already "
                        f"been accepted at {ctx.t(best.completed)}: the resource let an older "
                        "token in after a newer one, so a stale holder acted on the data.",
                        access.completed,
                        (best.end_line or best.line, access.end_line or access.line),
                        key,
                    )
                )
        if rolled:
            violations.append(_rollback_violation(ctx, key, rolled))
    violations += _rechecks(ctx)
    violations.sort(key=lambda v: v.at if v.at is not None else 0.0)
    return Outcome(checked, violations)


def _rolled_back(
    ctx: Context, granted: dict[tuple[str, int], float], newer: Access, older: Access
) -> Fault | None:
    """The restart without persistence between the grants of ``newer`` and ``older`` (whose
    smaller token then came from the counter started again, not from a stale holder), or None."""
    if newer.grant is None or older.grant is None:
        return None
    newer_at = granted.get((newer.process, newer.grant))
    older_at = granted.get((older.process, older.grant))
    if newer_at is None or older_at is None or older_at <= newer_at:
        return None
    return ctx.rolled_back_between(newer_at, older_at)


def _rollback_violation(
    ctx: Context, key: str | None, rolled: list[tuple[Access, Access, Fault]]
) -> Violation:
    """One violation for the accesses of ``key`` accepted with tokens a rolled-back counter
    handed out again: ``(newer access, older access, restart)``, the first one named."""
    best, first, fault = rolled[0]
    lines = (best.end_line or best.line, *(a.end_line or a.line for _, a, _ in rolled[:20]))
    return ctx.violation(
        KEY,
        f"{ctx.on(key)}counter rolled back: Redis was restarted without persistence at "
        f"{ctx.t(fault.start)} and its counter handed out again tokens below those the resource "
        f"had accepted; the resource accepted {len(rolled)} access(es) with them, the first "
        f"{_describe(first)} at {ctx.t(first.completed)}, after {_describe(best)} at "
        f"{ctx.t(best.completed)}. Their leases were current (granted after the restart), not "
        "stale; a fenced resource refuses every access until the new tokens pass its fence.",
        first.completed,
        lines,
        key,
    )


def _rechecks(ctx: Context) -> list[Violation]:
    """A violation per ``recheck`` a strict store accepted."""
    out: list[Violation] = []
    for line, event in enumerate(ctx.events, start=1):
        if event.op == "recheck" and event.type == "ok" and event.outcome == "accepted":
            out.append(
                ctx.violation(
                    KEY,
                    f"{ctx.on(event.key)}{event.process}'s token {event.token} was accepted "
                    "a second time by a strict store (strict mode accepts each token once).",
                    event.mono,
                    (line,),
                    event.key,
                )
            )
    return out


PROPERTY = Property(KEY, "a", "accepted tokens never go backwards", check)
