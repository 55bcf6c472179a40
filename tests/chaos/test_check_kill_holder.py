"""The ``kill-holder`` nemesis: kill -9 of the holder in its critical section, a fresh worker in
its place; the key is free at its TTL, the next grant has a larger token, and the dead worker's
history ends cleanly."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from fencedlease_lab.harness.history import read_history
from fencedlease_lab.harness.run import CheckResult

from .conftest import the_fault, victim_of

pytestmark = pytest.mark.chaos

RunCheck = Callable[..., CheckResult]


def test_killed_holder_lease_expires_at_its_ttl_and_a_fresh_worker_goes_on(
    check_run: RunCheck,
) -> None:
    result = check_run("kill-holder", duration_s=8.0)
    data, fault = the_fault(result, "kill-holder")
    assert fault.detail["phase"] == "body"  # killed inside its critical section
    ttl_ms = result.config.ttl_ms
    victim = victim_of(data, fault)
    assert fault.detail["holds"] == [victim.token]
    # Asleep in its body: no access was under way (each lane's own record of its life is open
    # until the lane ends, so the kill closes it too).
    assert {op for op in fault.detail["unfinished"]} <= {"lane"}

    # Its history ends cleanly: the lease it held is closed as unknown at the kill.
    assert victim.end_type == "info"
    assert victim.end_outcome == "killed"
    assert victim.body_end is not None
    assert fault.start <= victim.body_end <= (fault.end or 0.0)
    events = read_history(result.history_path)
    mine = [e for e in events if e.process == victim.process]
    opened = {(e.op, e.id) for e in mine if e.type == "invoke"}
    closed = {(e.op, e.id) for e in mine if e.type != "invoke"}
    before_restart = {(e.op, e.id) for e in mine if e.type == "invoke" and e.mono < fault.start}
    assert before_restart <= closed, sorted(before_restart - closed)

    # The key stayed taken until its TTL ran out, then went to a larger token.
    pttl_ms = fault.detail["pttl_at_kill_ms"]
    assert 0 < pttl_ms <= ttl_ms
    owned_ms = fault.detail["owned_after_kill_ms"]
    assert owned_ms is not None
    # The key cannot outlive the TTL it had when it was read (rounding to the millisecond aside).
    assert owned_ms <= fault.detail["pttl_read_after_ms"] + pttl_ms + 2
    later = [g for g in data.grants if g.granted > fault.start]
    first = min(later, key=lambda g: g.granted)
    assert first.granted - fault.start >= owned_ms / 1000  # nobody got it before it expired
    assert first.granted - fault.start <= (ttl_ms + result.config.margin_ms) / 1000
    assert first.token > victim.token
    assert result.report.property("recovery").checked == 1

    # A fresh process took the dead one's place, with ids its earlier life never used.
    assert fault.detail["restarted_after_ms"] >= ttl_ms / 2
    reborn = [e for e in mine if e.mono > fault.start + fault.detail["restarted_after_ms"] / 1000]
    assert any(e.op == "acquire" for e in reborn), "the fresh worker did nothing"
    old_ids = {e.id for e in mine if e.mono < fault.start and e.id is not None}
    assert all(e.id not in old_ids for e in reborn if e.id is not None)
    assert opened <= closed | {(e.op, e.id) for e in reborn}
