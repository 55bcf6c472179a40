"""Property ``d``, ``grant-tokens``, key by key; and the counter-rollback finding.

Every grant of a key has its own token, and a grant of a key invoked after another grant of it
completed has a larger token (the per-key INCR counter). Grants separated by a restart of Redis
without persistence are exempt: the counter was rolled back; that is reported as a finding (with
its remedy), and property ``a`` shows whether the resource stayed safe.

The finding counts what the rollback did to a fenced resource: the counter starts again below the
fence the resource keeps per key, so it refuses the new tokens as stale until they pass it (or to
the end of the run). ``extras["rollbacks"]``: one `Rollback` per restart, the span the summary and
``timeline.png`` show.
"""

from __future__ import annotations

import itertools
from bisect import bisect_left
from collections import defaultdict
from collections.abc import Mapping
from typing import Any, Final

import attrs

from ..extract import Access, Fault, Grant, natural_key
from ._base import Context, Finding, Outcome, Property, Violation

__all__ = [
    "PROPERTY",
    "ROLLBACK_BAND",
    "ROLLBACK_REMEDY",
    "AcceptedAgain",
    "Rollback",
    "bands",
    "describe_rollback",
    "rollback_of",
]

KEY = "grant-tokens"

ROLLBACK_REMEDY: Final = (
    'Use fencing="clock" (tokens max(counter + 1, Redis TIME in microseconds), which a restart '
    "does not take back), or run Redis with appendonly yes and appendfsync always (AOF), so the "
    "fencing counter survives a restart."
)

#: How the summary and ``timeline.png`` name the span of a rollback.
ROLLBACK_BAND: Final = "counter rolled back: accesses refused as stale"


@attrs.frozen
class AcceptedAgain:
    """The first access by a grant made after a restart that the resource accepted again on a
    key it had fenced: when (``at_s``, seconds since the run started), by whom, with which
    ``token``, on which ``key``."""

    at_s: float
    process: str
    token: int
    key: str | None


@attrs.frozen
class Rollback:
    """What a restart without persistence did to the resource; times in seconds since the run
    started.

    ``start_s``: the restart began. ``end_s``: the span's end: when the last key refused was
    accepted again, else the run's end (``run_end_s``). ``refused``: the accesses refused as
    stale with tokens at or below the key's fence, on ``keys`` (each counted until its key
    accepted again), the first at ``first_refused_s``; ``stuck``: the keys refused to the end.
    ``accepted_again``: the first access accepted by a grant made after the restart (None:
    none). ``fence``: the largest token accepted before the restart, over ``fenced_keys`` keys.
    ``low_grants``: the grants after the restart with tokens at or below their key's fence.
    ``through``: some lower token got through (the resource was not fenced: property ``a``)."""

    start_s: float
    end_s: float
    refused: int
    keys: tuple[str | None, ...]
    stuck: tuple[str | None, ...]
    first_refused_s: float
    accepted_again: AcceptedAgain | None
    run_end_s: float
    fence: int
    fenced_keys: int
    low_grants: int = 0
    through: bool = False

    @property
    def band(self) -> bool:
        """Whether there is a span of refusals to show: some access refused, none let in."""
        return self.refused > 0 and not self.through

    def to_dict(self) -> dict[str, Any]:
        return attrs.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Rollback:
        """The record ``to_dict`` wrote (as ``report.json`` holds it: lists for tuples)."""
        again = data.get("accepted_again")
        return cls(**{
            **data,
            "keys": tuple(data["keys"]),
            "stuck": tuple(data["stuck"]),
            "accepted_again": None if again is None else AcceptedAgain(**again),
        })  # fmt: skip


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
    findings, rollbacks = _rollback_findings(ctx, exempt)
    return Outcome(
        len(ctx.data.grants), violations, findings=findings,
        extras={"rollbacks": [r.to_dict() for r in rollbacks]},
    )  # fmt: skip


def _plural(count: int, word: str, words: str) -> str:
    return f"{count} {word if count == 1 else words}"


def _run_end(ctx: Context) -> float:
    """The run's end: its ``stop`` event, else the last event (monotonic seconds)."""
    if ctx.data.stop is not None:
        return ctx.data.stop
    return max((e.mono for e in ctx.events), default=ctx.data.origin)


def _made_after(grant: Grant, fault: Fault, fence: int) -> bool:
    """Whether ``grant`` came from the restarted Redis: asked for once the restart was done, or
    with a token at or below the key's fence (the old counter only went up from there). An
    acquire answered just after the restart began may still carry the old counter's token."""
    if grant.granted <= fault.start:
        return False
    return (fault.end is not None and grant.invoked >= fault.end) or grant.token <= fence


def rollback_of(ctx: Context, fault: Fault) -> tuple[Rollback, list[Access]]:
    """What the restart ``fault`` (without persistence) did to the resource, and the accesses
    it refused as stale because of it."""
    fence: dict[str | None, int] = {}  # per key: the largest token accepted before the restart
    for a in ctx.data.accesses:
        if a.type == "ok" and (a.completed or 0.0) < fault.start:
            fence[a.key] = max(fence.get(a.key, 0), a.token or 0)
    new = {
        (g.process, g.id): g for g in ctx.data.grants if _made_after(g, fault, fence.get(g.key, 0))
    }
    # An old grant's access accepted once the restart began (invoked before it, or a holder
    # still at work) raised the fence too: the new grants' refusals on that key are the
    # rollback's. Which grants are new stays as decided above (that grant's own token may now be
    # at the fence: it is still the old counter's).
    for a in ctx.data.accesses:
        if (
            a.type == "ok"
            and (a.completed or 0.0) >= fault.start
            and (a.process, a.grant) not in new
        ):
            fence[a.key] = max(fence.get(a.key, 0), a.token or 0)
    after = [a for a in ctx.data.accesses if a.invoked > fault.start and a.key in fence]
    accepted = [a for a in after if a.type == "ok" and (a.process, a.grant) in new]
    through = any((a.token or 0) < fence[a.key] for a in after if a.type == "ok")
    back: dict[str | None, Access] = {}  # per key: the first access of a new grant accepted
    for a in sorted(accepted, key=lambda a: a.completed or 0.0):
        back.setdefault(a.key, a)
    run_end = _run_end(ctx)
    refused = [
        a for a in after
        if a.type == "fail" and a.outcome == "stale" and (a.token or 0) <= fence[a.key]
        and (a.key not in back or (a.completed or 0.0) <= (back[a.key].completed or 0.0))
    ]  # fmt: skip
    keys = sorted({a.key for a in refused}, key=natural_key)
    stuck = tuple(k for k in keys if k not in back)
    recovered = None if stuck else max((back[k].completed or 0.0 for k in keys), default=None)
    first = min(back.values(), key=lambda a: a.completed or 0.0, default=None)
    record = Rollback(
        start_s=_secs(ctx, fault.start),
        end_s=_secs(ctx, run_end if recovered is None else recovered),
        refused=len(refused),
        keys=tuple(keys),
        stuck=stuck,
        first_refused_s=_secs(ctx, min((a.completed or 0.0 for a in refused), default=None)),
        accepted_again=None if first is None else AcceptedAgain(
            _secs(ctx, first.completed), first.process, first.token or 0, first.key
        ),
        run_end_s=_secs(ctx, run_end),
        fence=max(fence.values(), default=0),
        fenced_keys=len(fence),
        low_grants=sum(
            1 for g in ctx.data.grants if g.granted > fault.start and g.token <= fence.get(g.key, 0)
        ),
        through=through,
    )  # fmt: skip
    return record, refused


def _secs(ctx: Context, mono: float | None) -> float:
    return round(ctx.rel(mono) or 0.0, 3)


def _rollback_findings(ctx: Context, exempt: list[Exempt]) -> tuple[list[Finding], list[Rollback]]:
    """One finding per restart without persistence; tokens are compared key by key."""
    findings: list[Finding] = []
    records: list[Rollback] = []
    for fault in ctx.rollbacks:
        if fault.end is None:
            continue
        record, _ = rollback_of(ctx, fault)
        counter_before = fault.detail.get("counter_before")
        pairs = sum(1 for _, _, f in exempt if f is fault)
        was = "" if counter_before is None else f" (at {counter_before} before)"
        message = (
            f"Redis was restarted without persistence at {record.start_s:.2f} s: the fencing "
            f"counter{was} started again from 0"
        )
        if record.fence:
            had = (
                f"token {record.fence}"
                if record.fenced_keys == 1
                else f"tokens up to {record.fence} on {record.fenced_keys} keys"
            )
            message += f", below the fence of the resource (it had accepted {had})"
            if record.through:
                message += ", and yet some lower tokens got through (see property a)"
            elif record.refused:
                message += f", so {_refusals(record)}"
        message += (
            f". {_plural(record.low_grants, 'later grant', 'later grants')} got tokens at or below "
            f"ones already issued ({_plural(pairs, 'pair', 'pairs')} of grants out of order, "
            "exempted from property d)."
        )
        records.append(record)
        findings.append(Finding("counter-rollback", message, ROLLBACK_REMEDY))
    return findings, records


def _refusals(record: Rollback) -> str:
    """What the resource did after the rollback: the refusals counted, and when (if ever) an
    access by a grant made after the restart was accepted again."""
    n = _plural(record.refused, "access", "accesses")
    m = _plural(len(record.keys), "key", "keys")
    first = f"{record.first_refused_s:.2f} s"
    again = record.accepted_again
    if again is None:
        return (
            f"every access was refused as stale: {n} refused as stale on {m} from {first} to the "
            f"end of the run ({record.run_end_s:.2f} s); none by a grant made after the restart "
            'was accepted. Safe, but stuck: recovery needs fencing="clock" or persistence (AOF)'
        )
    where = "" if again.key is None else f" on key {again.key!r}"
    accepted = (
        f"accepted again at {again.at_s:.2f} s ({again.process}'s token {again.token}{where}), "
        f"{again.at_s - record.start_s:.2f} s after the restart"
    )
    if record.stuck:
        return (
            f"accesses were refused as stale: {n} refused as stale on {m} from {first} to the "
            f"end of the run ({record.run_end_s:.2f} s); {accepted}, but {_names(record.stuck)} "
            "still refused to the end. Safe, but "
            'stuck there: recovery needs fencing="clock" or persistence (AOF)'
        )
    return (
        f"accesses were refused as stale until the new tokens passed it: {n} refused as stale on "
        f"{m} from {first} to {record.end_s:.2f} s; {accepted}"
    )


def bands(extras: Mapping[str, Any]) -> list[Rollback]:
    """The rollbacks of a report's ``extras`` that have a span of refusals to show."""
    records = (Rollback.from_dict(r) for r in extras.get("rollbacks", ()))
    return [r for r in records if r.band]


def _names(keys: tuple[str | None, ...]) -> str:
    """``key 'k2'``, ``keys 'k2', 'k3'``, ``keys 'k2', 'k3', 'k4' and 2 more``."""
    shown = ", ".join(repr(k) for k in keys[:3]) + (
        f" and {len(keys) - 3} more" if len(keys) > 3 else ""
    )
    return ("key " if len(keys) == 1 else "keys ") + shown


def describe_rollback(record: Rollback) -> str:
    """The rollback's span in one line, as the summary and the picture name it:
    ``counter rolled back: accesses refused as stale from 12.00 s to the end of the run
    (20.01 s), 643 on 31 keys``."""
    until = (
        f"the end of the run ({record.run_end_s:.2f} s)" if record.stuck
        else f"{record.end_s:.2f} s"
    )  # fmt: skip
    return (
        f"{ROLLBACK_BAND} from {record.start_s:.2f} s to {until}, {record.refused} on "
        f"{_plural(len(record.keys), 'key', 'keys')}"
    )


PROPERTY = Property(KEY, "d", "unique, increasing tokens per grant", check)
