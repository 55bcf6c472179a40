"""The checker: reads a history and says whether the run kept its promises. Pure: no I/O.

The properties (Jepsen's checkers read histories the same way; Kleppmann, "How to do distributed
locking", 2016, for why each matters), each judged key by key, one module each in
[`properties`][fencedlease_lab.harness.properties]:

- ``a`` ``accepted-tokens-monotonic``: the resource never accepts an older token after a newer
  one ([`accepted`][fencedlease_lab.harness.properties.accepted]);
- ``b`` ``no-lost-update``: each key's final counter equals its acknowledged increments
  ([`lost_update`][fencedlease_lab.harness.properties.lost_update]);
- ``c`` ``loss-reported``: a lost lease ends in an error, and a cut-off holder is told in time
  ([`loss_reported`][fencedlease_lab.harness.properties.loss_reported]);
- ``d`` ``grant-tokens``: unique, increasing tokens per grant of a key, rollbacks explained
  ([`grant_tokens`][fencedlease_lab.harness.properties.grant_tokens]);
- ``e`` ``recovery``: a key asked for after a fault heals is held again within ttl + margin
  ([`recovery`][fencedlease_lab.harness.properties.recovery]);
- ``f`` ``mutual-exclusion``: the leases of one key never overlap; every loss told and explained
  ([`mutual_exclusion`][fencedlease_lab.harness.properties.mutual_exclusion]);
- ``g`` ``linearizable-register``: each key of the resource is a linearizable fenced register
  ([`register`][fencedlease_lab.harness.properties.register]);
- ``h`` ``transactions``: the list-append transactions, when the history has any, have no cycle
  of ww/wr/rw dependencies (G0, G1c, G-single, G2), no aborted or garbage read, no stale read
  ([`transactions`][fencedlease_lab.harness.properties.transactions], after Elle).

Inputs: the merged history
([`fencedlease_lab.harness.history.merge_histories`][fencedlease_lab.harness.merge_histories]),
whose ``run`` ``start`` event carries the parameters (``ttl_ms``, ``heartbeat_ms``,
``margin_ms``...). Output: a [`CheckReport`][fencedlease_lab.harness.CheckReport]; ``report.valid``
is false iff some property has a violation. Each violation names its key and the history events
([`OpRef`][fencedlease_lab.harness.checker.OpRef]: line, worker, key, token, time) that prove it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any, Final

import attrs

from .extract import Access, Attempt, Extracted, Fault, Grant, extract, natural_key
from .history import Event
from .lanes import lost_lanes
from .properties import REGISTRY
from .properties._base import (
    CheckParams,
    Context,
    Finding,
    OpRef,
    PropertyResult,
    Violation,
)
from .stale_writes import stale_writes

__all__ = [
    "PROPERTIES",
    "REPORT_VERSION",
    "Access",
    "Attempt",
    "CheckParams",
    "CheckReport",
    "Extracted",
    "Fault",
    "Finding",
    "Grant",
    "OpRef",
    "PropertyResult",
    "Violation",
    "check_history",
    "extract",
]

#: Property key -> (letter, title), in report order.
PROPERTIES: Final[dict[str, tuple[str, str]]] = {p.key: (p.letter, p.title) for p in REGISTRY}

#: The shape of :meth:`CheckReport.to_dict` (``report.json``): 2 added each violation's ``key``
#: and ``ops``, and ``keys``, ``slowest_key`` to the recoveries.
REPORT_VERSION: Final = 2


@attrs.frozen
class CheckReport:
    """The checker's answer. ``valid``: no violation at all. ``properties``: one result per
    property of the registry, in order. ``stats``: counts (grants, acknowledged writes,
    refusals...). ``recoveries``: per fault, seconds from its end to the key asked for last held
    again (None: never). ``extras``: the other report fields properties add."""

    valid: bool
    properties: tuple[PropertyResult, ...]
    findings: tuple[Finding, ...]
    stats: dict[str, Any]
    params: CheckParams
    recoveries: tuple[dict[str, Any], ...] = ()
    extras: dict[str, Any] = attrs.field(factory=dict)

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
            "report_version": REPORT_VERSION,
            "valid": self.valid,
            "violation_count": len(self.violations),
            "properties": [p.to_dict() for p in self.properties],
            "findings": [f.to_dict() for f in self.findings],
            "stats": self.stats,
            "params": attrs.asdict(self.params),
            "recoveries": list(self.recoveries),
            **self.extras,
        }


def _with_ops(violation: Violation, events: Sequence[Event], origin: float) -> Violation:
    """``violation`` with the events of its lines, and its key when they all name one."""
    ops = tuple(OpRef.of(events, line, origin) for line in violation.lines if line >= 1)
    key = violation.key
    if key is None:
        keys = {op.key for op in ops if op.key is not None}
        key = next(iter(keys)) if len(keys) == 1 else None
    return attrs.evolve(violation, ops=ops, key=key)


def _stats(data: Extracted) -> dict[str, Any]:
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
        "keys": len({g.key for g in grants} | {a.key for a in data.accesses}),
        "acknowledged_writes": sum(1 for w in writes if w.type == "ok"),
        "unknown_writes": sum(1 for w in writes if w.type in ("info", None)),
        # Reads too: an unknown read may have moved the fence, so it weighs in the register check.
        "unknown_accesses": sum(1 for a in data.accesses if a.type in ("info", None)),
        "refused_accesses": sum(
            1 for a in data.accesses if a.type == "fail" and a.outcome == "stale"
        ),
        "leases_lost": sum(1 for g in grants if g.end_outcome == "lease-lost" or g.lost),
        "loss_notices": sum(1 for g in grants if g.lost is not None),
        "final_counter": data.final,
        "faults": [f.kind for f in data.faults],
        "faults_injected": sum(1 for f in data.faults if f.type == "ok"),
        "accepted_accesses": sum(1 for a in data.accesses if a.type == "ok"),
        **{f"stale_writes_{kind}": n for kind, n in stale_writes(data).items()},
        "per_worker": dict(sorted(per_worker.items(), key=lambda item: natural_key(item[0]))),
    }


def _run_findings(events: Sequence[Event], data: Extracted) -> list[Finding]:
    """Unknown outcomes, and the notes the run recorded in its history."""
    findings: list[Finding] = []
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
    return findings


def check_history(events: Sequence[Event], params: CheckParams | None = None) -> CheckReport:
    """Check every property of the registry on ``events`` (a merged history, in time order).

    ``params`` default to those of the history's ``run`` ``start`` event
    ([`CheckParams.from_history`][fencedlease_lab.harness.CheckParams.from_history]). Pure: the same
    history gives the same report.
    """
    params = params or CheckParams.from_history(events)
    data = extract(events)
    ctx = Context(events, data, params)
    results: list[PropertyResult] = []
    findings: list[Finding] = []
    extras: dict[str, Any] = {}
    for prop in REGISTRY:
        outcome = prop.check(ctx)
        ctx.outcomes[prop.key] = outcome
        violations = tuple(_with_ops(v, events, data.origin) for v in outcome.violations)
        results.append(
            PropertyResult(prop.key, prop.letter, prop.title, outcome.checked, violations,
                           outcome.note)
        )  # fmt: skip
        findings += outcome.findings
        extras.update(outcome.extras)
    findings += _run_findings(events, data)
    workload = _workload(events, data, results)
    if workload["lost"]:
        extras["workload"] = workload
        findings += [Finding("workload-lost", lost["message"]) for lost in workload["lost"]]
    recoveries = tuple(extras.pop("recoveries", ()))
    valid = not any(r.violations for r in results)
    stats = _stats(data) | {"lanes_lost": len(workload["lost"])}
    return CheckReport(valid, tuple(results), tuple(findings), stats, params, recoveries, extras)


def _workload(
    events: Sequence[Event], data: Extracted, results: Sequence[PropertyResult]
) -> dict[str, Any]:
    """The lanes the run lost ([`lost_lanes`][fencedlease_lab.harness.lanes.lost_lanes]) and the
    properties that, with what remained, checked nothing (``unproved``): every property but the
    transactions one, which only a list-append resource (``*-append``) gives anything to."""
    start = next((e.detail for e in events if e.process == "run" and e.op == "start"), {})
    workers = start.get("workers")
    names = [f"w{i}" for i in range(workers)] if isinstance(workers, int) else []
    lost = lost_lanes(events, data.origin, names)
    appends = str(start.get("resource", "")).endswith("-append")
    unproved = [r.key for r in results if not r.checked and (appends or r.key != "transactions")]
    return {"lost": [lane.to_dict() for lane in lost], "unproved": unproved if lost else []}
