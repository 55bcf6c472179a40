"""The history reassembled: grants, acquire attempts, accesses and faults, each with its key.

[`extract`][fencedlease_lab.harness.checker.extract] pairs every invocation with its completion
(Jepsen's ``invoke`` then ``ok`` / ``fail`` / ``info``) and keeps the history lines (1-based) of
both, so that a violation can name the operations that prove it. Times are monotonic seconds, as in
the history. Pure: no I/O.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from typing import Any

import attrs

from .history import Event

__all__ = ["Access", "Attempt", "Extracted", "Fault", "Grant", "extract", "natural_key"]

_DIGITS = re.compile(r"(\d+)")


def natural_key(name: str | None) -> tuple[tuple[str, int], ...]:
    """A sort key that orders names by their numbers as numbers: ``w2`` before ``w10``,
    ``k2`` before ``k10``; None (a history naming no key) first."""
    if name is None:
        return ()
    parts = _DIGITS.split(name)  # text, digits, text, digits, ..., text
    return tuple(
        (text, int(digits) if digits else -1)
        for text, digits in itertools.zip_longest(parts[::2], parts[1::2], fillvalue="")
    )


@attrs.frozen
class Grant:
    """One acquire that completed ``ok``, and how its hold ended. Times in monotonic seconds.

    ``key``: the key granted (None: the history names none, a one-key run). ``end``: when the
    hold completed (None if it never did); ``end_type`` / ``end_outcome`` its completion;
    ``body_end``: when the critical section's body finished (the lease was still needed until
    then); ``lost``: when the library declared it lost (None: never)."""

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
    key: str | None = None

    @property
    def needed_until(self) -> float | None:
        """The end of the body, else the end of the hold."""
        return self.body_end if self.body_end is not None else self.end


@attrs.frozen
class Access:
    """One read or write of the resource: invoked, completed (``type``) with ``outcome``;
    ``line`` / ``end_line`` the history lines of the invocation and the completion."""

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
    key: str | None = None


@attrs.frozen
class Attempt:
    """One acquire, whatever its outcome: ``completed`` / ``type`` None when it never ended."""

    process: str
    id: int
    key: str | None
    invoked: float
    completed: float | None
    type: str | None
    line: int


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
    """What [`extract`][fencedlease_lab.harness.checker.extract] reassembles from a history.
    ``final``: the run's final counter (the sum over keys when it was read key by key); ``finals``:
    the final value per key (the key None for a final read that names no key) and ``final_lines``
    the history line of each; ``attempts``: every acquire, granted or not."""

    grants: list[Grant]
    accesses: list[Access]
    faults: list[Fault]
    origin: float
    stop: float | None
    final: int | None
    events: int
    finals: dict[str | None, int] = attrs.field(factory=dict)
    attempts: list[Attempt] = attrs.field(factory=list)
    final_lines: dict[str | None, int] = attrs.field(factory=dict)


def extract(events: Sequence[Event]) -> Extracted:
    """Pair invocations with completions and collect grants, attempts, accesses and faults."""
    origin = events[0].mono if events else 0.0
    stop: float | None = None
    finals: dict[str | None, int] = {}
    final_lines: dict[str | None, int] = {}
    grants: dict[tuple[str, int], Grant] = {}
    pending: dict[tuple[str, str, int], tuple[Event, int]] = {}
    accesses: list[Access] = []
    attempts: list[Attempt] = []
    faults: list[Fault] = []
    for line, event in enumerate(events, 1):
        if event.process == "run":
            if event.op == "start":
                origin = event.mono
            elif event.op == "stop":
                stop = event.mono
            elif event.op == "final" and event.type == "ok" and event.value is not None:
                finals[event.key] = event.value
                final_lines[event.key] = line
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
            op_key = event.key if event.key is not None else invoke.key
            attempts.append(
                Attempt(
                    event.process, event.id if event.id is not None else -1, op_key,
                    invoke.mono, event.mono, event.type, invoke_line,
                )
            )  # fmt: skip
            if event.type == "ok" and event.token is not None and event.id is not None:
                grants[(event.process, event.id)] = Grant(
                    event.process, event.id, event.token, invoke.mono, event.mono, line,
                    key=op_key,
                )  # fmt: skip
        elif event.op in ("read", "write"):
            accesses.append(
                Access(
                    event.process, event.op, event.grant, event.token, event.value, invoke.mono,
                    event.mono, event.type, event.outcome, invoke_line, line,
                    event.key if event.key is not None else invoke.key,
                )
            )  # fmt: skip
        elif event.op == "fault":
            detail = {**invoke.detail, **event.detail}
            faults.append(
                Fault(
                    event.id if event.id is not None else -1, str(detail.get("fault")),
                    detail.get("target"), invoke.mono, event.mono, event.type, detail,
                    invoke_line,
                )
            )  # fmt: skip
    for (process, op, op_id), (invoke, line) in pending.items():
        if op == "fault":
            faults.append(
                Fault(
                    op_id, str(invoke.detail.get("fault")), invoke.detail.get("target"),
                    invoke.mono, None, None, dict(invoke.detail), line,
                )
            )  # fmt: skip
        elif op in ("read", "write"):
            accesses.append(
                Access(
                    process, op, invoke.grant, invoke.token, invoke.value, invoke.mono, None,
                    None, None, line, None, invoke.key,
                )
            )  # fmt: skip
        elif op == "acquire":
            attempts.append(Attempt(process, op_id, invoke.key, invoke.mono, None, None, line))
    grant_list = sorted(grants.values(), key=lambda g: g.granted)
    accesses.sort(key=lambda a: a.invoked)
    attempts.sort(key=lambda a: a.invoked)
    faults.sort(key=lambda f: f.start)
    final = sum(finals.values()) if finals else None
    return Extracted(
        grant_list, accesses, faults, origin, stop, final, len(events), finals, attempts,
        final_lines,
    )  # fmt: skip
