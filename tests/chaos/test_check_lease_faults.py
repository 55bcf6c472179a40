"""Faults on the lease itself: ``evict`` deletes the holder's key right after a renewal of it,
and the holder learns of it from its next renewal's 0 reply; ``slow-cut`` delays the holder's
replies until a renewal came back late, then cuts it off, and the holder's deadline (counted from
the send) ends no later than the key in Redis; ``slow-grant`` does the same to a grant: its
reply comes late, its requests are cut before its first renewal, and the holder's deadline
(counted from the acquire's send) ends no later than the key; ``slow-handoff`` hands a queued worker
the key by a release whose message comes late, then cuts the worker off, and its deadline
(counted from its queueing send) ends before the key, whose TTL runs from the release."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from fencedlease_lab.harness.extract import Grant
from fencedlease_lab.harness.history import Event, read_history
from fencedlease_lab.harness.run import CheckResult

from .conftest import the_fault, victim_of

pytestmark = pytest.mark.chaos

RunCheck = Callable[..., CheckResult]


def grant_event(events: list[Event], grant: Grant) -> Event:
    """The ``acquire`` ``ok`` event of ``grant`` (exactly one)."""
    (event,) = [
        e for e in events
        if e.op == "acquire" and e.type == "ok" and e.process == grant.process and e.id == grant.id
    ]  # fmt: skip
    return event


def test_evict_is_heard_at_the_next_renewal(check_run: RunCheck) -> None:
    result = check_run("evict")
    data, fault = the_fault(result, "evict")
    assert fault.detail["deleted"] is True
    assert fault.detail["after_renewal"] is True
    victim = victim_of(data, fault)
    assert victim.token == fault.detail["token"]
    assert victim.key == fault.detail["key"]
    deleted = fault.detail["deleted_mono"]
    refused = [
        e for e in read_history(result.history_path)
        if e.op == "renew" and e.type == "fail" and e.grant == victim.id
        and e.process == victim.process
    ]  # fmt: skip
    assert len(refused) == 1 and refused[0].outcome == "refused"
    assert refused[0].mono > deleted
    # Told at that 0 reply, within one heartbeat (plus a reply's time) of the DEL.
    assert victim.lost is not None
    assert refused[0].mono <= victim.lost <= deleted + result.config.heartbeat / 1000 + 0.25
    assert victim.end_type == "fail"
    assert victim.end_outcome in ("stale", "lease-lost")
    mutex = result.report.property("mutual-exclusion")
    assert mutex.violations == ()


def test_slow_cut_deadline_ends_before_the_key(check_run: RunCheck) -> None:
    result = check_run("slow-cut")
    data, fault = the_fault(result, "slow-cut")
    assert fault.detail["renewed_late"] is True
    assert fault.detail["delay_ms"] == result.config.ttl_ms // 3
    victim = victim_of(data, fault)
    assert victim.token == fault.detail["token"]
    late = [
        e for e in read_history(result.history_path)
        if e.op == "renew" and e.type == "ok" and e.grant == victim.id
        and e.process == victim.process and e.mono > fault.start
    ]  # fmt: skip
    assert late, "no renewal of the victim was confirmed during the delay"
    cut = fault.start + fault.detail["cut_at_ms"] / 1000  # the requests cut
    assert victim.lost is not None
    # Lost at its deadline, a ttl after the last renewal sent before the cut.
    assert victim.lost - cut <= result.config.ttl_ms / 1000 + 0.25
    assert victim.end_type == "fail"
    assert result.report.property("mutual-exclusion").violations == ()


def test_slow_grant_deadline_counts_from_the_acquire_sent(check_run: RunCheck) -> None:
    # Many keys: the nemesis finds one that is free with nobody queued for it.
    result = check_run("slow-grant", keys=8, body_ms=20)
    data, fault = the_fault(result, "slow-grant")
    assert fault.detail["granted"] is True
    delay_s = result.config.ttl_ms // 3 / 1000
    ttl_s = result.config.ttl_ms / 1000
    assert fault.detail["delay_ms"] == result.config.ttl_ms // 3
    (victim,) = [
        g for g in data.grants
        if g.process == fault.target and g.token == fault.detail["token"]
        and g.key == fault.detail["key"]
    ]  # fmt: skip
    assert victim.granted - victim.invoked >= delay_s  # its grant's reply came late
    cut = fault.start + fault.detail["cut_at_ms"] / 1000
    assert cut < victim.granted  # cut when Redis ran the acquire, before the reply came
    events = read_history(result.history_path)
    deadline = grant_event(events, victim).detail["deadline"]
    # Counted from the send: at least the delay before the reply's time plus the ttl.
    assert deadline <= victim.granted - delay_s + ttl_s
    confirmed = [
        e for e in events
        if e.op == "renew" and e.type == "ok" and e.process == victim.process
        and e.grant == victim.id
    ]  # fmt: skip
    assert confirmed == []  # the cut fell before its first renewal
    assert victim.lost is not None
    assert deadline <= victim.lost <= deadline + 0.25  # lost at the confirmed deadline
    assert victim.end_type == "fail"
    after = [g for g in data.grants if g.key == victim.key and g.token > victim.token]
    assert after and min(g.granted for g in after) >= cut  # the key went on after it expired
    assert result.report.property("mutual-exclusion").violations == ()


def test_slow_handoff_deadline_counts_from_the_queueing_send(check_run: RunCheck) -> None:
    # Many keys: the nemesis finds one that is free with nobody queued for it.
    result = check_run("slow-handoff", keys=8, body_ms=20)
    data, fault = the_fault(result, "slow-handoff")
    detail = fault.detail
    assert (detail["queued"], detail["direct"], detail["handed"]) == (True, True, True)
    assert detail["delay_ms"] == result.config.ttl_ms // 3
    ttl_s, delay_s = result.config.ttl_ms / 1000, detail["delay_ms"] / 1000
    released = fault.start + detail["released_ms"] / 1000
    (victim,) = [
        g for g in data.grants
        if g.process == fault.target and g.token == detail["token"] and g.key == detail["key"]
    ]  # fmt: skip
    assert victim.invoked < released  # it queued before the release...
    assert victim.granted >= released + delay_s  # ...and took the grant from the late message
    events = read_history(result.history_path)
    granted = grant_event(events, victim)
    deadline = granted.detail["deadline"]
    # Counted from the queueing send (after the invoke, before the release): the key, whose TTL
    # Redis counts from the release, outlives it; counted from the message it would not.
    assert victim.invoked + ttl_s <= deadline <= released + ttl_s
    renewed = [
        e for e in events
        if e.op == "renew" and e.type == "ok" and e.process == victim.process
        and e.grant == victim.id
    ]  # fmt: skip
    assert renewed == []  # its requests were cut before its first renewal
    assert victim.lost is not None
    assert deadline <= victim.lost <= deadline + 0.25  # lost at that deadline
    assert victim.end_type == "fail"
    # The key went on to a new owner, with a larger token, after it expired in Redis.
    after = [g for g in data.grants if g.key == detail["key"] and g.token > detail["token"]]
    assert after and min(g.granted for g in after) >= released + ttl_s
    assert result.report.property("mutual-exclusion").violations == ()
