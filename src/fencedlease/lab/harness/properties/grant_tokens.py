"""Property ``d``, ``grant-tokens``, key by key; and the counter-rollback finding.

Every grant of a key has its own token, and a grant of a key invoked after another grant of it
completed has a larger token (the per-key INCR counter). Grants separated by a restart of Redis
without persistence are exempt: the counter was rolled back; that is reported as a finding (with
its remedy), and property ``a`` shows whether the resource stayed safe.
"""

from __future__ import annotations

import itertools
from bisect import bisect_left
from collections import defaultdict
from typing import Final

from ..extract import Fault, Grant
from ._base import Context, Finding, Outcome, Property, Violation

__all__ = ["PROPERTY", "ROLLBACK_REMEDY"]

KEY = "grant-tokens"

ROLLBACK_REMEDY: Final = (
    "Run Redis with appendonly yes and appendfsync always, so the fencing counter survives a "
    "restart; or add a fencing epoch (a number bumped whenever Redis may have lost writes, "
    "compared before the token) so tokens after the restart outrank the old ones."
)

Exempt = tuple[Grant, Grant, Fault]


def _duplicates(
    ctx: Context, key: str | None, grants: list[Grant], exempt: list[Exempt]
) -> list[Violation]:
    violations: list[Violation] = []
    by_token: dict[int, list[Grant]] = defaultdict(list)
    for grant in grants:
        by_token[grant.token].append(grant)
    for token, same in by_token.items():
        for first, second in itertools.pairwise(same):
            rollback = ctx.rolled_back_between(first.granted, second.granted)
            if rollback is not None:
                exempt.append((first, second, rollback))
                continue
            violations.append(
                ctx.violation(
                    KEY,
                    f"{ctx.on(key)}token {token} was granted twice: to {first.process} at "
                    f"{ctx.t(first.granted)} and to {second.process} at {ctx.t(second.granted)}.",
                    second.granted,
                    (first.line, second.line),
                    key,
                )
            )
    return violations


def _decreasing(
    ctx: Context, key: str | None, grants: list[Grant], exempt: list[Exempt]
) -> list[Violation]:
    """Each grant against the largest token granted before it was invoked (a prefix maximum
    over the grants in order of grant: n log n)."""
    violations: list[Violation] = []
    starts = [g.granted for g in grants]
    best: list[Grant] = []  # best[i]: the largest token among grants[0..i], the first one
    for grant in grants:
        best.append(grant if not best or grant.token > best[-1].token else best[-1])
    for grant in grants:
        before = bisect_left(starts, grant.invoked)
        if before == 0:
            continue
        worst = best[before - 1]
        if worst is grant or worst.token <= grant.token:
            continue  # equal: reported as a duplicate
        rollback = ctx.rolled_back_between(worst.granted, grant.granted)
        if rollback is not None:
            exempt.append((worst, grant, rollback))
            continue
        violations.append(
            ctx.violation(
                KEY,
                f"{ctx.on(key)}{grant.process} was granted token {grant.token} at "
                f"{ctx.t(grant.granted)} by an acquire invoked at {ctx.t(grant.invoked)}, after "
                f"{worst.process} had been granted the larger token {worst.token} at "
                f"{ctx.t(worst.granted)}: tokens must increase from one grant to the next.",
                grant.granted,
                (worst.line, grant.line),
                key,
            )
        )
    return violations


def check(ctx: Context) -> Outcome:
    violations: list[Violation] = []
    exempt: list[Exempt] = []
    for key, grants in ctx.grants_by_key.items():
        violations += _duplicates(ctx, key, grants, exempt)
        violations += _decreasing(ctx, key, grants, exempt)
    violations.sort(key=lambda v: v.at if v.at is not None else 0.0)
    return Outcome(len(ctx.data.grants), violations, findings=_rollback_findings(ctx, exempt))


def _rollback_findings(ctx: Context, exempt: list[Exempt]) -> list[Finding]:
    """One finding per restart without persistence; tokens are compared key by key."""
    findings: list[Finding] = []
    accesses = ctx.data.accesses
    for fault in ctx.rollbacks:
        if fault.end is None:
            continue
        high: dict[str | None, int] = {}  # per key: the largest token accepted before
        for a in accesses:
            if a.type == "ok" and (a.completed or 0) < fault.start:
                high[a.key] = max(high.get(a.key, 0), a.token or 0)
        after = [a for a in accesses if a.invoked > fault.start]
        refused_after = [
            a for a in after
            if a.type == "fail" and a.outcome == "stale" and (a.token or 0) <= high.get(a.key, 0)
        ]  # fmt: skip
        accepted_after = [a for a in after if a.type == "ok" and a.key in high]
        low_grants = [
            g for g in ctx.data.grants if g.granted > fault.start and g.token <= high.get(g.key, 0)
        ]
        counter_before = fault.detail.get("counter_before")
        pairs = sum(1 for _, _, f in exempt if f is fault)
        was = "" if counter_before is None else f" (at {counter_before} before)"
        message = (
            f"Redis was restarted without persistence at {ctx.t(fault.start)}: the fencing "
            f"counter{was} started again from 0, so "
            f"{len(low_grants)} later grant(s) got tokens at or below ones already issued"
            f" ({pairs} pair(s) of grants out of order, exempted from property d). "
        )
        top = max(high.values(), default=0)
        if top:
            lower_in = [a for a in accepted_after if (a.token or 0) < high.get(a.key, 0)]
            # Accepting again means a token of a grant made after the restart: a lease granted
            # before it may still write, with the old counter's token, just after it began.
            since = {(g.process, g.id) for g in ctx.data.grants if g.granted > fault.start}
            first_ok = min(
                (a for a in accepted_after if (a.process, a.grant) in since),
                key=lambda a: a.completed or 0.0,
                default=None,
            )
            unstuck = (
                f"it accepted again at {ctx.t(first_ok.completed)} (token {first_ok.token}), "
                f"{(first_ok.completed or 0.0) - fault.start:.2f} s after the restart"
                if first_ok is not None
                else "it accepted nothing more before the run ended"
            )
            had = f"token {top}" if len(high) == 1 else f"tokens up to {top} on {len(high)} keys"
            message += (
                f"The resource had accepted {had}, so it refused every access with the "
                f"new, lower tokens ({len(refused_after)} refusal(s)): "
                + (
                    f"safe, but stuck until new tokens passed {top if len(high) == 1 else 'them'};"
                    f" {unstuck}."
                    if not lower_in
                    else "and yet some lower tokens got through (see property a)."
                )
            )
        findings.append(Finding("counter-rollback", message, ROLLBACK_REMEDY))
    return findings


PROPERTY = Property(KEY, "d", "unique, increasing tokens per grant", check)
