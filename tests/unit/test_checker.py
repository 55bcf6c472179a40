"""The checker on hand-made histories: each property caught on a minimal violating history and
passed on a clean one."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import pytest

from fencedlease_lab.harness.checker import CheckParams, check_history, extract
from fencedlease_lab.harness.history import Event, read_history, write_history


class History:
    """Builds a history by hand; times are seconds after the run's start (mono = wall - 1e9)."""

    def __init__(self, ttl_ms: int = 1000, heartbeat_ms: int = 250, margin_ms: int = 1000) -> None:
        self.events: list[Event] = []
        self.ids: dict[str, int] = {}
        self.add(
            "run", "start", "info", 0.0,
            detail={"ttl_ms": ttl_ms, "heartbeat_ms": heartbeat_ms, "margin_ms": margin_ms},
        )  # fmt: skip

    def add(self, process: str, op: str, kind: Any, at: float, **fields: Any) -> None:
        self.events.append(Event(process, op, kind, at, 1e9 + at, **fields))

    def next_id(self, process: str) -> int:
        self.ids[process] = self.ids.get(process, -1) + 1
        return self.ids[process]

    def lease(
        self,
        process: str,
        token: int,
        granted: float,
        *,
        invoked: float | None = None,
        read: tuple[float, int] | None = None,
        write: tuple[float, int, str] | None = None,
        end: tuple[float, str, str | None] | None = None,
        lost: float | None = None,
        key: str | None = None,
    ) -> int:
        """One lease cycle on ``key``: acquire, optional read (at, value), write (at, value,
        completion), lost notice, and the hold's end (at, completion type, outcome)."""
        grant = self.next_id(process)
        put = functools.partial(self.add, key=key)
        put(process, "acquire", "invoke", granted - 0.01 if invoked is None else invoked,
                 id=grant)  # fmt: skip
        put(process, "acquire", "ok", granted, id=grant, token=token, outcome="granted")
        if read is not None:
            op = self.next_id(process)
            at, value = read
            put(process, "read", "invoke", at - 0.005, id=op, grant=grant, token=token)
            put(process, "read", "ok", at, id=op, grant=grant, token=token, value=value,
                     outcome="accepted")  # fmt: skip
        if write is not None:
            op = self.next_id(process)
            at, value, kind = write
            outcome = {"ok": "accepted", "fail": "stale", "info": "backend-error"}[kind]
            put(process, "write", "invoke", at - 0.005, id=op, grant=grant, token=token,
                     value=value)  # fmt: skip
            put(process, "write", kind, at, id=op, grant=grant, token=token, value=value,
                     outcome=outcome)  # fmt: skip
        if lost is not None:
            put(process, "lease-lost", "info", lost, grant=grant, token=token,
                     outcome="lease-lost")  # fmt: skip
        if end is not None:
            at, kind, end_outcome = end
            put(process, "hold", kind, at, id=grant, grant=grant, token=token,
                     outcome=end_outcome, detail={"body_end": at - 0.002})  # fmt: skip
        return grant

    def fault(self, kind: str, start: float, end: float, target: str | None = None,
              **detail: Any) -> None:  # fmt: skip
        op = self.next_id("nemesis")
        base = {"fault": kind, **({"target": target} if target else {})}
        self.add("nemesis", "fault", "invoke", start, id=op, detail=base)
        self.add("nemesis", "fault", "ok", end, id=op, detail={**base, **detail})

    def finish(
        self, stop: float, final: int | None, finals: dict[str, int] | None = None
    ) -> list[Event]:
        """The run's stop, and its final counter (``final``) or one per key (``finals``)."""
        self.add("run", "stop", "info", stop)
        if final is not None:
            self.add("run", "final", "ok", stop + 0.5, value=final)
        for key, value in (finals or {}).items():
            self.add("run", "final", "ok", stop + 0.5, key=key, value=value)
        return sorted(self.events, key=lambda e: e.mono)


def clean() -> History:
    """Two workers taking turns, every access accepted, the counter at 2."""
    h = History()
    h.lease("w0", 1, 0.10, read=(0.12, 0), write=(1.90, 1, "ok"), end=(1.91, "ok", None))
    h.lease("w1", 2, 1.92, invoked=0.11, read=(1.93, 1), write=(3.70, 2, "ok"),
            end=(3.71, "ok", None))  # fmt: skip
    return h


def violations(events: list[Event], key: str) -> list[str]:
    return [v.message for v in check_history(events).property(key).violations]


def test_clean_history_is_valid_with_every_property_checked() -> None:
    """A well-behaved history passes every property that has something to check; the register
    check says what it lacks (this hand-made history names no mode)."""
    report = check_history(clean().finish(4.0, 2))
    assert report.valid
    assert [p.status for p in report.properties] == [
        "pass", "pass", "pass", "pass", "not checked", "pass", "not checked", "not checked",
    ]  # fmt: skip
    assert report.property("linearizable-register").note == (
        "not judged: history lacks the resource's mode (the run's start detail.mode)"
    )
    assert report.property("transactions").note == "not judged: the history has no transactions"
    assert report.stats["grants"] == 2
    assert report.stats["acknowledged_writes"] == 2
    assert report.stats["final_counter"] == 2


def test_params_come_from_the_start_event() -> None:
    """ttl, heartbeat and margin are read from the run's start event."""
    h = History(ttl_ms=700, heartbeat_ms=100, margin_ms=300)
    assert CheckParams.from_history(h.finish(1.0, 0)) == CheckParams(700, 100, 300)


# --- (a) accepted tokens never go backwards ---------------------------------------------------


def stale_write_after_newer_read(write: str = "ok") -> History:
    """w0 (token 1) reads, pauses; w1 (token 2) is granted and reads; w0's write then lands."""
    h = History()
    h.lease("w0", 1, 0.10, read=(0.12, 0), write=(2.30, 1, write),
            end=(2.31, "fail", "lease-lost" if write == "ok" else "stale"), lost=2.30)  # fmt: skip
    h.lease("w1", 2, 1.20, invoked=0.11, read=(1.21, 0), write=(3.00, 1, "ok"),
            end=(3.01, "ok", None))  # fmt: skip
    return h


def test_a_older_token_accepted_after_newer_is_a_violation() -> None:
    """A write with token 1 accepted after a read with token 2 completed is caught, named."""
    found = violations(stale_write_after_newer_read().finish(4.0, 1), "accepted-tokens-monotonic")
    assert len(found) == 1
    assert "w0's write with token 1 was accepted at 2.30 s" in found[0]
    assert "w1's read with token 2 had already been accepted at 1.21 s" in found[0]


def test_a_refused_stale_write_is_not_a_violation() -> None:
    """The same schedule with the stale write refused passes (a) and (b); the pause that made w0
    stale is recorded, so its lost lease is explained (f)."""
    h = stale_write_after_newer_read(write="fail")
    h.fault("pause-holder", 0.20, 2.25, target="w0")
    report = check_history(h.finish(4.0, 1))
    assert report.valid, report.explain()
    assert report.stats["refused_accesses"] == 1


@pytest.mark.parametrize("outcome", ["refused", "accepted"])
def test_a_a_strict_store_accepting_a_token_twice_is_a_violation(outcome: str) -> None:
    """A recheck (the holder's token once more, strict, after its read) is the checker's rule
    for strict stores: refused passes, accepted is a violation naming the token and the line."""
    h = clean()
    h.add("w0", "recheck", "invoke", 1.80, id=9, grant=0, key="k", token=1)
    h.add("w0", "recheck", "ok", 1.81, id=9, grant=0, key="k", token=1, outcome=outcome)
    events = h.finish(4.0, 2)
    report = check_history(events)
    found = report.property("accepted-tokens-monotonic").violations
    if outcome == "refused":
        assert report.valid, report.explain()
        return
    assert [v.message for v in found] == [
        "key 'k': w0's token 1 was accepted a second time by a strict store (strict mode "
        "accepts each token once)."
    ]
    line = [i for i, e in enumerate(events, 1) if e.op == "recheck" and e.type == "ok"]
    assert found[0].lines == tuple(line)
    assert found[0].at == pytest.approx(1.81)
    assert not report.valid


def test_a_concurrent_accesses_are_not_ordered() -> None:
    """An access invoked before a newer one completed may carry a smaller token."""
    h = History()
    h.lease("w0", 1, 0.10, read=(0.12, 0), write=(1.25, 1, "ok"), end=(1.26, "ok", None))
    h.lease("w1", 2, 1.20, invoked=0.11, read=(1.21, 0))
    events = h.finish(2.0, None)
    # w0's write was invoked at 1.245, after w1's read completed at 1.21: a violation...
    assert len(violations(events, "accepted-tokens-monotonic")) == 1
    # ...but not if the read completed only after the write was invoked.
    h2 = History()
    h2.lease("w0", 1, 0.10, read=(0.12, 0), write=(1.25, 1, "ok"), end=(1.26, "ok", None))
    h2.lease("w1", 2, 1.20, invoked=0.11, read=(1.2475, 0))
    assert violations(h2.finish(2.0, None), "accepted-tokens-monotonic") == []


# --- (b) no lost update -----------------------------------------------------------------------


def test_b_lost_update_names_the_colliding_writes() -> None:
    """Two acknowledged increments that wrote the same value, counter one short: caught."""
    found = violations(stale_write_after_newer_read().finish(4.0, 1), "no-lost-update")
    assert len(found) == 1
    assert "the counter ends at 1 but 2 increments were acknowledged" in found[0]
    assert "w0 (token 1, at 2.30 s) and w1 (token 2, at 3.00 s) both wrote 1" in found[0]


def test_b_phantom_increment_is_a_violation() -> None:
    """A counter above acknowledged plus unknown increments means a failed write happened."""
    found = violations(clean().finish(4.0, 3), "no-lost-update")
    assert found == [
        "the counter ends at 3, more than the 2 acknowledged plus 0 unknown increments: "
        "a write happened that was reported failed."
    ]


def test_b_unknown_writes_may_count() -> None:
    """A write with an unknown outcome may or may not be in the counter."""
    h = clean()
    h.lease("w0", 3, 3.72, read=(3.73, 2), write=(5.5, 3, "info"), end=(5.51, "info",
            "backend-error"))  # fmt: skip
    assert violations(h.finish(6.0, 3), "no-lost-update") == []
    assert violations(h.finish(6.0, 2), "no-lost-update") == []


def test_stats_count_accesses_with_an_unknown_outcome() -> None:
    """Reads and writes left without a known outcome (``info``, or never completed) are counted
    apart from the writes among them."""
    h = clean()
    h.lease("w0", 3, 3.72, write=(5.5, 3, "info"), end=(5.51, "info", "backend-error"))
    h.add("w1", "read", "invoke", 5.6, id=9, grant=0, key=None, token=4)
    h.add("w1", "read", "info", 5.7, id=9, grant=0, key=None, token=4, outcome="backend-error")
    h.add("w1", "write", "invoke", 5.8, id=10, grant=0, key=None, token=4, value=4)
    stats = check_history(h.finish(6.0, 3)).stats
    assert (stats["unknown_writes"], stats["unknown_accesses"]) == (2, 3)


def test_b_not_checked_without_a_final_read() -> None:
    """No final counter: property b is reported as not checked, not as passed."""
    prop = check_history(clean().finish(4.0, None)).property("no-lost-update")
    assert prop.status == "not checked"
    assert prop.note == "the final counter was not read"


# --- (c) loss reported ------------------------------------------------------------------------


def test_c_silent_success_after_a_rival_grant_is_a_violation() -> None:
    """w0's body ran past w1's grant, yet its hold returned normally: a silent success."""
    h = History()
    h.lease("w0", 1, 0.10, read=(0.12, 0), write=(2.30, 1, "fail"), end=(2.31, "ok", None))
    h.lease("w1", 2, 1.20, invoked=0.11, read=(1.21, 0), write=(3.0, 1, "ok"),
            end=(3.01, "ok", None))  # fmt: skip
    found = violations(h.finish(4.0, 1), "loss-reported")
    assert len(found) == 1
    assert found[0].startswith("w0's lease (token 1) was lost during its critical section")
    assert "w1 was granted the key (token 2) at 1.20 s" in found[0]
    assert "a silent success" in found[0]


def test_c_lost_notice_then_normal_return_is_a_violation() -> None:
    """The library said lost, and yet the hold returned normally."""
    h = History()
    h.lease("w0", 1, 0.10, read=(0.12, 0), write=(1.9, 1, "ok"), end=(1.91, "ok", None),
            lost=1.5)  # fmt: skip
    found = violations(h.finish(4.0, 1), "loss-reported")
    assert len(found) == 1
    assert "the library declared it lost at 1.50 s" in found[0]


@pytest.mark.parametrize("outcome", ["lease-lost", "stale"])
def test_c_loss_ending_in_an_error_passes(outcome: str) -> None:
    """A lost lease whose hold ends in LeaseLostError or StaleTokenError is what we want."""
    events = stale_write_after_newer_read(write="fail").finish(4.0, 1)
    events = [
        e
        if e.op != "hold" or e.process != "w0"
        else Event(
            e.process,
            e.op,
            "fail",
            e.mono,
            e.wall,
            id=e.id,
            grant=e.grant,
            token=e.token,
            outcome=outcome,
            detail=e.detail,
        )
        for e in events
    ]
    assert violations(events, "loss-reported") == []


def cut_off(lost: float | None) -> list[Event]:
    """w0 is partitioned at 1.0 s for 2 s while its body runs until 3.0 s."""
    h = History()
    h.lease("w0", 1, 0.50, read=(0.52, 0), write=(3.0, 1, "fail"), end=(3.01, "fail", "stale"),
            lost=lost)  # fmt: skip
    h.lease("w1", 2, 2.1, invoked=0.6, read=(2.11, 0), write=(3.9, 1, "ok"),
            end=(3.91, "ok", None))  # fmt: skip
    h.fault("partition", 1.0, 3.0, target="w0")
    return h.finish(6.5, 1)


def test_c_loss_told_within_ttl_plus_heartbeat_passes() -> None:
    """Told 0.9 s after the cut, within ttl + heartbeat = 1.25 s."""
    assert violations(cut_off(1.9), "loss-reported") == []


@pytest.mark.parametrize(
    ("lost", "says"), [(2.4, "was told only 1.40 s after the cut"), (None, "was never told")]
)
def test_c_loss_told_late_or_never_is_a_violation(lost: float | None, says: str) -> None:
    """Told 1.4 s after the cut, or never: beyond ttl + one heartbeat."""
    found = violations(cut_off(lost), "loss-reported")
    assert len(found) == 1
    assert says in found[0]
    assert "the bound is ttl + one heartbeat = 1.25 s" in found[0]


# --- (d) grant tokens -------------------------------------------------------------------------


def test_d_duplicate_token_is_a_violation() -> None:
    """Two grants with the same token."""
    h = History()
    h.lease("w0", 5, 0.1, end=(1.0, "ok", None))
    h.lease("w1", 5, 1.1, invoked=1.05, end=(2.0, "ok", None))
    found = violations(h.finish(3.0, None), "grant-tokens")
    assert found == ["token 5 was granted twice: to w0 at 0.10 s and to w1 at 1.10 s."]


def test_d_decreasing_token_for_a_later_grant_is_a_violation() -> None:
    """A grant invoked after another completed must have a larger token."""
    h = History()
    h.lease("w0", 5, 0.1, end=(1.0, "ok", None))
    h.lease("w1", 4, 1.1, invoked=1.05, end=(2.0, "ok", None))
    found = violations(h.finish(3.0, None), "grant-tokens")
    assert len(found) == 1
    assert "w1 was granted token 4 at 1.10 s" in found[0]
    assert "after w0 had been granted the larger token 5 at 0.10 s" in found[0]


def test_d_concurrent_acquires_may_finish_out_of_order() -> None:
    """An acquire invoked before the other completed may get a smaller token."""
    h = History()
    h.lease("w0", 5, 0.3, invoked=0.05, end=(1.0, "ok", None))
    h.lease("w1", 4, 1.1, invoked=0.1, end=(2.0, "ok", None))
    assert violations(h.finish(3.0, None), "grant-tokens") == []


def rollback(resource_refuses: bool) -> list[Event]:
    """Redis restarted without persistence at 2.0 s: tokens start again at 1."""
    h = History()
    h.lease("w0", 7, 0.1, read=(0.12, 0), write=(1.0, 1, "ok"), end=(1.01, "ok", None))
    h.fault("redis-restart-nopersist", 2.0, 2.2, counter_before=7, counter_after=None)
    if resource_refuses:
        h.lease("w1", 1, 2.5, read=None, end=(2.6, "fail", "stale"))
        op = h.next_id("w1")
        h.add("w1", "read", "invoke", 2.51, id=op, grant=0, token=1)
        h.add("w1", "read", "fail", 2.52, id=op, grant=0, token=1, outcome="stale")
    else:
        h.lease("w1", 1, 2.5, read=(2.52, 1), write=(2.7, 2, "ok"), end=(2.71, "ok", None))
    return h.finish(6.0, 1 if resource_refuses else 2)


def test_d_counter_rollback_is_exempt_and_explained_with_its_remedy() -> None:
    """Lower tokens after a restart without persistence: no violation of d; a finding saying
    the resource refused them (safe, but stuck) and the remedy."""
    report = check_history(rollback(resource_refuses=True))
    assert report.valid
    (finding,) = [f for f in report.findings if f.kind == "counter-rollback"]
    assert finding.message == (
        "Redis was restarted without persistence at 2.00 s: the fencing counter (at 7 before) "
        "started again from 0, below the fence of the resource (it had accepted token 7), so every "
        "access was refused as stale: 1 access refused as stale on 1 key from 2.52 s to the end "
        "of the run (6.00 s); none by a grant made after the restart was accepted. Safe, but "
        'stuck: recovery needs fencing="clock" or persistence (AOF). 1 later grant got tokens at '
        "or below ones already issued (1 pair of grants out of order, exempted from property d)."
    )
    assert finding.remedy == (
        'Use fencing="clock" (tokens max(counter + 1, Redis TIME in microseconds), which a '
        "restart does not take back), or run Redis with appendonly yes and appendfsync always "
        "(AOF), so the fencing counter survives a restart."
    )


def test_d_rollback_without_fencing_shows_in_a_as_a_rollback_not_a_stale_holder() -> None:
    """If the resource lets the lower tokens of a rolled-back counter in, property a reports
    them once per key as the rollback, never as a stale holder: their leases were current."""
    report = check_history(rollback(resource_refuses=False))
    assert report.property("grant-tokens").violations == ()
    found = [v.message for v in report.property("accepted-tokens-monotonic").violations]
    assert found == [
        "counter rolled back: Redis was restarted without persistence at 2.00 s and its counter "
        "handed out again tokens below those the resource had accepted; the resource accepted 2 "
        "access(es) with them, the first w1's read with token 1 at 2.52 s, after w0's read with "
        "token 7 at 0.12 s. Their leases were current (granted after the restart), not stale; a "
        "fenced resource refuses every access until the new tokens pass its fence."
    ]


def test_a_stale_holder_after_a_rollback_is_still_a_stale_holder() -> None:
    """Two grants both made after a rollback: the older one's write accepted after the newer
    one's read is a stale holder, as without the rollback."""
    h = History()
    h.lease("w0", 7, 0.1, read=(0.12, 0), write=(1.0, 1, "ok"), end=(1.01, "ok", None))
    h.fault("redis-restart-nopersist", 2.0, 2.2, counter_before=7, counter_after=None)
    h.lease("w1", 8, 2.5, read=(2.52, 1), write=(3.9, 2, "ok"), end=(3.91, "ok", None))
    h.lease("w2", 9, 3.6, read=(3.62, 2), end=(3.7, "ok", None))
    found = [
        v.message
        for v in check_history(h.finish(6.0, 2)).property("accepted-tokens-monotonic").violations
    ]
    assert found == [
        "w1's write with token 8 was accepted at 3.90 s, although w2's read with token 9 had "
        "already been accepted at 3.62 s: the resource let an older token in after a newer one, "
        "so a stale holder acted on the data."
    ]


# --- (e) recovery -----------------------------------------------------------------------------


def after_fault(next_grant: float, stop: float = 20.0) -> list[Event]:
    h = History()
    h.lease("w0", 1, 0.1, end=(1.0, "ok", None))
    h.fault("redis-pause", 2.0, 4.0)
    h.lease("w1", 2, next_grant, invoked=1.5, end=(next_grant + 1, "ok", None))
    return h.finish(stop, None)


def test_e_grant_within_ttl_plus_margin_passes() -> None:
    """A grant 1.5 s after the heal, within ttl + margin = 2 s."""
    report = check_history(after_fault(5.5))
    assert report.property("recovery").violations == ()
    assert report.recoveries[0]["after_s"] == pytest.approx(1.5)


def test_e_late_grant_is_a_violation() -> None:
    """No grant until 3.5 s after the heal."""
    found = violations(after_fault(7.5), "recovery")
    assert found == [
        "after redis-pause healed at 4.00 s, the next lease was granted only 3.50 s later; "
        "the bound is ttl + margin = 2.00 s."
    ]


def test_e_no_grant_at_all_is_a_violation() -> None:
    """Nothing granted after the heal, though the run went on."""
    h = History()
    h.lease("w0", 1, 0.1, end=(1.0, "ok", None))
    h.fault("partition", 2.0, 4.0, target="w0")
    found = violations(h.finish(10.0, None), "recovery")
    assert len(found) == 1
    assert "no lease was granted again" in found[0]


def test_e_holder_kept_through_the_fault_passes() -> None:
    """A holder whose lease survived the fault (its release succeeded) is a recovery."""
    h = History()
    h.lease("w0", 1, 1.0, end=(6.0, "ok", None))
    h.fault("latency", 2.0, 4.0, target="w0")
    report = check_history(h.finish(10.0, None))
    assert report.property("recovery").violations == ()
    assert report.recoveries[0]["after_s"] == 0.0


def test_e_fault_too_close_to_the_end_is_not_checked() -> None:
    """A fault healing less than ttl + margin before the stop cannot be judged."""
    report = check_history(after_fault(7.5, stop=5.0))
    assert report.property("recovery").status == "not checked"
    assert report.recoveries[0]["checked"] is False


def test_e_overlapping_faults_are_judged_when_the_last_heals() -> None:
    """A latency toxic that heals during a Redis pause is not judged (no lease can be granted
    while Redis is paused); the pause, the last to heal, is, from its own end: a grant 1.5 s
    after it passes, and the same grant 3.5 s after it would not."""
    h = History()
    h.lease("w0", 1, 0.1, end=(1.0, "ok", None))
    h.fault("redis-pause", 2.0, 6.0)
    h.fault("latency", 3.0, 4.0, target="w0")
    h.lease("w1", 2, 7.5, invoked=1.5, end=(8.5, "ok", None))
    report = check_history(h.finish(20.0, None))
    assert report.property("recovery").violations == ()
    assert report.property("recovery").checked == 1
    assert [(r["fault"], r["after_s"]) for r in report.recoveries] == [("redis-pause", 1.5)]
    late = History()
    late.lease("w0", 1, 0.1, end=(1.0, "ok", None))
    late.fault("redis-pause", 2.0, 4.0)
    late.fault("latency", 3.0, 5.0, target="w0")
    late.lease("w1", 2, 8.5, invoked=1.5, end=(9.5, "ok", None))
    assert violations(late.finish(20.0, None), "recovery") == [
        "after latency healed at 5.00 s, the next lease was granted only 3.50 s later; "
        "the bound is ttl + margin = 2.00 s."
    ]


def test_extract_pairs_invocations_with_completions() -> None:
    """Grants, accesses and faults are reassembled with their times."""
    data = extract(cut_off(1.9))
    assert [(g.process, g.token, g.end_outcome, g.lost) for g in data.grants] == [
        ("w0", 1, "stale", 1.9),
        ("w1", 2, None, None),
    ]
    assert [(a.process, a.op, a.type) for a in data.accesses] == [
        ("w0", "read", "ok"), ("w1", "read", "ok"), ("w0", "write", "fail"), ("w1", "write", "ok"),
    ]  # fmt: skip
    assert [(f.kind, f.target, f.start, f.end) for f in data.faults] == [
        ("partition", "w0", 1.0, 3.0)
    ]
    assert data.final == 1


def test_d_tokens_past_2_53_are_told_apart_through_the_history_file(tmp_path: Path) -> None:
    """Grants of 2**53 + 1 and then 2**53 (one double) are caught as decreasing after a round trip
    through the JSON-lines history; 2**63 - 1 granted twice is caught as a duplicate."""
    h = History()
    h.lease("w0", 2**53 + 1, 0.1, end=(1.0, "ok", None))
    h.lease("w1", 2**53, 1.1, invoked=1.05, end=(2.0, "ok", None))
    h.lease("w0", 2**63 - 1, 2.1, invoked=2.05, end=(3.0, "ok", None))
    h.lease("w1", 2**63 - 1, 3.1, invoked=3.05, end=(4.0, "ok", None))
    path = tmp_path / "history.jsonl"
    write_history(path, h.finish(5.0, None))
    found = violations(read_history(path), "grant-tokens")
    assert len(found) == 2
    duplicate, decreasing = sorted(found, key=lambda message: not message.startswith("token"))
    assert duplicate == (
        "token 9223372036854775807 was granted twice: to w0 at 2.10 s and to w1 at 3.10 s."
    )
    assert "w1 was granted token 9007199254740992 at 1.10 s" in decreasing
    assert "the larger token 9007199254740993" in decreasing
    as_json = json.loads(json.dumps(check_history(read_history(path)).to_dict()))
    # (the lock-level model of property f finds the decreasing token too)
    messages = [
        v["message"] for p in as_json["properties"] if p["letter"] == "d" for v in p["violations"]
    ]
    assert sorted(messages) == sorted(found)  # report.json keeps the exact numbers


# --- key by key -------------------------------------------------------------------------------


def two_keys() -> History:
    """w0 holds k1 (token 5), then w1 holds k2 (token 1): tokens of different keys never
    compare. k2's lease is granted while w0 still holds k1: no rival either."""
    h = History()
    h.lease("w0", 5, 0.10, read=(0.12, 0), write=(1.90, 1, "ok"), end=(1.91, "ok", None),
            key="k1")  # fmt: skip
    h.lease("w1", 1, 0.50, invoked=0.40, read=(2.00, 0), write=(2.10, 1, "ok"),
            end=(2.11, "ok", None), key="k2")  # fmt: skip
    return h


def test_keys_are_judged_apart_a_b_c_d() -> None:
    """A smaller token on another key, a grant of another key inside a body, equal counters on
    two keys: no violation of a, b, c or d; b is judged on each key's own final counter."""
    report = check_history(two_keys().finish(3.0, None, finals={"k1": 1, "k2": 1}))
    assert report.valid, report.explain()
    assert [report.property(k).checked for k in ("accepted-tokens-monotonic", "no-lost-update",
            "loss-reported", "grant-tokens")] == [4, 4, 2, 2]  # fmt: skip
    assert report.stats["final_counter"] == 2
    assert report.stats["keys"] == 2


def test_a_older_token_on_the_same_key_names_the_key_and_its_operations() -> None:
    """k1 accepts token 5 and then token 3 (invoked later): a violation on k1 whose ops are the
    accepted read of token 5 and the accepted write of token 3, with worker, key, token and time."""
    h = two_keys()
    h.lease("w1", 3, 2.20, invoked=2.15, write=(2.50, 2, "ok"), end=(2.51, "ok", None), key="k1")
    events = h.finish(3.0, None, finals={"k1": 2, "k2": 1})
    report = check_history(events)
    (found,) = report.property("accepted-tokens-monotonic").violations
    assert found.key == "k1"
    assert found.message.startswith("key 'k1': w1's write with token 3 was accepted at 2.50 s")
    assert [(o.process, o.op, o.type, o.key, o.token, o.at_s) for o in found.ops] == [
        ("w0", "read", "ok", "k1", 5, 0.12),
        ("w1", "write", "ok", "k1", 3, 2.5),
    ]
    assert [o.line for o in found.ops] == list(found.lines)
    assert [events[line - 1].mono for line in found.lines] == [0.12, 2.5]
    as_json = report.to_dict()
    assert as_json["report_version"] == 2
    (listed,) = as_json["properties"][0]["violations"]
    assert listed["key"] == "k1"
    assert listed["ops"][1] == {
        "line": found.lines[1], "process": "w1", "op": "write", "type": "ok",
        "id": 4, "key": "k1", "token": 3, "at_s": 2.5,
    }  # fmt: skip
    # the grant of token 3 after 5 breaks d on k1, and only there (k2's token 1 is its own)
    assert [v.key for v in report.property("grant-tokens").violations] == ["k1"]


def test_b_a_lost_update_on_one_key_names_that_key() -> None:
    """k2's counter is one short; k1's is right."""
    found = check_history(two_keys().finish(3.0, None, finals={"k1": 1, "k2": 0}))
    (violation,) = found.property("no-lost-update").violations
    assert violation.key == "k2"
    assert violation.message == (
        "key 'k2': the counter ends at 0 but 1 increments were acknowledged: 1 acknowledged "
        "increment(s) were lost."
    )
    assert [(o.process, o.op, o.key, o.at_s) for o in violation.ops] == [
        ("run", "final", "k2", 3.5)
    ]


def test_b_a_key_whose_final_counter_was_not_read_is_named_in_the_note() -> None:
    prop = check_history(two_keys().finish(3.0, None, finals={"k1": 1})).property("no-lost-update")
    assert prop.status == "pass"
    assert prop.checked == 2
    assert prop.note == "the final counter of 1 key(s) was not read"


def test_c_a_rival_grant_counts_only_on_the_same_key() -> None:
    """w1's grant of k1 inside w0's body on k1 is a silent success for w0; k2's grant was not."""
    h = two_keys()
    h.lease("w2", 6, 1.50, invoked=1.45, end=(2.40, "ok", None), key="k1")
    (found,) = check_history(h.finish(3.0, None)).property("loss-reported").violations
    assert found.key == "k1"
    assert found.message.startswith(
        "key 'k1': w0's lease (token 5) was lost during its critical section (w2 was granted "
        "the key (token 6) at 1.50 s, before the body ended at 1.91 s)"
    )
    assert [(o.process, o.op, o.type, o.token) for o in found.ops] == [
        ("w0", "acquire", "ok", 5), ("w2", "acquire", "ok", 6), ("w0", "hold", "ok", 5),
    ]  # fmt: skip


def test_d_a_decreasing_token_on_the_same_key_names_the_key() -> None:
    h = two_keys()
    h.lease("w2", 4, 2.50, invoked=2.45, end=(2.60, "ok", None), key="k1")
    (found,) = check_history(h.finish(3.0, None)).property("grant-tokens").violations
    assert found.key == "k1"
    assert found.message.startswith("key 'k1': w2 was granted token 4 at 2.50 s")
    assert "after w0 had been granted the larger token 5 at 0.10 s" in found.message


def test_e_each_key_asked_for_after_the_heal_is_judged() -> None:
    """After a pause heals at 4.0 s, k1 is granted at 4.5 s but k2, asked for at 4.2 s, only at
    7.0 s: one violation, on k2, counted from its request."""
    h = History()
    h.lease("w0", 1, 0.1, end=(1.0, "ok", None), key="k1")
    h.fault("redis-pause", 2.0, 4.0)
    h.lease("w0", 2, 4.5, invoked=3.0, end=(5.0, "ok", None), key="k1")
    h.lease("w1", 1, 7.0, invoked=4.2, end=(7.5, "ok", None), key="k2")
    report = check_history(h.finish(20.0, None))
    (found,) = report.property("recovery").violations
    assert found.key == "k2"
    assert found.message == (
        "after redis-pause healed at 4.00 s, the next lease of key 'k2' was granted only 2.80 s "
        "later (asked for at 4.20 s); the bound is ttl + margin = 2.00 s."
    )
    assert report.property("recovery").checked == 2
    assert [(o.process, o.op, o.type, o.key, o.at_s) for o in found.ops] == [
        ("nemesis", "fault", "invoke", None, 2.0),
        ("w1", "acquire", "invoke", "k2", 4.2),
        ("w1", "acquire", "ok", "k2", 7.0),
    ]
    assert report.recoveries == (
        {"fault": "redis-pause", "end_s": 4.0, "after_s": 2.8, "checked": True, "keys": 2,
         "slowest_key": "k2"},
    )  # fmt: skip


def test_d_rollback_recovery_counts_only_grants_made_after_the_restart() -> None:
    """A lease granted before the restart whose write is accepted just after it began (its token
    is the old counter's) does not show the resource accepting again; w1's refused token 1 after
    the restart leaves it stuck."""
    h = History()
    h.lease("w0", 7, 0.1, read=(0.12, 0), write=(1.0, 1, "ok"), end=(1.01, "ok", None))
    h.lease("w2", 8, 1.9, read=(1.95, 1), write=(2.1, 2, "ok"), end=(2.12, "ok", None))
    h.fault("redis-restart-nopersist", 2.0, 2.2, counter_before=8, counter_after=None)
    grant = h.lease("w1", 1, 2.5, end=(2.6, "fail", "stale"))
    op = h.next_id("w1")
    h.add("w1", "read", "invoke", 2.51, id=op, grant=grant, token=1)
    h.add("w1", "read", "fail", 2.52, id=op, grant=grant, token=1, outcome="stale")
    report = check_history(h.finish(6.0, 2))
    assert report.valid, report.explain()
    (finding,) = [f for f in report.findings if f.kind == "counter-rollback"]
    assert (
        "so every access was refused as stale: 1 access refused as stale on 1 key from 2.52 s to "
        "the end of the run (6.00 s); none by a grant made after the restart was accepted."
        in finding.message
    )


def test_d_rollback_compares_tokens_key_by_key() -> None:
    """After the restart k2, never accessed before, accepts token 1 (its first), while k1
    refuses token 1 (it had accepted 7): safe, and the finding says so; nothing got through."""
    h = History()
    h.lease("w0", 7, 0.1, read=(0.12, 0), write=(1.0, 1, "ok"), end=(1.01, "ok", None), key="k1")
    h.fault("redis-restart-nopersist", 2.0, 2.2, counter_before=7, counter_after=None)
    h.lease("w1", 1, 2.5, read=(2.52, 0), write=(2.7, 1, "ok"), end=(2.71, "ok", None), key="k2")
    grant = h.lease("w0", 1, 3.0, end=(3.2, "fail", "stale"), key="k1")
    op = h.next_id("w0")
    h.add("w0", "read", "invoke", 3.05, id=op, grant=grant, token=1, key="k1")
    h.add("w0", "read", "fail", 3.06, id=op, grant=grant, token=1, key="k1", outcome="stale")
    report = check_history(h.finish(4.0, None, finals={"k1": 1, "k2": 1}))
    assert report.valid, report.explain()
    (finding,) = [f for f in report.findings if f.kind == "counter-rollback"]
    assert finding.message == (
        "Redis was restarted without persistence at 2.00 s: the fencing counter (at 7 before) "
        "started again from 0, below the fence of the resource (it had accepted token 7), so every "
        "access was refused as stale: 1 access refused as stale on 1 key from 3.06 s to the end "
        "of the run (4.00 s); none by a grant made after the restart was accepted. Safe, but "
        'stuck: recovery needs fencing="clock" or persistence (AOF). 1 later grant got tokens at '
        "or below ones already issued (1 pair of grants out of order, exempted from property d)."
    )


def test_f_an_overlap_is_named_by_the_key_of_its_operations() -> None:
    """Mutual exclusion reports no key of its own: the checker names the key its events share."""
    h = two_keys()
    h.lease("w2", 6, 0.50, invoked=0.45, end=(0.60, "ok", None), key="k1")
    found, lock = check_history(h.finish(3.0, None)).property("mutual-exclusion").violations
    assert lock.message.startswith("[lock-model] key 'k1': ")  # the same grant, seen as a lock
    assert found.key == "k1"
    assert found.message.startswith("[overlap] key 'k1': w2's lease (token 6) was granted at")
    assert {(o.process, o.key) for o in found.ops} == {("w0", "k1"), ("w2", "k1")}


def test_e_a_key_is_judged_on_its_first_request_after_the_heal() -> None:
    """w2 asks for k2 at 4.4 s and gets it at 4.5 s for a long body; w1, asking at 5.0 s, waits
    behind it until 7.6 s: the key recovered 0.1 s after it was first asked for, no violation."""
    h = History()
    h.lease("w0", 1, 0.1, end=(1.0, "ok", None), key="k2")
    h.fault("redis-pause", 2.0, 4.0)
    h.lease("w2", 2, 4.5, invoked=4.4, end=(7.5, "ok", None), key="k2")
    h.lease("w1", 3, 7.6, invoked=5.0, end=(8.0, "ok", None), key="k2")
    report = check_history(h.finish(20.0, None))
    assert report.property("recovery").violations == ()
    assert report.recoveries[0]["after_s"] == 0.1
    assert report.recoveries[0]["keys"] == 1


@pytest.mark.parametrize(("gave_up", "late"), [(4.11, False), (6.5, True)])
def test_e_a_refused_try_proves_a_late_recovery_only_if_it_waited_past_the_bound(
    gave_up: float, late: bool
) -> None:
    """w1 tries k3 at 4.1 s (the heal at 4.0 s) and gives up at ``gave_up``; the next request
    for k3 comes at 9.0 s and is served at once. A try refused at once shows nothing (the old
    lease may have been expiring); one still waiting when ttl + margin had passed is a
    violation."""
    h = History()
    h.lease("w0", 1, 0.1, end=(1.0, "ok", None), key="k3")
    h.fault("redis-pause", 2.0, 4.0)
    op = h.next_id("w1")
    h.add("w1", "acquire", "invoke", 4.1, id=op, key="k3")
    h.add("w1", "acquire", "fail", gave_up, id=op, key="k3", outcome="timeout")
    h.lease("w2", 2, 9.05, invoked=9.0, end=(9.5, "ok", None), key="k3")
    report = check_history(h.finish(20.0, None))
    found = [v.message for v in report.property("recovery").violations]
    assert found == (
        [
            "after redis-pause healed at 4.00 s, the next lease of key 'k3' was granted only "
            "4.95 s later (asked for at 4.10 s); the bound is ttl + margin = 2.00 s."
        ]
        if late
        else []
    )
    assert report.recoveries[0]["checked"] is late


def test_the_registry_runs_each_property_module_once_in_report_order() -> None:
    """Each module of the registry gives one property; the report lists them in that order."""
    from fencedlease_lab.harness.checker import PROPERTIES
    from fencedlease_lab.harness.properties import MODULES, REGISTRY

    assert len(MODULES) == len(REGISTRY) == 8
    assert [p.letter for p in REGISTRY] == list("abcdefgh")
    assert REGISTRY[-1].key == "transactions"
    assert list(PROPERTIES) == [p.key for p in REGISTRY]
    report = check_history(clean().finish(4.0, 2))
    assert [(p.key, p.letter, p.title) for p in report.properties] == [
        (p.key, p.letter, p.title) for p in REGISTRY
    ]


def refused_read(
    h: History, process: str, grant: int, token: int, at: float, key: str | None
) -> None:
    """A read by ``process``'s grant ``grant`` with ``token``, refused as stale at ``at``."""
    op = h.next_id(process)
    h.add(process, "read", "invoke", at - 0.01, id=op, grant=grant, token=token, key=key)
    h.add(process, "read", "fail", at, id=op, grant=grant, token=token, key=key, outcome="stale")


def restart_on_two_keys(recover_k2: bool) -> list[Event]:
    """k1 fenced at 3 and k2 at 5 when Redis restarts without persistence at 2.0 s; then the new
    tokens are refused on both keys until w1's token 4 on k1 is accepted at 3.52 s and, with
    ``recover_k2``, w2's token 6 on k2 at 4.02 s; the run stops at 6.0 s."""
    h = History()
    h.lease("w0", 3, 0.1, read=(0.12, 0), write=(1.0, 1, "ok"), end=(1.01, "ok", None), key="k1")
    h.lease("w0", 5, 1.1, read=(1.12, 0), write=(1.2, 1, "ok"), end=(1.21, "ok", None), key="k2")
    h.fault("redis-restart-nopersist", 2.0, 2.2, counter_before=5, counter_after=None)
    refused_read(h, "w1", h.lease("w1", 1, 2.5, end=(2.6, "fail", "stale"), key="k1"), 1, 2.52,
                 "k1")  # fmt: skip
    refused_read(h, "w2", h.lease("w2", 1, 2.7, end=(2.8, "fail", "stale"), key="k2"), 1, 2.72,
                 "k2")  # fmt: skip
    refused_read(h, "w1", h.lease("w1", 2, 3.0, end=(3.1, "fail", "stale"), key="k1"), 2, 3.02,
                 "k1")  # fmt: skip
    h.lease("w1", 4, 3.5, read=(3.52, 1), write=(3.6, 2, "ok"), end=(3.61, "ok", None), key="k1")
    if recover_k2:
        h.lease("w2", 6, 4.0, read=(4.02, 1), end=(4.1, "ok", None), key="k2")
    return h.finish(6.0, None)


def rollback_finding(events: list[Event]) -> str:
    report = check_history(events)
    assert report.valid, report.explain()
    (finding,) = [f for f in report.findings if f.kind == "counter-rollback"]
    return finding.message


def test_d_rollback_counts_the_refusals_until_every_key_is_accepted_again() -> None:
    """A rollback the resource recovers from: the refusals counted on both keys up to the last
    key's recovery, and the first access accepted again, with its real time, grant and key."""
    assert rollback_finding(restart_on_two_keys(recover_k2=True)) == (
        "Redis was restarted without persistence at 2.00 s: the fencing counter (at 5 before) "
        "started again from 0, below the fence of the resource (it had accepted tokens up to 5 "
        "on 2 keys), so accesses were refused as stale until the new tokens passed it: 3 "
        "accesses refused as stale on 2 keys from 2.52 s to 4.02 s; accepted again at 3.52 s "
        "(w1's token 4 on key 'k1'), 1.52 s after the restart. 3 later grants got tokens at or "
        "below ones already issued (3 pairs of grants out of order, exempted from property d)."
    )


def test_d_rollback_names_the_keys_still_refused_at_the_end() -> None:
    """One key accepted again, the other refused to the end of the run: the finding says both."""
    assert rollback_finding(restart_on_two_keys(recover_k2=False)) == (
        "Redis was restarted without persistence at 2.00 s: the fencing counter (at 5 before) "
        "started again from 0, below the fence of the resource (it had accepted tokens up to 5 "
        "on 2 keys), so accesses were refused as stale: 3 accesses refused as stale on 2 keys "
        "from 2.52 s to the end of the run (6.00 s); accepted again at 3.52 s (w1's token 4 on "
        "key 'k1'), 1.52 s after the restart, but key 'k2' still refused to the end. Safe, but "
        'stuck there: recovery needs fencing="clock" or persistence (AOF). 3 later grants got '
        "tokens at or below ones already issued (3 pairs of grants out of order, exempted from "
        "property d)."
    )


def test_d_an_old_token_answered_as_the_restart_began_is_not_accepted_again() -> None:
    """An acquire asked for before the restart ended and answered just after it began carries
    the old counter's token (9, above the fence 8): its write accepted 0.06 s after the start
    is not the resource accepting again; the later token 1 is refused to the end."""
    h = History()
    h.lease("w0", 8, 0.1, read=(0.12, 0), write=(1.0, 1, "ok"), end=(1.01, "ok", None))
    h.fault("redis-restart-nopersist", 2.0, 2.2, counter_before=9, counter_after=None)
    h.lease("w2", 9, 2.05, invoked=1.99, read=(2.055, 1), write=(2.06, 2, "ok"),
            end=(2.07, "ok", None))  # fmt: skip
    refused_read(h, "w1", h.lease("w1", 1, 2.5, end=(2.6, "fail", "stale")), 1, 2.52, None)
    assert (
        "so every access was refused as stale: 1 access refused as stale on 1 key from 2.52 s to "
        "the end of the run (6.00 s); none by a grant made after the restart was accepted."
        in rollback_finding(h.finish(6.0, 2))
    )
