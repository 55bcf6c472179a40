"""The check's lease events: [`Recorder`][fencedlease_lab.harness.recorder.Recorder], a manager's
``on_event`` hook that writes what the library told a worker about its leases into the worker's
history (read by [`mutex`][fencedlease_lab.harness.mutex])."""

from __future__ import annotations

import threading
from contextvars import ContextVar
from typing import Any

from fencedlease import LeaseEvent

from .history import HistoryWriter, Operation

__all__ = ["Recorder"]

#: The acquire operation the current thread or task is waiting for (see :class:`Recorder`).
_acquiring: ContextVar[Operation | None] = ContextVar("fencedlease_check_acquiring", default=None)


class Recorder:
    """A manager's ``on_event`` hook that writes every [`LeaseEvent`][fencedlease.LeaseEvent] into
    the history:

    - ``acquire``: completes the acquire operation of the thread or task that is acquiring
      ([`expect`][fencedlease_lab.harness.recorder.Recorder.expect]): ``ok`` (``token``,
      ``detail.deadline``: the confirmed deadline), ``fail`` (``not-acquired``) or ``info`` (an
      error);
    - ``renew``: ``ok`` with ``detail.deadline`` (confirmed), ``fail`` with outcome ``refused``
      (a 0 reply; ``info`` ``refused-while-releasing`` once the release was sent, since the
      release's reply decides then), ``info`` (an error, or a late confirmation);
    - ``release``: an ``invoke`` when it is sent and its completion (``ok`` released, ``fail``
      refused, ``info`` error);
    - ``lost``: a ``lease-lost`` notice with ``detail.reason``.

    Renewals, releases and losses carry ``grant``: the id of the acquire that made the lease
    (found by the lease's owner fingerprint, never the owner token).
    """

    def __init__(self, writer: HistoryWriter) -> None:
        self.writer = writer
        self._lock = threading.Lock()
        self._grants: dict[str, int] = {}
        self._releases: dict[str, Operation] = {}

    def expect(self, operation: Operation) -> None:
        """Route the next acquire event of this thread or task to ``operation``."""
        _acquiring.set(operation)

    def grant_of(self, fingerprint: str | None) -> int | None:
        with self._lock:
            return None if fingerprint is None else self._grants.get(fingerprint)

    def __call__(self, event: LeaseEvent) -> None:
        kind, status, fp = event.kind, event.status, event.owner_fingerprint
        fields: dict[str, Any] = {"key": event.key, "token": event.fencing_token}
        if kind == "acquire":
            operation = _acquiring.get()
            if operation is None or operation.done:
                return
            if status == "granted" and fp is not None:
                with self._lock:
                    self._grants[fp] = operation.id
                operation.ok(
                    **fields, outcome="granted", detail={"deadline": event.deadline_monotonic}
                )
            elif status == "not-granted":
                operation.fail(outcome="not-acquired")
            else:
                operation.info(outcome="error", detail={"error": event.reason})
            return
        grant = self.grant_of(fp)
        if grant is None or fp is None:
            return
        fields["grant"] = grant
        writer = self.writer
        if kind == "renew":
            if status == "confirmed":
                writer.record(
                    "renew", "ok", **fields, detail={"deadline": event.deadline_monotonic}
                )
            elif status == "refused":
                with self._lock:
                    releasing = fp in self._releases
                if releasing:
                    writer.record("renew", "info", **fields, outcome="refused-while-releasing")
                else:
                    writer.record("renew", "fail", **fields, outcome="refused")
            else:
                writer.record("renew", "info", **fields, outcome=status,
                              detail={"error": event.reason})  # fmt: skip
        elif kind == "release" and status == "sent":
            operation = writer.invoke("release", **fields)
            with self._lock:
                self._releases[fp] = operation
        elif kind == "release":
            with self._lock:
                operation = self._releases.pop(fp, None)
                if status == "released":  # no event follows (a released lease is never lost)
                    self._grants.pop(fp, None)
            if operation is None:
                return
            if status == "released":
                operation.ok(outcome="released")
            elif status == "refused":
                operation.fail(outcome="refused")
            else:
                operation.info(outcome="backend-error", detail={"error": event.reason})
        elif kind == "lost":
            writer.record(
                "lease-lost", "info", **fields, outcome="lease-lost",
                detail={"reason": event.reason},
            )  # fmt: skip
