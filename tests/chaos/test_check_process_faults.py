"""The harness under process faults: one short run per nemesis, the checker's properties held."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from fencedlease_lab.harness.run import CheckResult

pytestmark = pytest.mark.chaos

RunCheck = Callable[..., CheckResult]


def test_pause_holder_old_holder_is_refused_and_told(check_run: RunCheck) -> None:
    """SIGSTOP the holder for 2 x ttl while another worker acquires and writes: the old holder's
    later access is refused and its critical section ends in StaleTokenError or LeaseLostError.

    "Later" is after the rival's grant, which only a stopped (or cut-off) holder allows; not after
    the fault's recorded end, which the nemesis writes after SIGCONT, so that a resumed worker on
    a busy machine may well write first."""
    result = check_run("pause-holder")
    assert result.report.valid, result.report.explain()
    data = result.history()
    (fault,) = data.faults
    assert fault.kind == "pause-holder"
    assert fault.end is not None
    ttl_s = result.config.ttl_ms / 1000
    assert 2 * ttl_s <= fault.end - fault.start < 3 * ttl_s
    victim = next(
        g
        for g in data.grants
        if g.process == fault.target and g.granted < fault.start < (g.end or 0)
    )
    rival = next(g for g in data.grants if g.process != victim.process and g.granted > fault.start)
    assert rival.granted < fault.end  # another worker took over during the pause...
    assert rival.token > victim.token
    late = [
        a for a in data.accesses
        if a.process == victim.process and a.token == victim.token and a.invoked > rival.granted
    ]  # fmt: skip
    assert late, "the paused holder never touched the resource after it woke"
    assert all(a.type == "fail" and a.outcome == "stale" for a in late)  # ...and it was refused
    assert victim.end_type == "fail"
    assert victim.end_outcome in ("stale", "lease-lost")


def test_redis_pause_holder_told_within_ttl_plus_heartbeat(check_run: RunCheck) -> None:
    """SIGSTOP of redis-server for 2 x ttl: the holder learns of the loss within ttl + one
    heartbeat, and a lease is granted again after Redis resumes."""
    result = check_run("redis-pause")
    assert result.report.valid, result.report.explain()
    data = result.history()
    (fault,) = data.faults
    holders = [g for g in data.grants if g.granted < fault.start < (g.needed_until or 0)]
    for grant in holders:
        if (grant.needed_until or 0) > fault.start + (
            result.config.ttl_ms + result.config.heartbeat
        ) / 1000:
            assert grant.lost is not None
            assert (
                grant.lost - fault.start <= (result.config.ttl_ms + result.config.heartbeat) / 1000
            )
    assert result.report.property("recovery").checked == 1


def test_redis_restart_with_aof_keeps_the_counter(check_run: RunCheck) -> None:
    """kill -9 and a restart replaying the AOF (appendfsync always): the fencing counter survives,
    so tokens keep increasing and no rollback is reported."""
    result = check_run("redis-restart-aof")
    assert result.report.valid, result.report.explain()
    (fault,) = result.history().faults
    assert fault.detail["persist"] is True
    assert fault.detail["counter_before"] is not None
    assert fault.detail["counter_after"] >= fault.detail["counter_before"]
    assert not [f for f in result.report.findings if f.kind == "counter-rollback"]
    grants = result.history().grants
    assert [g.token for g in grants] == sorted(g.token for g in grants)


def test_redis_restart_without_persistence_is_safe_but_stuck(check_run: RunCheck) -> None:
    """Restart without persistence while a lease is held: the counter starts again low, the
    resource refuses the new lower tokens (no violation), and the report says so with the remedy."""
    result = check_run("redis-restart-nopersist", duration_s=9.0, lead_s=4.0)
    assert result.report.valid, result.report.explain()
    data = result.history()
    (fault,) = data.faults
    assert fault.detail["holder"] is not None  # restarted while a lease was held
    before = [g.token for g in data.grants if g.granted < fault.start]
    # Granted once the restart began (a fast restart re-issues low tokens before the fault's end).
    after = [g.token for g in data.grants if g.granted > fault.start]
    assert after
    assert min(after) < max(before)  # the counter started again low
    refused = [
        a for a in data.accesses
        if a.invoked > fault.start and a.type == "fail" and a.outcome == "stale"
    ]  # fmt: skip
    assert refused
    assert all((a.token or 0) <= max(before) for a in refused)
    (finding,) = [f for f in result.report.findings if f.kind == "counter-rollback"]
    assert "accesses refused as stale on" in finding.message
    assert finding.remedy is not None
    assert "appendfsync always" in finding.remedy
    assert 'fencing="clock"' in finding.remedy


def test_client_kill_holder_reconnects_and_keeps_its_lease(check_run: RunCheck) -> None:
    """CLIENT KILL of the holder's connections during a long body: it reconnects, its next
    renewal (which checks the owner token) succeeds, and the critical section ends normally."""
    result = check_run("client-kill")
    assert result.report.valid, result.report.explain()
    data = result.history()
    (fault,) = data.faults
    assert fault.detail["killed"] >= 1
    assert fault.detail["reconnected"] is True
    assert fault.detail["still_held"] is True
    victim = next(
        g
        for g in data.grants
        if g.process == fault.target and g.granted < fault.start < (g.end or 0)
    )
    assert victim.end_type == "ok"
    assert victim.lost is None


def test_script_flush_is_survived(check_run: RunCheck) -> None:
    """SCRIPT FLUSH: every script is loaded again on NOSCRIPT; no operation fails for it."""
    result = check_run("script-flush")
    assert result.report.valid, result.report.explain()
    data = result.history()
    (fault,) = data.faults
    after = [g for g in data.grants if g.granted > (fault.end or 0)]
    assert after
    failed = [g for g in data.grants if g.end is not None and g.end_type != "ok"]
    assert failed == [], result.history_path.read_text()[-6000:]
    assert result.report.stats["leases_lost"] == 0
