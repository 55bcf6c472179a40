"""Property ``f``, ``mutual-exclusion``: the lock itself, key by key
([`mutex`][fencedlease_lab.harness.mutex] does the work).

Fencing hides a broken lease from the data checks: the claims of different grants of one key
(grant to last confirmed deadline, cut short by the release or a loss notice) never overlap; a
renewal answered 0 is followed by a loss notice; no lease is lost without a fault to explain it;
and each key, as its holders saw it, is a linearizable fenced mutex (``[lock-model]``:
[`lock_model`][fencedlease_lab.harness.mutex.lock_model]). Each part the history has no events
for is named "not judged" in the property's note.
"""

from __future__ import annotations

from ..mutex import check_lock_model, check_mutex
from ._base import Context, Finding, Outcome, Property
from .grant_tokens import ROLLBACK_REMEDY

__all__ = ["PROPERTY"]

KEY = "mutual-exclusion"

#: What to do when a lease key may be deleted under its holder.
EVICT_REMEDY = (
    "Run Redis with maxmemory-policy noeviction (fencedlease doctor checks it), so that no lease "
    "key is deleted before its TTL; a deleted key is told to its holder only at its next renewal, "
    "so guard every write with the fencing token."
)


def check(ctx: Context) -> Outcome:
    params = ctx.params
    result = check_mutex(
        ctx.events, ttl_ms=params.ttl_ms, heartbeat_ms=params.heartbeat_ms, origin=ctx.data.origin
    )
    violations = [
        ctx.violation(KEY, f"[{i.kind}] {i.message}", i.at, i.lines, None) for i in result.issues
    ]
    lock = check_lock_model(ctx.events, ttl_ms=params.ttl_ms)
    for failure in lock.failures:
        culprit = failure.culprit
        message = f"[lock-model] {failure.explain(ctx.data.origin)}"
        violations.append(ctx.violation(KEY, message, culprit.completed, (culprit.line,), None))
    notes = [f"not judged: {part}" for part in (*result.not_judged, *lock.not_judged)]
    if result.lower_bound_claims:
        notes.append(
            f"{result.lower_bound_claims} claim(s) judged on a lower bound of their deadline "
            "(acquire invoked + ttl): the history lacks acquire/renew detail.deadline"
        )
    if result.unknown_end:
        notes.append(
            f"{result.unknown_end} grant(s) not judged for overlap: their hold ended with no "
            "release invoke or body_end recorded"
        )
    if result.expired_on_arrival:
        notes.append(
            f"{len(result.expired_on_arrival)} grant(s) came with less than two heartbeats left"
            " of their confirmed deadline (the acquire, or the hand-off wait it ended, took"
            " longer than the ttl less two heartbeats) and were lost at it: not judged as losses"
            " of a live lease: " + " | ".join(result.expired_on_arrival[:3])
        )
    judged = (
        f"judged: {result.claims} claim(s), {result.refusals} refused renewal(s), "
        f"{result.losses} loss notice(s), {lock.ops} lock operation(s) over {lock.keys} key(s)"
    )
    findings = []
    if result.exempt:
        findings.append(
            Finding(
                "lease-overlap-after-restart",
                f"{len(result.exempt)} pair(s) of leases overlapped across a restart of Redis "
                "without persistence (exempted from property f): " + " | ".join(result.exempt[:3]),
                ROLLBACK_REMEDY,
            )
        )
    if result.evicted:
        findings.append(
            Finding(
                "lease-overlap-after-evict",
                f"{len(result.evicted)} pair(s) of leases overlapped after an evict deleted the "
                "first one's key under its holder, before a renewal could tell it (exempted from "
                "property f: its holder could not know before a renewal answered 0): "
                + " | ".join(result.evicted[:3]),
                EVICT_REMEDY,
            )
        )
    return Outcome(result.checked, violations, "; ".join([judged, *notes]), findings)


PROPERTY = Property(
    KEY, "f", "the leases of one key never overlap; every loss told and explained", check
)
