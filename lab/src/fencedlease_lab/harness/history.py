"""The history: every operation and every fault of a run, as JSON lines.

Jepsen's model (Kingsbury, "Jepsen" analyses; Kleppmann 2016 for the lease/fencing case): each
process records an ``invoke`` before it does something and exactly one completion after it:
``ok`` (it happened), ``fail`` (it certainly did not happen) or ``info`` (unknown: it may have
happened). The checker reads nothing but this history.

One line per [`Event`][fencedlease_lab.harness.Event]:

```
{"process": "w1", "op": "write", "type": "ok", "id": 7, "grant": 5, "mono": 1234.5678,
 "wall": 1718000000.123, "key": "check:counter", "token": 12, "outcome": null, "value": 8,
 "detail": {}}
```

``mono`` is `time.monotonic` in seconds: on Linux one clock (``CLOCK_MONOTONIC``) shared
by every process of the machine, so events of different processes can be ordered by it. ``wall``
(seconds since the epoch) is for people only.

Safe across processes by construction: each process (each worker, the nemesis, the run) writes a
file of its own with [`HistoryWriter`][fencedlease_lab.harness.HistoryWriter];
[`merge_histories`][fencedlease_lab.harness.merge_histories] merges them by time at the end. A
writer is safe across the threads of its process (one lock).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import IO, Any, Final, Literal, cast

import attrs

__all__ = [
    "EVENT_TYPES",
    "Event",
    "EventType",
    "HistoryWriter",
    "Operation",
    "merge_histories",
    "read_history",
    "redact_event",
    "write_history",
]

EventType = Literal["invoke", "ok", "fail", "info"]

#: The four event types: an invocation and its three possible completions.
EVENT_TYPES: Final[tuple[EventType, ...]] = ("invoke", "ok", "fail", "info")


@attrs.frozen
class Event:
    """One line of the history.

    ``process``: who (``"w0"``, ``"w1"``... for workers, ``"nemesis"``, ``"run"``). ``op``: what
    (``"acquire"``, ``"read"``, ``"write"``, ``"hold"``, ``"lease-lost"``, ``"fault"``, ...).
    ``type``: ``invoke`` / ``ok`` / ``fail`` / ``info``. ``id``: the operation's number within its
    process, shared by an invocation and its completion. ``grant``: the ``id`` of the acquire
    whose lease this operation ran under. ``mono`` / ``wall``: seconds (module docstring).
    ``token``: the fencing token presented or granted. ``outcome``: a short word for why
    (``"granted"``, ``"stale"``, ``"lease-lost"``, ``"backend-error"``...). ``value``: the counter
    value read or written. ``detail``: anything else (JSON-serialisable).
    """

    process: str
    op: str
    type: EventType
    mono: float
    wall: float
    id: int | None = None
    grant: int | None = None
    key: str | None = None
    token: int | None = None
    outcome: str | None = None
    value: int | None = None
    detail: dict[str, Any] = attrs.field(factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The event as the JSON object of its line."""
        return attrs.asdict(self)

    def to_json(self) -> str:
        """The event as one line of JSON (no newline)."""
        return json.dumps(self.to_dict(), separators=(",", ":"), sort_keys=False, default=str)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Event:
        """Parse one line's object. Raises ``ValueError`` for a missing field or a bad ``type``."""
        try:
            kind = data["type"]
            if kind not in EVENT_TYPES:
                raise ValueError(f"event type must be one of {EVENT_TYPES}, got {kind!r}")
            return cls(
                process=str(data["process"]),
                op=str(data["op"]),
                type=cast(EventType, kind),
                mono=float(data["mono"]),
                wall=float(data["wall"]),
                id=_opt_int(data.get("id")),
                grant=_opt_int(data.get("grant")),
                key=data.get("key"),
                token=_opt_int(data.get("token")),
                outcome=data.get("outcome"),
                value=_opt_int(data.get("value")),
                detail=dict(data.get("detail") or {}),
            )
        except KeyError as exc:
            raise ValueError(f"history event lacks {exc.args[0]!r}") from None


def _opt_int(value: object) -> int | None:
    """An integer field (``id``, ``grant``, ``token``, ``value``) of a line, exactly.

    Python's [`json`][fencedlease_lab.harness.history.json] writes ints as ints and reads them back
    exact at any size (fencing tokens go up to 2**63 - 1). A float is taken only when it is a whole
    number below 2**53, the largest a double holds exactly: ``9.007199254740993e15`` is refused
    rather than rounded.
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"expected an integer, got {value!r}")
    if isinstance(value, float) and not (value.is_integer() and abs(value) < 2**53):
        raise ValueError(f"expected an exact integer, got the float {value!r}")
    return int(value)


class Operation:
    """An invoked operation waiting for its completion; made by
    [`HistoryWriter.invoke`][fencedlease_lab.harness.HistoryWriter.invoke].

    Call exactly one of [`ok`][fencedlease_lab.harness.history.Operation.ok],
    [`fail`][fencedlease_lab.harness.history.Operation.fail],
    [`info`][fencedlease_lab.harness.history.Operation.info]; each returns the event written.
    ``fields`` are the invocation's; a completion repeats them, except those it gives itself.
    """

    __slots__ = ("_writer", "done", "fields", "id", "op")

    def __init__(self, writer: HistoryWriter, op: str, op_id: int, fields: dict[str, Any]) -> None:
        self._writer = writer
        self.op = op
        self.id = op_id
        self.fields = fields
        self.done = False

    def _complete(self, kind: EventType, fields: dict[str, Any]) -> Event:
        if self.done:
            raise RuntimeError(f"operation {self.op} #{self.id} was already completed")
        self.done = True
        merged = {**self.fields, **fields}
        return self._writer.record(self.op, kind, id=self.id, **merged)

    def ok(self, **fields: Any) -> Event:
        """It happened."""
        return self._complete("ok", fields)

    def fail(self, **fields: Any) -> Event:
        """It certainly did not happen."""
        return self._complete("fail", fields)

    def info(self, **fields: Any) -> Event:
        """It may or may not have happened (an error with no way to know)."""
        return self._complete("info", fields)


class HistoryWriter:
    """Appends the events of one ``process`` to ``path``, one JSON line each, flushed at once.

    ``clock_mono`` / ``clock_wall`` return seconds (defaults: `time.monotonic`,
    `time.time`). Thread-safe. Use as a context manager or call
    [`close`][fencedlease_lab.harness.HistoryWriter.close].

    An existing file is continued: a last line cut short (its writer was killed mid-line) is
    cut off, and operation ids go on after the largest one in the file, so a process restarted
    under the same name (``kill-holder``) never reuses an id of its earlier life.
    """

    def __init__(
        self,
        path: str | Path,
        process: str,
        *,
        clock_mono: Any = time.monotonic,
        clock_wall: Any = time.time,
    ) -> None:
        self.path = Path(path)
        self.process = process
        self._mono = clock_mono
        self._wall = clock_wall
        self._lock = threading.Lock()
        self._next_id = _continue_file(self.path)
        self._file: IO[str] | None = self.path.open("a", encoding="utf-8")

    def __enter__(self) -> HistoryWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the file; later records raise ``RuntimeError``. Idempotent."""
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None

    def record(self, op: str, type: EventType, **fields: Any) -> Event:
        """Write one event now (``mono``/``wall`` read under the lock, so a file is in time
        order) and return it. ``fields`` are [`Event`][fencedlease_lab.harness.Event]'s optional
        fields."""
        with self._lock:
            if self._file is None:
                raise RuntimeError(f"history writer for {self.process!r} is closed")
            event = Event(self.process, op, type, self._mono(), self._wall(), **fields)
            self._file.write(event.to_json() + "\n")
            self._file.flush()
            return event

    def invoke(self, op: str, **fields: Any) -> Operation:
        """Record the invocation of ``op`` and return the
        [`Operation`][fencedlease_lab.harness.history.Operation] to complete; the completion repeats
        ``fields`` unless it overrides them."""
        with self._lock:
            op_id = self._next_id
            self._next_id += 1
        self.record(op, "invoke", id=op_id, **fields)
        return Operation(self, op, op_id, fields)


def _continue_file(path: Path) -> int:
    """Cut a partial last line off ``path`` (if it exists) and return the next operation id:
    one more than the largest ``id`` in it, 0 for a new or empty file."""
    if not path.exists():
        return 0
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        data = data[: data.rfind(b"\n") + 1]
        with path.open("r+b") as file:
            file.truncate(len(data))
    ids = [event.id for event in read_history(path) if event.id is not None]
    return max(ids, default=-1) + 1


def read_history(path: str | Path) -> list[Event]:
    """Read a history file, in file order.

    A last line cut short (a process killed while writing) is skipped; any other bad line raises
    ``ValueError`` naming its line number.
    """
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    events: list[Event] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            events.append(Event.from_dict(json.loads(line)))
        except (json.JSONDecodeError, ValueError) as exc:
            if number == len(lines):
                break
            raise ValueError(f"{path}:{number}: {exc}") from exc
    return events


def write_history(path: str | Path, events: Iterable[Event]) -> None:
    """Write ``events`` to ``path`` as JSON lines (replacing the file)."""
    with Path(path).open("w", encoding="utf-8") as file:
        for event in events:
            file.write(event.to_json() + "\n")


def redact_event(event: Event, redact: Callable[[str], str]) -> Event:
    """``event`` with ``redact`` applied to every string in it (``detail`` included, at any
    depth): how a run keeps a URL's password out of its history."""

    def walk(value: Any) -> Any:
        if isinstance(value, str):
            return redact(value)
        if isinstance(value, dict):
            return {walk(k): walk(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [walk(v) for v in value]
        return value

    return Event.from_dict(walk(event.to_dict()))


def merge_histories(
    parts: Sequence[str | Path],
    out: str | Path | None = None,
    *,
    redact: Callable[[str], str] | None = None,
) -> list[Event]:
    """Merge per-process history files by ``mono`` (ties keep each file's order) and, when
    ``out`` is given, write the merged history there. Returns the merged events. ``redact``
    (e.g. [`fencedlease.redact_text`][] bound to a URL) is applied to every string of
    every event first ([`redact_event`][fencedlease_lab.harness.history.redact_event])."""
    keyed: list[tuple[float, int, int, Event]] = []
    for part_index, part in enumerate(parts):
        for line_index, event in enumerate(read_history(part)):
            if redact is not None:
                event = redact_event(event, redact)
            keyed.append((event.mono, part_index, line_index, event))
    keyed.sort(key=lambda item: item[:3])
    events = [item[3] for item in keyed]
    if out is not None:
        write_history(out, events)
    return events
