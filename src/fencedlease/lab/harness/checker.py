"""The checker: reads a history and says whether the run kept its promises. Pure: no I/O.

The properties (Jepsen's checkers read histories the same way; Kleppmann, "How to do distributed
locking", 2016, for why each matters):

``a`` ``accepted-tokens-monotonic``
    Once the resource has accepted an access with token ``t`` (the access completed), no access
    invoked afterwards is accepted with a smaller token. Reads count: a read served to a newer
    holder and then a write accepted from an older one is exactly a stale holder getting through.
``b`` ``no-lost-update``
    The final counter equals the number of acknowledged increments (writes that completed
    ``ok``), give or take writes whose outcome is unknown (``info``); two acknowledged writes of
    the same value name the collision.
``c`` ``loss-reported``
    A lease lost during its critical section (the library said so, or another worker was granted
    the key before the body ended) ends in ``LeaseLostError`` or ``StaleTokenError``, never in a
    normal return. And when the holder is cut off from Redis (``partition``, ``timeout``,
    ``redis-pause``, ``drop-replies``, ``drop-requests``, ``kernel-drop``, ``kernel-reject`` of
    at least ttl), it is told of the loss within ttl + one heartbeat of the cut.
``d`` ``grant-tokens``
    Every grant has its own token, and a grant invoked after another completed has a larger one.
    Grants separated by a restart of Redis without persistence are exempt: the counter was rolled
    back; that is reported as a finding (with its remedy), and property ``a`` shows whether the
    resource stayed safe.
``e`` ``recovery``
    After each fault heals, a lease is held again within ttl + margin: a new grant, or a holder
    that kept its lease through the fault (its release succeeded). Judged up to the run's stop
    and the next fault's start; a fault followed too soon by either is not judged.
``f`` ``mutual-exclusion``
    The lock itself (:mod:`~fencedlease.lab.harness.mutex`), which fencing hides from the data
    checks: the claims of different grants of one key (grant to last confirmed deadline, cut
    short by the release or a loss notice) never overlap; a renewal answered 0 is followed by a
    loss notice; no lease is lost without a fault to explain it. Each part the history has no
    events for is named "not judged" in the property's note.
``g`` ``linearizable-register``
    The data (:mod:`~fencedlease.lab.harness.linearizable`): every key of the resource behaves
    as a fenced register, one linearization explaining every read's value and every access's
    acceptance or refusal, unknown outcomes taken as maybe-applied.

Inputs: the merged history (:func:`fencedlease.lab.harness.history.merge_histories`), whose ``run``
``start`` event carries the parameters (``ttl_ms``, ``heartbeat_ms``, ``margin_ms``...). Output: a
:class:`CheckReport`; ``report.valid`` is false iff some property has a violation.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Sequence
from typing import Any, Final, Literal

import attrs

from .history import Event
from .linearizable import check_register, ops_from_history
from .mutex import check_mutex

__all__ = [
    "PROPERTIES",
    "Access",
    "CheckParams",
    "CheckReport",
    "Extracted",
    "Fault",
    "Finding",
    "Grant",
    "PropertyResult",
    "Violation",
    "check_history",
    "extract",
]

#: Property key -> (letter, title).
PROPERTIES: Final[dict[str, tuple[str, str]]] = {
    "accepted-tokens-monotonic": ("a", "accepted tokens never go backwards"),
    "no-lost-update": ("b", "no lost update"),
    "loss-reported": ("c", "a lost lease is reported, never a silent success"),
    "grant-tokens": ("d", "unique, increasing tokens per grant"),
    "recovery": ("e", "a lease is granted again after faults heal"),
    "mutual-exclusion": ("f", "the leases of one key never overlap; every loss told and explained"),
    "linearizable-register": ("g", "the resource is a linearizable fenced register"),
}

#: Faults after which the holder must be told of its loss within ttl + one heartbeat.
CUT_OFF_FAULTS: Final = frozenset(
    {
        "partition", "timeout", "redis-pause", "drop-replies", "drop-requests",
        "kernel-drop", "kernel-reject",
    }
)  # fmt: skip
#: Faults that roll the fencing counter back.
ROLLBACK_FAULTS: Final = frozenset({"redis-restart-nopersist"})

LOSS_OUTCOMES: Final = frozenset({"lease-lost", "stale"})


@attrs.frozen
class CheckParams:
    """Milliseconds: ``ttl_ms`` (lease TTL), ``heartbeat_ms`` (renewal interval), ``margin_ms``
    (added to ttl for the recovery bound of property ``e``)."""

    ttl_ms: int = 1000
    heartbeat_ms: int = 250
    margin_ms: int = 1000

    @classmethod
    def from_history(cls, events: Sequence[Event], **overrides: int) -> CheckParams:
        """The parameters of the ``run`` ``start`` event, else the defaults; ``overrides`` win."""
        found: dict[str, int] = {}
        for event in events:
            if event.process == "run" and event.op == "start":
                for name in ("ttl_ms", "heartbeat_ms", "margin_ms"):
                    if isinstance(event.detail.get(name), int):
                        found[name] = event.detail[name]
                break
        return cls(**{**found, **overrides})


@attrs.frozen
class Violation:
    """One broken promise: ``property`` (a key of :data:`PROPERTIES`), a ``message`` explaining
    it in words, ``at`` (seconds since the run started) and the history ``lines`` (1-based) that
    show it."""

    property: str
    message: str
    at: float | None = None
    lines: tuple[int, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "property": self.property,
            "message": self.message,
            "at_s": None if self.at is None else round(self.at, 3),
            "lines": list(self.lines),
        }


@attrs.frozen
class Finding:
    """Something the reader must know that is not a violation (``kind``, ``message``,
    ``remedy``): a counter rolled back, a resource stuck, faults skipped, outcomes unknown."""

    kind: str
    message: str
    remedy: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return attrs.asdict(self)


@attrs.frozen
class PropertyResult:
    """A property's verdict: ``checked`` (how many cases it looked at) and its violations."""

    key: str
    letter: str
    title: str
    checked: int
    violations: tuple[Violation, ...]
    note: str | None = None

    @property
    def status(self) -> Literal["pass", "fail", "not checked"]:
        if self.violations:
            return "fail"
        return "pass" if self.checked else "not checked"

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "letter": self.letter,
            "title": self.title,
            "status": self.status,
            "checked": self.checked,
            "violations": [v.to_dict() for v in self.violations],
            "note": self.note,
        }


@attrs.frozen
class CheckReport:
    """The checker's answer. ``valid``: no violation at all. ``properties``: one result per key
    of :data:`PROPERTIES`, in order. ``stats``: counts (grants, acknowledged writes, refusals...).
    ``recoveries``: per fault, seconds from its end to the next held lease (None: never)."""

    valid: bool
    properties: tuple[PropertyResult, ...]
    findings: tuple[Finding, ...]
    stats: dict[str, Any]
    params: CheckParams
    recoveries: tuple[dict[str, Any], ...] = ()

    @property
    def violations(self) -> list[Violation]:
        """Every violation, property by property."""
        return [v for p in self.properties for v in p.violations]

    def explain(self) -> str:
        """Every violation and finding, one per line (for logs and assertion messages)."""
        lines = [f"({v.property}) {v.message}" for v in self.violations]
        lines += [f"[{f.kind}] {f.message}" for f in self.findings]
        return "\n".join(lines) or "no violation, no finding"

    def property(self, key: str) -> PropertyResult:
        """The result for ``key``. Raises ``KeyError``."""
        for result in self.properties:
            if result.key == key:
                return result
        raise KeyError(key)

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON-ready data (what ``report.json`` holds)."""
        return {
            "valid": self.valid,
            "violation_count": len(self.violations),
            "properties": [p.to_dict() for p in self.properties],
            "findings": [f.to_dict() for f in self.findings],
            "stats": self.stats,
            "params": attrs.asdict(self.params),
            "recoveries": list(self.recoveries),
        }


# --- the history, reassembled -----------------------------------------------------------------


@attrs.frozen
class Grant:
    """One acquire that completed ``ok``, and how its hold ended. Times in monotonic seconds.

    ``end``: when the hold completed (None if it never did); ``end_type`` / ``end_outcome`` its
    completion; ``body_end``: when the critical section's body finished (the lease was still
    needed until then); ``lost``: when the library declared it lost (None: never)."""

    process: str
    id: int
    token: int
    invoked: float
    granted: float
    line: int
    end: float | None = None
    end_type: str | None = None
    end_outcome: str | None = None
    end_line: int | None = None
    body_end: float | None = None
    lost: float | None = None
    lost_line: int | None = None

    @property
    def needed_until(self) -> float | None:
        """The end of the body, else the end of the hold."""
        return self.body_end if self.body_end is not None else self.end


@attrs.frozen
class Access:
    """One read or write of the resource: invoked, completed (``type``) with ``outcome``."""

    process: str
    op: str
    grant: int | None
    token: int | None
    value: int | None
    invoked: float
    completed: float | None
    type: str | None
    outcome: str | None
    line: int
    end_line: int | None


@attrs.frozen
class Fault:
    """One nemesis action: ``kind``, ``target`` worker (or None), ``start``/``end`` monotonic
    seconds (``end`` None if it never completed), its completion ``type`` and ``detail``."""

    id: int
    kind: str
    target: str | None
    start: float
    end: float | None
    type: str | None
    detail: dict[str, Any]
    line: int


@attrs.frozen
class Extracted:
    """What :func:`extract` reassembles from a history."""

    grants: list[Grant]
    accesses: list[Access]
    faults: list[Fault]
    origin: float
    stop: float | None
    final: int | None
    events: int


def extract(events: Sequence[Event]) -> Extracted:
    """Pair invocations with completions and collect grants, accesses and faults."""
    origin = events[0].mono if events else 0.0
    stop: float | None = None
    final: int | None = None
    grants: dict[tuple[str, int], Grant] = {}
    pending: dict[tuple[str, str, int], tuple[Event, int]] = {}
    accesses: list[Access] = []
    faults: list[Fault] = []
    for line, event in enumerate(events, 1):
        if event.process == "run":
            if event.op == "start":
                origin = event.mono
            elif event.op == "stop":
                stop = event.mono
            elif event.op == "final" and event.type == "ok":
                final = event.value
            continue
        key = (event.process, event.op, event.id if event.id is not None else -1)
        if event.type == "invoke":
            pending[key] = (event, line)
            continue
        if event.op == "lease-lost" and event.grant is not None:
            grant = grants.get((event.process, event.grant))
            if grant is not None and grant.lost is None:
                grants[(event.process, event.grant)] = attrs.evolve(
                    grant, lost=event.mono, lost_line=line
                )
            continue
        if event.op == "hold" and event.id is not None:
            grant = grants.get((event.process, event.id))
            if grant is not None:
                body_end = event.detail.get("body_end")
                grants[(event.process, event.id)] = attrs.evolve(
                    grant,
                    end=event.mono,
                    end_type=event.type,
                    end_outcome=event.outcome,
                    end_line=line,
                    body_end=float(body_end) if body_end is not None else None,
                )
            continue
        started = pending.pop(key, None)
        if started is None:
            continue
        invoke, invoke_line = started
        if event.op == "acquire":
            if event.type == "ok" and event.token is not None and event.id is not None:
                grants[(event.process, event.id)] = Grant(
                    event.process, event.id, event.token, invoke.mono, event.mono, line
                )
        elif event.op in ("read", "write"):
            accesses.append(
                Access(
                    event.process,
                    event.op,
                    event.grant,
                    event.token,
                    event.value,
                    invoke.mono,
                    event.mono,
                    event.type,
                    event.outcome,
                    invoke_line,
                    line,
                )
            )
        elif event.op == "fault":
            detail = {**invoke.detail, **event.detail}
            faults.append(
                Fault(
                    event.id if event.id is not None else -1,
                    str(detail.get("fault")),
                    detail.get("target"),
                    invoke.mono,
                    event.mono,
                    event.type,
                    detail,
                    invoke_line,
                )
            )
    for (process, op, op_id), (invoke, line) in pending.items():
        if op == "fault":
            faults.append(
                Fault(
                    op_id,
                    str(invoke.detail.get("fault")),
                    invoke.detail.get("target"),
                    invoke.mono,
                    None,
                    None,
                    dict(invoke.detail),
                    line,
                )
            )
        elif op in ("read", "write"):
            accesses.append(
                Access(
                    process,
                    op,
                    invoke.grant,
                    invoke.token,
                    invoke.value,
                    invoke.mono,
                    None,
                    None,
                    None,
                    line,
                    None,
                )
            )
    grant_list = sorted(grants.values(), key=lambda g: g.granted)
    accesses.sort(key=lambda a: a.invoked)
    faults.sort(key=lambda f: f.start)
    return Extracted(grant_list, accesses, faults, origin, stop, final, len(events))


# --- the properties ---------------------------------------------------------------------------


class _Ctx:
    def __init__(self, data: Extracted, params: CheckParams) -> None:
        self.data = data
        self.params = params
        self.rollbacks = [f for f in data.faults if f.kind in ROLLBACK_FAULTS]

    def t(self, mono: float | None) -> str:
        return "never" if mono is None else f"{mono - self.data.origin:.2f} s"

    def rel(self, mono: float | None) -> float | None:
        return None if mono is None else mono - self.data.origin

    def rolled_back_between(self, earlier: float, later: float) -> Fault | None:
        """A counter-rolling fault that may have happened between two instants."""
        for fault in self.rollbacks:
            end = fault.end if fault.end is not None else float("inf")
            if fault.start < later and end > earlier:
                return fault
        return None


def _describe_access(a: Access) -> str:
    return f"{a.process}'s {a.op} with token {a.token}"


def _check_accepted_monotonic(ctx: _Ctx) -> PropertyResult:
    accepted = [a for a in ctx.data.accesses if a.type == "ok" and a.token is not None]
    by_completion = sorted(accepted, key=lambda a: a.completed or 0.0)
    violations: list[Violation] = []
    best: Access | None = None
    index = 0
    for access in sorted(accepted, key=lambda a: a.invoked):
        while index < len(by_completion) and (by_completion[index].completed or 0.0) < (
            access.invoked
        ):
            done = by_completion[index]
            if best is None or (done.token or 0) > (best.token or 0):
                best = done
            index += 1
        if best is not None and access.token is not None and access.token < (best.token or 0):
            violations.append(
                Violation(
                    "accepted-tokens-monotonic",
                    f"{_describe_access(access)} was accepted at {ctx.t(access.completed)}, "
                    f"although {_describe_access(best)} had already been accepted at "
                    f"{ctx.t(best.completed)}: the resource let an older token in after a newer "
                    "one, so a stale holder acted on the data.",
                    ctx.rel(access.completed),
                    (best.end_line or best.line, access.end_line or access.line),
                )
            )
    return _result("accepted-tokens-monotonic", len(accepted), violations)


def _check_lost_update(ctx: _Ctx) -> PropertyResult:
    writes = [a for a in ctx.data.accesses if a.op == "write"]
    acked = [w for w in writes if w.type == "ok"]
    unknown = [w for w in writes if w.type == "info" or w.type is None]
    final = ctx.data.final
    if final is None:
        return _result("no-lost-update", 0, [], note="the final counter was not read")
    violations: list[Violation] = []
    by_value: dict[int | None, list[Access]] = defaultdict(list)
    for write in acked:
        by_value[write.value].append(write)
    collisions = [group for group in by_value.values() if len(group) > 1]
    collided = "; ".join(
        " and ".join(f"{w.process} (token {w.token}, at {ctx.t(w.completed)})" for w in group)
        + f" both wrote {group[0].value}"
        for group in collisions[:5]
    )
    lines = tuple(w.end_line or w.line for group in collisions[:5] for w in group)
    if final < len(acked):
        violations.append(
            Violation(
                "no-lost-update",
                f"the counter ends at {final} but {len(acked)} increments were acknowledged: "
                f"{len(acked) - final} acknowledged increment(s) were lost"
                + (f" ({collided}: one overwrote the other)." if collided else "."),
                None,
                lines,
            )
        )
    elif final > len(acked) + len(unknown):
        violations.append(
            Violation(
                "no-lost-update",
                f"the counter ends at {final}, more than the {len(acked)} acknowledged plus "
                f"{len(unknown)} unknown increments: a write happened that was reported failed.",
            )
        )
    elif collisions:
        violations.append(
            Violation(
                "no-lost-update",
                f"two acknowledged writes wrote the same value ({collided}): one increment "
                "overwrote the other.",
                None,
                lines,
            )
        )
    return _result("no-lost-update", len(acked) + 1, violations)


def _check_loss_reported(ctx: _Ctx) -> PropertyResult:
    params = ctx.params
    grants = ctx.data.grants
    violations: list[Violation] = []
    checked = 0
    for grant in grants:
        if grant.end is None:
            continue
        checked += 1
        until = grant.needed_until or grant.end
        rival = next(
            (
                other
                for other in grants
                if other.process != grant.process and grant.granted < other.granted < until
            ),
            None,
        )
        if grant.lost is None and rival is None:
            continue
        if grant.end_type == "ok":
            if rival is not None:
                why = (
                    f"{rival.process} was granted the key (token {rival.token}) at "
                    f"{ctx.t(rival.granted)}, before the body ended at {ctx.t(until)}"
                )
            else:
                why = f"the library declared it lost at {ctx.t(grant.lost)}"
            lines = [grant.line, grant.end_line or grant.line]
            if rival is not None:
                lines.insert(1, rival.line)
            violations.append(
                Violation(
                    "loss-reported",
                    f"{grant.process}'s lease (token {grant.token}) was lost during its critical "
                    f"section ({why}) but the critical section returned normally at "
                    f"{ctx.t(grant.end)}: a silent success.",
                    ctx.rel(grant.end),
                    tuple(lines),
                )
            )
    bound = (params.ttl_ms + params.heartbeat_ms) / 1000
    for fault in ctx.data.faults:
        if fault.kind not in CUT_OFF_FAULTS or fault.type != "ok" or fault.end is None:
            continue
        if fault.end - fault.start < params.ttl_ms / 1000:
            continue
        for grant in grants:
            if fault.target is not None and grant.process != fault.target:
                continue
            needed = grant.needed_until
            if grant.granted >= fault.start or needed is None:
                continue
            if needed <= fault.start + bound:
                continue  # the body ended before it had to be told
            checked += 1
            if grant.lost is None or grant.lost > fault.start + bound:
                late = (
                    "was never told"
                    if grant.lost is None
                    else f"was told only {grant.lost - fault.start:.2f} s after the cut"
                )
                violations.append(
                    Violation(
                        "loss-reported",
                        f"{grant.process} (token {grant.token}) was cut off from Redis by "
                        f"{fault.kind} at {ctx.t(fault.start)} and its body ran on until "
                        f"{ctx.t(needed)}, but it {late}; the bound is ttl + one heartbeat = "
                        f"{bound:.2f} s.",
                        ctx.rel(fault.start + bound),
                        (fault.line, grant.line) + ((grant.lost_line,) if grant.lost_line else ()),
                    )
                )
    return _result("loss-reported", checked, violations)


def _check_grant_tokens(ctx: _Ctx) -> tuple[PropertyResult, list[tuple[Grant, Grant, Fault]]]:
    grants = ctx.data.grants
    violations: list[Violation] = []
    exempt: list[tuple[Grant, Grant, Fault]] = []
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
                Violation(
                    "grant-tokens",
                    f"token {token} was granted twice: to {first.process} at "
                    f"{ctx.t(first.granted)} and to {second.process} at {ctx.t(second.granted)}.",
                    ctx.rel(second.granted),
                    (first.line, second.line),
                )
            )
    for grant in grants:
        earlier = [
            g
            for g in grants
            if g.granted < grant.invoked and g.token >= grant.token and g is not grant
        ]
        if not earlier:
            continue
        worst = max(earlier, key=lambda g: g.token)
        if worst.token == grant.token:
            continue  # reported above as a duplicate
        rollback = ctx.rolled_back_between(worst.granted, grant.granted)
        if rollback is not None:
            exempt.append((worst, grant, rollback))
            continue
        violations.append(
            Violation(
                "grant-tokens",
                f"{grant.process} was granted token {grant.token} at {ctx.t(grant.granted)} by an "
                f"acquire invoked at {ctx.t(grant.invoked)}, after {worst.process} had been "
                f"granted the larger token {worst.token} at {ctx.t(worst.granted)}: tokens must "
                "increase from one grant to the next.",
                ctx.rel(grant.granted),
                (worst.line, grant.line),
            )
        )
    return _result("grant-tokens", len(grants), violations), exempt


def _check_recovery(ctx: _Ctx) -> tuple[PropertyResult, list[dict[str, Any]]]:
    params = ctx.params
    bound = (params.ttl_ms + params.margin_ms) / 1000
    grants = ctx.data.grants
    stop = ctx.data.stop
    violations: list[Violation] = []
    recoveries: list[dict[str, Any]] = []
    checked = 0
    faults = ctx.data.faults
    for index, fault in enumerate(faults):
        if fault.end is None:
            continue
        # Judge recovery only up to the run's stop and the next fault's start.
        horizon = min(
            stop if stop is not None else float("inf"),
            faults[index + 1].start if index + 1 < len(faults) else float("inf"),
        )
        held_through = any(
            g.granted <= fault.end and g.end_type == "ok" and (g.end or 0.0) >= fault.end
            for g in grants
        )
        after = [g.granted for g in grants if fault.end <= g.granted <= horizon]
        first = min(after) if after else None
        waited = 0.0 if held_through else (None if first is None else first - fault.end)
        judged = waited is not None or fault.end + bound <= horizon
        recoveries.append(
            {
                "fault": fault.kind,
                "end_s": ctx.rel(fault.end),
                "after_s": None if waited is None else round(waited, 3),
                "checked": judged,
            }
        )
        if not judged:
            continue
        checked += 1
        if waited is None or waited > bound:
            seen = (
                "no lease was granted again"
                if waited is None
                else f"the next lease was granted only {waited:.2f} s later"
            )
            violations.append(
                Violation(
                    "recovery",
                    f"after {fault.kind} healed at {ctx.t(fault.end)}, {seen}; the bound is "
                    f"ttl + margin = {bound:.2f} s.",
                    ctx.rel(fault.end),
                    (fault.line,),
                )
            )
    return _result("recovery", checked, violations), recoveries


def _check_mutual_exclusion(events: Sequence[Event], ctx: _Ctx) -> tuple[PropertyResult, list[str]]:
    params = ctx.params
    result = check_mutex(
        events,
        ttl_ms=params.ttl_ms,
        heartbeat_ms=params.heartbeat_ms,
        origin=ctx.data.origin,
    )
    violations = [
        Violation("mutual-exclusion", f"[{i.kind}] {i.message}", ctx.rel(i.at), i.lines)
        for i in result.issues
    ]
    notes = [f"not judged: {part}" for part in result.not_judged]
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
    judged = (
        f"judged: {result.claims} claim(s), {result.refusals} refused renewal(s), "
        f"{result.losses} loss notice(s)"
    )
    return (
        _result("mutual-exclusion", result.checked, violations, "; ".join([judged, *notes])),
        list(result.exempt),
    )


def _check_linearizable(events: Sequence[Event], ctx: _Ctx) -> PropertyResult:
    ops, lacking = ops_from_history(events)
    if lacking is not None:
        return _result("linearizable-register", 0, [], note=f"not judged: {lacking}")
    initial = 0
    for event in events:
        if event.process == "run" and event.op == "start":
            raw = event.detail.get("initial")
            if isinstance(raw, int) and not isinstance(raw, bool):
                initial = raw
            break
    result = check_register(ops, initial=initial)
    violations = [
        Violation(
            "linearizable-register",
            failure.explain(ctx.data.origin),
            ctx.rel(failure.culprit.completed),
            failure.lines,
        )
        for failure in result.failures
    ]
    note = f"{result.ops} operation(s) over {result.keys} key(s), the counter starting at {initial}"
    return _result("linearizable-register", result.ops, violations, note)


def _result(
    key: str, checked: int, violations: list[Violation], note: str | None = None
) -> PropertyResult:
    letter, title = PROPERTIES[key]
    return PropertyResult(key, letter, title, checked, tuple(violations), note)


# --- findings ---------------------------------------------------------------------------------

ROLLBACK_REMEDY: Final = (
    "Run Redis with appendonly yes and appendfsync always, so the fencing counter survives a "
    "restart; or add a fencing epoch (a number bumped whenever Redis may have lost writes, "
    "compared before the token) so tokens after the restart outrank the old ones."
)


def _rollback_findings(ctx: _Ctx, exempt: list[tuple[Grant, Grant, Fault]]) -> list[Finding]:
    findings: list[Finding] = []
    for fault in ctx.rollbacks:
        if fault.end is None:
            continue
        before = [
            a for a in ctx.data.accesses if a.type == "ok" and (a.completed or 0) < fault.start
        ]
        high = max((a.token or 0 for a in before), default=0)
        refused_after = [
            a
            for a in ctx.data.accesses
            if a.invoked > fault.start and a.type == "fail" and a.outcome == "stale"
            and (a.token or 0) <= high
        ]  # fmt: skip
        accepted_after = [
            a for a in ctx.data.accesses if a.invoked > fault.start and a.type == "ok"
        ]
        low_grants = [g for g in ctx.data.grants if g.granted > fault.start and g.token <= high]
        counter_before = fault.detail.get("counter_before")
        pairs = sum(1 for _, _, f in exempt if f is fault)
        message = (
            f"Redis was restarted without persistence at {ctx.t(fault.start)}: the fencing "
            f"counter (at {counter_before} before) started again from 0, so "
            f"{len(low_grants)} later grant(s) got tokens at or below ones already issued"
            f" ({pairs} pair(s) of grants out of order, exempted from property d). "
        )
        if high:
            lower_in = [a for a in accepted_after if (a.token or 0) < high]
            first_ok = min(accepted_after, key=lambda a: a.completed or 0.0, default=None)
            unstuck = (
                f"it accepted again at {ctx.t(first_ok.completed)} (token {first_ok.token}), "
                f"{(first_ok.completed or 0.0) - fault.start:.2f} s after the restart"
                if first_ok is not None
                else "it accepted nothing more before the run ended"
            )
            message += (
                f"The resource had accepted token {high}, so it refused every access with the "
                f"new, lower tokens ({len(refused_after)} refusal(s)): "
                + (
                    f"safe, but stuck until new tokens passed {high}; {unstuck}."
                    if not lower_in
                    else "and yet some lower tokens got through (see property a)."
                )
            )
        findings.append(Finding("counter-rollback", message, ROLLBACK_REMEDY))
    return findings


def _stats(ctx: _Ctx) -> dict[str, Any]:
    data = ctx.data
    grants = data.grants
    writes = [a for a in data.accesses if a.op == "write"]
    per_worker: dict[str, dict[str, int]] = defaultdict(
        lambda: {"grants": 0, "acked": 0, "refused": 0, "lost": 0}
    )
    for grant in grants:
        per_worker[grant.process]["grants"] += 1
        if grant.end_outcome == "lease-lost":
            per_worker[grant.process]["lost"] += 1
    for access in data.accesses:
        if access.op == "write" and access.type == "ok":
            per_worker[access.process]["acked"] += 1
        if access.type == "fail" and access.outcome == "stale":
            per_worker[access.process]["refused"] += 1
    return {
        "events": data.events,
        "duration_s": round((data.stop or data.origin) - data.origin, 3),
        "grants": len(grants),
        "acknowledged_writes": sum(1 for w in writes if w.type == "ok"),
        "unknown_writes": sum(1 for w in writes if w.type in ("info", None)),
        "refused_accesses": sum(
            1 for a in data.accesses if a.type == "fail" and a.outcome == "stale"
        ),
        "leases_lost": sum(1 for g in grants if g.end_outcome == "lease-lost" or g.lost),
        "loss_notices": sum(1 for g in grants if g.lost is not None),
        "final_counter": data.final,
        "faults": [f.kind for f in data.faults],
        "faults_injected": sum(1 for f in data.faults if f.type == "ok"),
        "accepted_accesses": sum(1 for a in data.accesses if a.type == "ok"),
        "per_worker": dict(sorted(per_worker.items())),
    }


def check_history(events: Sequence[Event], params: CheckParams | None = None) -> CheckReport:
    """Check every property on ``events`` (a merged history, in time order).

    ``params`` default to those of the history's ``run`` ``start`` event
    (:meth:`CheckParams.from_history`). Pure: the same history gives the same report.
    """
    params = params or CheckParams.from_history(events)
    data = extract(events)
    ctx = _Ctx(data, params)
    tokens, exempt = _check_grant_tokens(ctx)
    recovery, recoveries = _check_recovery(ctx)
    mutex, overlaps_exempt = _check_mutual_exclusion(events, ctx)
    results = (
        _check_accepted_monotonic(ctx),
        _check_lost_update(ctx),
        _check_loss_reported(ctx),
        tokens,
        recovery,
        mutex,
        _check_linearizable(events, ctx),
    )
    findings = _rollback_findings(ctx, exempt)
    if overlaps_exempt:
        findings.append(
            Finding(
                "lease-overlap-after-restart",
                f"{len(overlaps_exempt)} pair(s) of leases overlapped across a restart of Redis "
                "without persistence (exempted from property f): "
                + " | ".join(overlaps_exempt[:3]),
                ROLLBACK_REMEDY,
            )
        )
    unknown = [a for a in data.accesses if a.type in ("info", None)]
    if unknown:
        findings.append(
            Finding(
                "unknown-outcomes",
                f"{len(unknown)} access(es) ended with an error that leaves their effect unknown "
                "(counted as maybe-applied by property b).",
            )
        )
    for event in events:
        if event.process == "run" and event.op == "note":
            findings.append(
                Finding(
                    str(event.outcome or "note"),
                    str(event.detail.get("message", "")),
                    event.detail.get("remedy"),
                )
            )
    valid = not any(r.violations for r in results)
    return CheckReport(valid, results, tuple(findings), _stats(ctx), params, tuple(recoveries))
