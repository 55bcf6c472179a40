"""What the lock-level check reads from a merged history, in one pass: the grants, renewals,
refusals, loss notices, releases, connections and faults (`_Facts`), and each grant's claim
on its key ([`Claim`][fencedlease_lab.harness.mutex.Claim]).

Pure: no I/O, no clock."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Final

import attrs

from ..history import Event

#: The loss reason of a release answered 0.
RELEASE_REFUSED: Final = "the release was refused"


@attrs.frozen
class Claim:
    """One grant's claim on its key, in monotonic seconds.

    ``start``: the grant's reply; ``deadline``: the last confirmed deadline (``exact`` False: only
    a lower bound, the acquire's invocation + ttl, and renewals recorded); ``end``: the claim's
    end, the earliest of the deadline, the release (``ended_by``: ``"deadline"``, ``"release"``,
    ``"body-end"``, ``"loss-notice"``); ``line``: the acquire's ``ok``; ``deadline_line``: the
    event that confirmed ``deadline``; ``end_line``: the event that ended it otherwise.
    """

    process: str
    grant: int
    key: str
    token: int | None
    start: float
    deadline: float
    exact: bool
    end: float
    ended_by: str
    line: int
    deadline_line: int
    end_line: int | None = None

    def describe(self, origin: float = 0.0) -> str:
        bound = "" if self.exact else " at least"
        return (
            f"{self.process}'s lease (token {self.token}) granted at {self.start - origin:.3f} s, "
            f"confirmed{bound} until {self.deadline - origin:.3f} s, claimed until "
            f"{self.end - origin:.3f} s ({self.ended_by})"
        )


@attrs.frozen
class _Grant:
    process: str
    id: int
    key: str
    token: int | None
    invoked: float
    granted: float
    line: int
    deadline: float | None


@attrs.frozen
class _Fault:
    kind: str
    target: str | None
    start: float
    end: float | None
    failed: bool
    line: int
    key: str | None = None
    deleted: float | None = None


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) else None


class _Facts:
    """What the checks need, gathered from the history in one pass."""

    def __init__(self, events: Sequence[Event]) -> None:
        self.grants: dict[tuple[str, int], _Grant] = {}
        self.renewed: dict[tuple[str, int], list[tuple[float, float | None, int]]] = defaultdict(
            list
        )
        self.refused: list[tuple[str, int, float, int]] = []
        self.renew_events = 0
        self.release_sent: dict[tuple[str, int], tuple[float, int]] = {}
        self.body_end: dict[tuple[str, int], tuple[float, int]] = {}
        self.hold_done: set[tuple[str, int]] = set()
        self.lost: dict[tuple[str, int], tuple[float, str, int]] = {}
        self.faults: list[_Fault] = []
        self.connects: dict[str, list[float]] = defaultdict(list)
        acquires: dict[tuple[str, int], tuple[Event, int]] = {}
        fault_starts: dict[int, tuple[Event, int]] = {}
        for line, event in enumerate(events, 1):
            op, kind = event.op, event.type
            if event.process == "nemesis" and op == "fault" and event.id is not None:
                if kind == "invoke":
                    fault_starts[event.id] = (event, line)
                elif event.id in fault_starts:
                    start, start_line = fault_starts.pop(event.id)
                    detail = {**start.detail, **event.detail}
                    self.faults.append(
                        _Fault(
                            str(detail.get("fault")), detail.get("target"), start.mono,
                            event.mono, kind == "fail", start_line, detail.get("key"),
                            _number(detail.get("deleted_mono")),
                        )
                    )  # fmt: skip
                continue
            if op == "connect":
                self.connects[event.process].append(event.mono)
                continue
            if op == "acquire" and event.id is not None:
                ident = (event.process, event.id)
                if kind == "invoke":
                    acquires[ident] = (event, line)
                elif kind == "ok" and ident in acquires:
                    invoke, _ = acquires.pop(ident)
                    deadline = event.detail.get("deadline")
                    self.grants[ident] = _Grant(
                        event.process, event.id, str(event.key or invoke.key or ""),
                        event.token, invoke.mono, event.mono, line,
                        float(deadline) if isinstance(deadline, int | float) else None,
                    )  # fmt: skip
                continue
            grant = event.grant if event.grant is not None else event.id
            if grant is None:
                continue
            ident = (event.process, grant)
            if op == "renew":
                self.renew_events += 1
                if kind == "ok":
                    deadline = event.detail.get("deadline")
                    self.renewed[ident].append(
                        (
                            event.mono,
                            float(deadline) if isinstance(deadline, int | float) else None,
                            line,
                        )
                    )
                elif kind == "fail" and event.outcome == "refused":
                    self.refused.append((event.process, grant, event.mono, line))
            elif op == "release" and kind == "invoke":
                self.release_sent.setdefault(ident, (event.mono, line))
            elif op == "release" and kind == "fail":
                reason = RELEASE_REFUSED
                self.lost.setdefault(ident, (event.mono, reason, line))
            elif op == "lease-lost":
                reason = str(event.detail.get("reason") or event.outcome or "")
                self.lost.setdefault(ident, (event.mono, reason, line))
            elif op == "hold" and kind != "invoke":
                self.hold_done.add(ident)
                body_end = event.detail.get("body_end")
                if isinstance(body_end, int | float):
                    self.body_end[ident] = (float(body_end), line)
                if event.outcome == "lease-lost":
                    self.lost.setdefault(ident, (event.mono, "lease-lost", line))
        for start, start_line in fault_starts.values():
            self.faults.append(
                _Fault(
                    str(start.detail.get("fault")), start.detail.get("target"), start.mono,
                    None, False, start_line,
                )
            )  # fmt: skip


def claims_from_history(events: Sequence[Event], *, ttl_ms: int) -> tuple[list[Claim], int]:
    """Every grant's [`Claim`][fencedlease_lab.harness.mutex.Claim] (ordered by start), and how many
    grants had none (their hold ended with no release time or body end recorded, so the claim's end
    is unknown)."""
    return _claims(_Facts(events), ttl_ms)


def _claims(facts: _Facts, ttl_ms: int) -> tuple[list[Claim], int]:
    claims: list[Claim] = []
    unknown_end = 0
    for ident, grant in facts.grants.items():
        exact = grant.deadline is not None
        deadline = grant.deadline if grant.deadline is not None else grant.invoked + ttl_ms / 1000
        deadline_line = grant.line
        for _, confirmed, line in facts.renewed.get(ident, ()):
            if confirmed is not None and confirmed > deadline:
                deadline, deadline_line = confirmed, line
        end, ended_by, end_line = deadline, "deadline", None
        cuts: list[tuple[float, str, int]] = []
        if ident in facts.release_sent:
            at, line = facts.release_sent[ident]
            cuts.append((at, "release", line))
        elif ident in facts.body_end:
            at, line = facts.body_end[ident]
            cuts.append((at, "body-end", line))
        elif ident in facts.hold_done:
            unknown_end += 1
            continue
        if ident in facts.lost:
            at, _, line = facts.lost[ident]
            cuts.append((at, "loss-notice", line))
        for at, why, line in cuts:
            if at < end:
                end, ended_by, end_line = at, why, line
        claims.append(
            Claim(
                grant.process, grant.id, grant.key, grant.token, grant.granted, deadline, exact,
                max(end, grant.granted), ended_by, grant.line, deadline_line, end_line,
            )
        )  # fmt: skip
    claims.sort(key=lambda c: c.start)
    return claims, unknown_end
