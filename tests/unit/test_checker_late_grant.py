"""A grant whose reply was seen late (its process paused between Redis' reply and the worker
seeing it) is judged by what it was: made before the next holder's grant (a lower token), with a
deadline already past when seen. Neither the next holder's lease nor the lock is broken by it."""

from __future__ import annotations

from typing import Any

from fencedlease_lab.harness.checker import check_history
from fencedlease_lab.harness.history import Event


def late_grant(*, late_token: int, restart_at: float | None = None) -> list[Event]:
    """w1 is granted key a (``late_token``) at 0.0 and paused for 2 s; w0 is granted it (token 6)
    at 1.5 and holds it until 2.3; w1 sees its grant at 2.0 (deadline 1.0, long past), is told
    of the loss at 2.01 and its read is refused."""
    events: list[Event] = []

    def add(process: str, op: str, kind: Any, at: float, **fields: Any) -> None:
        events.append(Event(process, op, kind, at, 1e9 + at, **fields))

    add("run", "start", "info", 0.0, detail={"ttl_ms": 1000, "heartbeat_ms": 250})
    add("w1", "acquire", "invoke", 0.0, id=0, key="a")
    pause = {"fault": "pause-holder", "target": "w1"}
    add("nemesis", "fault", "invoke", 0.01, id=1, detail=pause)
    add("nemesis", "fault", "ok", 1.99, id=1, detail=pause)
    if restart_at is not None:
        add(
            "nemesis",
            "fault",
            "invoke",
            restart_at,
            id=0,
            detail={"fault": "redis-restart-nopersist"},
        )
        add("nemesis", "fault", "ok", restart_at + 0.05, id=0,
            detail={"fault": "redis-restart-nopersist"})  # fmt: skip
    w0 = {"grant": 0, "key": "a", "token": 6}
    add("w0", "acquire", "invoke", 1.4, id=0, key="a")
    add("w0", "acquire", "ok", 1.5, id=0, key="a", token=6, outcome="granted",
        detail={"deadline": 2.45})  # fmt: skip
    add("w0", "read", "invoke", 1.55, id=1, **w0)
    add("w0", "read", "ok", 1.56, id=1, **w0, value=0, outcome="accepted")
    w1 = {"grant": 0, "key": "a", "token": late_token}
    add("w1", "acquire", "ok", 2.0, id=0, key="a", token=late_token, outcome="granted",
        detail={"deadline": 1.0})  # fmt: skip
    add("w1", "lease-lost", "info", 2.01, **w1, outcome="lease-lost",
        detail={"reason": "ttl_ms passed since the last confirmed acquire or renewal"})  # fmt: skip
    add("w1", "read", "invoke", 2.02, id=1, **w1)
    add("w1", "read", "fail", 2.03, id=1, **w1, outcome="stale")
    add("w1", "hold", "fail", 2.04, id=0, **w1, outcome="stale", detail={"body_end": 2.03})
    add("w0", "write", "invoke", 2.2, id=2, **w0, value=1)
    add("w0", "write", "ok", 2.21, id=2, **w0, value=1, outcome="accepted")
    add("w0", "release", "invoke", 2.25, id=3, **w0)
    add("w0", "release", "ok", 2.26, id=3, **w0, outcome="released")
    add("w0", "hold", "ok", 2.3, id=0, **w0, detail={"body_end": 2.22})
    add("run", "stop", "info", 3.0)
    add("run", "final", "ok", 3.0, key="a", value=1)
    return events


def test_a_grant_seen_late_with_a_lower_token_breaks_nothing() -> None:
    report = check_history(late_grant(late_token=5))
    assert report.valid, report.explain()
    assert report.property("loss-reported").violations == ()
    assert report.property("mutual-exclusion").violations == ()
    assert report.property("loss-reported").checked >= 1


def test_a_later_grant_with_a_higher_token_is_a_rival() -> None:
    """The control: the same history with w1's token above w0's is a takeover during w0's body,
    and w0's normal return a silent success."""
    report = check_history(late_grant(late_token=7))
    (violation,) = report.property("loss-reported").violations
    assert "w0's lease (token 6)" in violation.message
    assert "w1 was granted the key (token 7)" in violation.message


def test_a_lower_token_after_redis_forgot_the_counter_is_a_rival() -> None:
    """A restart without persistence between the grants restarts the counter: a lower token
    is then a later grant, and w0's normal return a silent success."""
    report = check_history(late_grant(late_token=5, restart_at=1.7))
    (violation,) = report.property("loss-reported").violations
    assert "w1 was granted the key (token 5)" in violation.message
