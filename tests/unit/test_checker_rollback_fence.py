"""The counter-rollback finding counts every access refused as stale because of a restart
without persistence, also on a key whose fence was raised by an old holder's access accepted
while the restart was under way (seen in a real run: such keys were left out of the count and
drawn one by one inside the band). The shape on two keys, built by hand."""

from __future__ import annotations

from typing import Any, Literal

from fencedlease_lab.harness.checker import check_history
from fencedlease_lab.harness.history import Event


class _Events:
    """Events by hand: times in seconds after the run's start (mono = wall - 1e9)."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.ids: dict[str, int] = {}
        self.put("run", "start", "info", 0.0, detail={"ttl_ms": 1000, "heartbeat_ms": 250,
                                                      "margin_ms": 1000})  # fmt: skip

    def put(
        self,
        process: str,
        op: str,
        kind: Literal["invoke", "ok", "fail", "info"],
        at: float,
        **fields: Any,
    ) -> None:
        self.events.append(Event(process, op, kind, at, 1e9 + at, **fields))

    def op_id(self, process: str) -> int:
        self.ids[process] = self.ids.get(process, -1) + 1
        return self.ids[process]

    def grant(self, process: str, key: str, token: int, at: float) -> int:
        grant = self.op_id(process)
        self.put(process, "acquire", "invoke", at - 0.01, id=grant, key=key)
        self.put(process, "acquire", "ok", at, id=grant, key=key, token=token, outcome="granted")
        return grant

    def access(
        self, process: str, key: str, grant: int, token: int, span: tuple[float, float], ok: bool
    ) -> None:
        """A read of ``grant`` invoked and completed at ``span``: accepted, or refused as stale."""
        op = self.op_id(process)
        self.put(process, "read", "invoke", span[0], id=op, grant=grant, token=token, key=key)
        self.put(process, "read", "ok" if ok else "fail", span[1], id=op, grant=grant,
                 token=token, key=key, value=0 if ok else None,
                 outcome="accepted" if ok else "stale")  # fmt: skip

    def end(self, process: str, key: str, grant: int, token: int, at: float, how: str) -> None:
        self.put(process, "hold", "ok" if how == "ok" else "fail", at, id=grant, grant=grant,
                 token=token, key=key, outcome=None if how == "ok" else "stale",
                 detail={"body_end": at - 0.002})  # fmt: skip


def _history() -> list[Event]:
    """k1 fenced at 1 before the restart at 2.0 s; k2 fenced at 1 by an access invoked before
    the restart and accepted at 2.05 s, while it was under way. After it, a new grant of token 1
    is refused as stale on each key, and token 2 is accepted on each."""
    h = _Events()
    g = h.grant("w0", "k1", 1, 0.5)
    h.access("w0", "k1", g, 1, (0.6, 0.7), ok=True)
    h.end("w0", "k1", g, 1, 0.8, "ok")
    g = h.grant("w1", "k2", 1, 1.9)
    h.access("w1", "k2", g, 1, (1.95, 2.05), ok=True)  # accepted during the restart
    h.end("w1", "k2", g, 1, 2.06, "ok")
    op = h.op_id("nemesis")
    h.put("nemesis", "fault", "invoke", 2.0, id=op, detail={"fault": "redis-restart-nopersist"})
    h.put("nemesis", "fault", "ok", 2.1, id=op,
          detail={"fault": "redis-restart-nopersist", "counter_before": 1,
                  "counter_after": None})  # fmt: skip
    for process, key, at in (("w2", "k1", 2.3), ("w3", "k2", 2.4)):
        g = h.grant(process, key, 1, at)
        h.access(process, key, g, 1, (at + 0.01, at + 0.02), ok=False)
        h.end(process, key, g, 1, at + 0.03, "stale")
        g = h.grant(process, key, 2, at + 0.5)
        h.access(process, key, g, 2, (at + 0.51, at + 0.52), ok=True)
        h.end(process, key, g, 2, at + 0.53, "ok")
    h.put("run", "stop", "info", 4.0)
    return sorted(h.events, key=lambda e: e.mono)


def test_the_rollback_counts_a_refusal_on_a_key_fenced_during_the_restart() -> None:
    """Both refusals of new grants (token 1 on k1 and on k2) are counted as the rollback's: 2 on
    2 keys, the band to k2's recovery at 2.92 s."""
    report = check_history(_history())
    (finding,) = [f for f in report.findings if f.kind == "counter-rollback"]
    assert "2 accesses refused as stale on 2 keys" in finding.message, finding.message
    assert "to 2.92 s" in finding.message, finding.message
