"""The lock-level model check: each key's history, as its holders saw it, against a fenced mutex
(an acquire only when the key is free, with a greater token; a release only by the owner)."""

from __future__ import annotations

from typing import Any

from fencedlease_lab.harness.checker import check_history
from fencedlease_lab.harness.history import Event
from fencedlease_lab.harness.mutex import LockOp, check_lock_model, lock_step

TTL_MS = 1000


class _History:
    """Events of one key, written in order; times in seconds."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self._ids: dict[str, int] = {}

    def add(self, process: str, op: str, kind: str, at: float, **fields: Any) -> None:
        self.events.append(Event(process, op, kind, at, 1e9 + at, **fields))  # type: ignore[arg-type]

    def acquire(
        self, who: str, invoked: float, done: float | None, token: int | None, kind: str = "ok"
    ) -> int:
        grant = self._ids[who] = self._ids.get(who, 0) + 1
        self.add(who, "acquire", "invoke", invoked, id=grant, key="k")
        if done is not None:
            detail = {"deadline": done + TTL_MS / 1000} if kind == "ok" else {}
            self.add(who, "acquire", kind, done, id=grant, key="k", token=token, detail=detail)
        return grant

    def release(self, who: str, grant: int, sent: float, done: float, kind: str = "ok") -> None:
        self.add(who, "release", "invoke", sent, grant=grant, key="k")
        self.add(who, "release", kind, done, grant=grant, key="k")

    def fault(self, kind: str, start: float, end: float, **detail: Any) -> None:
        self.add("nemesis", "fault", "invoke", start, id=len(self.events), detail={"fault": kind})
        self.add("nemesis", "fault", "ok", end, id=len(self.events) - 1, detail=detail)

    def check(self) -> list[str]:
        events = sorted(self.events, key=lambda e: e.mono)
        return [
            failure.culprit.describe()
            for failure in check_lock_model(events, ttl_ms=TTL_MS).failures
        ]


def test_handed_on_and_expired_leases_are_a_fenced_mutex() -> None:
    """Releases by their owners, an expiry after a claim's end and growing tokens pass."""
    h = _History()
    a = h.acquire("w0", 0.0, 0.01, 1)
    h.release("w0", a, 0.5, 0.52)
    h.acquire("w1", 0.51, 0.53, 2)  # granted once the release ran, before its reply came
    h.acquire("w2", 0.6, 1.6, 3)  # w1's claim ended at 1.53 (deadline): it expired first
    assert h.check() == []


def test_an_acquire_while_the_holder_still_claims_is_caught() -> None:
    """A grant while the earlier holder's confirmed deadline is still ahead fits no order."""
    h = _History()
    h.acquire("w0", 0.0, 0.01, 1)
    h.acquire("w1", 0.2, 0.3, 2)
    assert h.check() == ["w1's acquire (token 2) [0.200 s .. 0.300 s]"]


def test_a_release_by_a_holder_whose_lease_expired_is_caught() -> None:
    """A release answered ok after the key expired and went to another is not the owner's."""
    h = _History()
    a = h.acquire("w0", 0.0, 0.01, 1)
    h.acquire("w1", 1.2, 1.21, 2)
    h.release("w0", a, 1.5, 1.51)
    assert h.check() == ["w0's release [1.500 s .. 1.510 s]"]


def test_a_token_not_above_every_earlier_one_is_caught() -> None:
    """An acquire whose token is not greater than one granted before fits no order."""
    h = _History()
    a = h.acquire("w0", 0.0, 0.01, 5)
    h.release("w0", a, 0.1, 0.11)
    h.acquire("w1", 0.2, 0.21, 5)
    assert h.check() == ["w1's acquire (token 5) [0.200 s .. 0.210 s]"]


def test_a_timed_out_acquire_may_or_may_not_have_taken_the_key() -> None:
    """An acquire of unknown outcome is left out when a later grant needs the key free, and
    taken when the owner-aware release needs it."""
    h = _History()
    h.acquire("w0", 0.0, 0.5, None, kind="info")
    h.acquire("w1", 0.6, 0.61, 1)
    assert h.check() == []
    h = _History()
    unknown = h.acquire("w0", 0.0, 0.5, None, kind="info")
    h.release("w0", unknown, 0.7, 0.71)
    assert h.check() == []


def test_an_evict_frees_the_key_and_an_emptying_fault_starts_over() -> None:
    """The nemesis' delete ends the holder's ownership; a restart without persistence forgets
    every token, so a smaller one after it is no violation."""
    h = _History()
    h.acquire("w0", 0.0, 0.01, 7)
    h.fault("evict", 0.2, 0.21, key="k", deleted_mono=0.205)
    h.acquire("w1", 0.3, 0.31, 8)
    h.fault("redis-restart-nopersist", 0.4, 0.6)
    h.acquire("w2", 2.0, 2.01, 1)
    assert h.check() == []


def test_the_model_steps_as_the_fenced_mutex() -> None:
    """Jepsen's FencedMutex: acquire only when free and above the fence (an unknown token keeps
    the fence), release only by the owner, an expiry frees only its own holder's key."""
    op = LockOp("acquire", ("w0", 1), "k", 3, 0.0, 1.0, 1)
    assert lock_step((None, 2), op) == (("w0", 1), 3)
    assert lock_step((None, 3), op) is None
    assert lock_step((("w1", 1), 2), op) is None
    unknown = LockOp("acquire", ("w0", 1), "k", None, 0.0, None, 1)
    assert lock_step((None, 9), unknown) == (("w0", 1), 9)
    release = LockOp("release", ("w0", 1), "k", None, 0.0, 1.0, 1)
    assert lock_step((("w0", 1), 3), release) == (None, 3)
    assert lock_step((("w1", 1), 3), release) is None
    expire = LockOp("expire", ("w0", 1), "k", None, 0.0, None, 1)
    assert lock_step((("w1", 1), 3), expire) == (("w1", 1), 3)
    assert lock_step((("w0", 1), 3), expire) == (None, 3)


def test_property_f_reports_the_lock_model() -> None:
    """Property f carries a lock-model violation for a release by a non-owner."""
    h = _History()
    a = h.acquire("w0", 0.0, 0.01, 1)
    h.acquire("w1", 1.2, 1.21, 2)
    h.release("w0", a, 1.5, 1.51)
    h.add("run", "start", "info", -1.0, detail={"ttl_ms": TTL_MS, "heartbeat_ms": 250})
    events = sorted(h.events, key=lambda e: e.mono)
    found = [v for p in check_history(events).properties if p.letter == "f" for v in p.violations]
    assert [v.message.split(":")[0] for v in found] == ["[lock-model] key 'k'"]
