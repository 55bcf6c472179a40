"""What every property shares: the parameters, the verdict types, and the context a check reads.

A property is a `Property`: a key, a letter, a title and a ``check`` that reads a
`Context` and returns an `Outcome` (cases checked, violations, a note, findings,
extra report fields). Pure: no I/O.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, Literal

import attrs

from ..extract import Access, Extracted, Fault, Grant
from ..history import Event

__all__ = [
    "ROLLBACK_FAULTS",
    "CheckParams",
    "Context",
    "Finding",
    "OpRef",
    "Outcome",
    "Property",
    "PropertyResult",
    "Violation",
]

#: Faults that roll the fencing counter back.
ROLLBACK_FAULTS: Final = frozenset({"redis-restart-nopersist"})


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
class OpRef:
    """One history event a violation rests on: its ``line`` (1-based), who (``process``), what
    (``op``, ``type``, the operation's ``id``), on which ``key`` with which ``token``, and when
    (``at_s``: seconds since the run started)."""

    line: int
    process: str
    op: str
    type: str
    id: int | None
    key: str | None
    token: int | None
    at_s: float

    @classmethod
    def of(cls, events: Sequence[Event], line: int, origin: float) -> OpRef:
        """The event at ``line`` of ``events``."""
        event = events[line - 1]
        return cls(
            line, event.process, event.op, event.type, event.id, event.key, event.token,
            round(event.mono - origin, 3),
        )  # fmt: skip

    def describe(self) -> str:
        """``line 12: w1 write ok #7 key 'k3' token 5 at 1.234 s``."""
        ident = f" #{self.id}" if self.id is not None else ""
        key = f" key {self.key!r}" if self.key is not None else ""
        token = f" token {self.token}" if self.token is not None else ""
        return (
            f"line {self.line}: {self.process} {self.op} {self.type}{ident}{key}{token} "
            f"at {self.at_s:.3f} s"
        )

    def to_dict(self) -> dict[str, Any]:
        return attrs.asdict(self)


@attrs.frozen
class Violation:
    """One broken promise: ``property`` (a key of the registry), a ``message`` explaining it in
    words, ``at`` (seconds since the run started), the history ``lines`` (1-based) that show it,
    the ``key`` it broke on (None: not one key, or a one-key history naming none) and ``ops``,
    the events of those lines (filled in by the checker)."""

    property: str
    message: str
    at: float | None = None
    lines: tuple[int, ...] = ()
    key: str | None = None
    ops: tuple[OpRef, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "property": self.property,
            "message": self.message,
            "at_s": None if self.at is None else round(self.at, 3),
            "lines": list(self.lines),
            "key": self.key,
            "ops": [op.to_dict() for op in self.ops],
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
class Outcome:
    """What a check returns: ``checked`` cases, ``violations``, a ``note``, ``findings`` for the
    report, and ``extras``: fields of the report of its own (e.g. ``recoveries``)."""

    checked: int
    violations: Sequence[Violation] = ()
    note: str | None = None
    findings: Sequence[Finding] = ()
    extras: Mapping[str, Any] = attrs.field(factory=dict)


@attrs.frozen
class Property:
    """One property: its ``key`` (in ``report.json``), ``letter``, ``title`` and ``check``."""

    key: str
    letter: str
    title: str
    check: Callable[[Context], Outcome]


class Context:
    """What a check reads: the ``events``, their reassembly ``data``, the ``params``,
    ``outcomes`` (by key) of the properties run before it, and helpers for times and keys."""

    def __init__(self, events: Sequence[Event], data: Extracted, params: CheckParams) -> None:
        self.events = events
        self.data = data
        self.params = params
        self.rollbacks = [f for f in data.faults if f.kind in ROLLBACK_FAULTS]
        self.outcomes: dict[str, Outcome] = {}

    def t(self, mono: float | None) -> str:
        """``1.23 s`` after the run's start, or ``never``."""
        return "never" if mono is None else f"{mono - self.data.origin:.2f} s"

    def rel(self, mono: float | None) -> float | None:
        """Seconds since the run's start."""
        return None if mono is None else mono - self.data.origin

    @staticmethod
    def on(key: str | None) -> str:
        """A message's prefix naming ``key`` (empty for a history that names none)."""
        return "" if key is None else f"key {key!r}: "

    def rolled_back_between(self, earlier: float, later: float) -> Fault | None:
        """A counter-rolling fault that may have happened between two instants."""
        for fault in self.rollbacks:
            end = fault.end if fault.end is not None else float("inf")
            if fault.start < later and end > earlier:
                return fault
        return None

    @functools.cached_property
    def grants_by_key(self) -> dict[str | None, list[Grant]]:
        """The grants of each key, in order of grant."""
        out: dict[str | None, list[Grant]] = defaultdict(list)
        for grant in self.data.grants:
            out[grant.key].append(grant)
        return dict(out)

    @functools.cached_property
    def accesses_by_key(self) -> dict[str | None, list[Access]]:
        """The accesses of each key, in order of invocation."""
        out: dict[str | None, list[Access]] = defaultdict(list)
        for access in self.data.accesses:
            out[access.key].append(access)
        return dict(out)

    def violation(
        self, prop: str, message: str, at: float | None, lines: Sequence[int], key: str | None
    ) -> Violation:
        """A violation of ``prop`` on ``key``, at monotonic ``at``, shown by ``lines``."""
        return Violation(prop, message, self.rel(at), tuple(lines), key)
