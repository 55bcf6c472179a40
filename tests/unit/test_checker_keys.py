"""The checker on a history of several lease keys: each key's tokens and counter are judged on
their own, a violation names its key and points at the whole history's lines."""

from __future__ import annotations

from typing import Any

import attrs

from fencedlease_lab.harness.checker import check_history
from fencedlease_lab.harness.history import Event


class Keyed:
    """A hand-made history whose worker events carry their lease key."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.ids: dict[str, int] = {}
        self.add("run", "start", "info", 0.0, detail={"ttl_ms": 1000, "heartbeat_ms": 250})

    def add(self, process: str, op: str, kind: Any, at: float, **fields: Any) -> None:
        self.events.append(Event(process, op, kind, at, 1e9 + at, **fields))

    def op(self, process: str) -> int:
        self.ids[process] = self.ids.get(process, -1) + 1
        return self.ids[process]

    def cycle(self, process: str, key: str, token: int, at: float, read: int) -> None:
        """Acquire at ``at``, read ``read``, write ``read + 1`` (acknowledged), release."""
        grant = self.op(process)
        common = {"grant": grant, "key": key, "token": token}
        self.add(process, "acquire", "invoke", at, id=grant, key=key)
        self.add(process, "acquire", "ok", at + 0.01, id=grant, key=key, token=token,
                 outcome="granted", detail={"deadline": at + 1.0})  # fmt: skip
        for n, (name, value) in enumerate((("read", read), ("write", read + 1))):
            op = self.op(process)
            t = at + 0.02 + 0.02 * n
            self.add(process, name, "invoke", t, id=op, **common, value=None if n == 0 else value)
            self.add(process, name, "ok", t + 0.01, id=op, **common, value=value,
                     outcome="accepted")  # fmt: skip
        release = self.op(process)
        self.add(process, "release", "invoke", at + 0.08, id=release, **common)
        self.add(process, "release", "ok", at + 0.09, id=release, **common, outcome="released")
        self.add(process, "hold", "ok", at + 0.09, id=grant, **common,
                 detail={"body_end": at + 0.07})  # fmt: skip

    def finals(self, at: float, **values: int) -> None:
        self.add("run", "stop", "info", at)
        for key, value in values.items():
            self.add("run", "final", "ok", at, key=key, value=value)


def two_keys() -> Keyed:
    """Key a's token 5 is accepted before key b's first (token 1): fine, one counter each."""
    h = Keyed()
    h.cycle("w0", "a", 5, 0.0, read=0)
    h.cycle("w1", "b", 1, 0.2, read=0)
    h.cycle("w0", "b", 2, 0.4, read=1)
    return h


def test_each_key_is_judged_on_its_own() -> None:
    h = two_keys()
    h.finals(1.0, a=1, b=2)
    report = check_history(h.events)
    assert report.valid, report.explain()
    assert report.property("accepted-tokens-monotonic").checked == 6
    assert report.property("grant-tokens").checked == 3
    assert report.stats["final_counter"] == 3  # the sum of the keys' counters


def test_a_violation_names_its_key_and_the_whole_historys_lines() -> None:
    h = two_keys()
    h.cycle("w1", "b", 2, 0.6, read=2)  # token 2 of key b granted twice
    h.finals(1.0, a=1, b=3)
    report = check_history(h.events)
    (violation,) = report.property("grant-tokens").violations
    assert "'b'" in violation.message
    assert violation.lines and {h.events[n - 1].key for n in violation.lines} == {"b"}
    assert {h.events[n - 1].token for n in violation.lines} == {2}
    assert report.property("accepted-tokens-monotonic").violations == ()
    assert report.property("no-lost-update").violations == ()


def test_without_keys_the_same_tokens_are_one_counter() -> None:
    """The control: drop the keys and key b's token 1 after key a's 5 is a step back."""
    h = two_keys()
    h.finals(1.0)
    h.add("run", "final", "ok", 1.0, value=3)
    flat = [attrs.evolve(e, key=None) for e in h.events]
    report = check_history(flat)
    assert len(report.property("accepted-tokens-monotonic").violations) >= 1
