"""The lease faults' pure parts (``evict``, ``slow-cut``): reading a lease value's token, the
board's stretch hand-shake, where the kinds may overlap; the lock check's rule for an overlap after
an eviction; and the asyncio rule of property c (no access after the loss notice) on hand-made
histories."""

from __future__ import annotations

import multiprocessing
import threading
from typing import Any

import pytest

from fencedlease_lab.harness.checker import check_history
from fencedlease_lab.harness.faults_lease import owner_token, same_owner, take_stretch
from fencedlease_lab.harness.history import Event
from fencedlease_lab.harness.kinds import DEFAULT_FAULTS, FAULTS, fault_duration_s
from fencedlease_lab.harness.mutex import check_mutex
from fencedlease_lab.harness.properties.loss_reported import HANDED_OFF_S, asyncio_workers
from fencedlease_lab.harness.schedule import may_overlap
from fencedlease_lab.harness.workload import BODY, Board, unshunned


def test_owner_token_reads_the_fencing_token_of_a_lease_value() -> None:
    assert owner_token("17:abcdef") == 17
    assert owner_token(b"9223372036854775807:x") == 2**63 - 1
    assert owner_token(None) is None
    assert owner_token("garbage") is None
    assert owner_token(":owner") is None


def test_the_kinds_are_default_and_scoped_to_the_run() -> None:
    assert "evict" in DEFAULT_FAULTS and "slow-cut" in DEFAULT_FAULTS
    assert DEFAULT_FAULTS[-1] == "redis-restart-nopersist"
    evict, slow = FAULTS["evict"], FAULTS["slow-cut"]
    assert (evict.needs, evict.disrupts, evict.targets, evict.server_wide) == (
        None, True, True, False,
    )  # fmt: skip
    assert (slow.needs, slow.disrupts, slow.targets, slow.server_wide) == (
        "proxy", True, True, False,
    )  # fmt: skip
    assert fault_duration_s("evict", 900, 300) == pytest.approx(1.5)
    assert fault_duration_s("slow-cut", 900, 300) == pytest.approx(0.6 + 1.8)


def test_where_evict_and_slow_cut_may_overlap() -> None:
    assert not may_overlap("evict", 0, "latency", 0)  # the latency fault's lease must survive
    assert may_overlap("evict", 0, "latency", 1)
    # Its victim must hold a lease and renew it after the DEL: nothing cuts it off.
    assert not may_overlap("evict", 0, "partition", 0)
    assert not may_overlap("evict", 0, "kernel-drop", 0)
    assert may_overlap("evict", 0, "partition", 1)
    assert may_overlap("evict", 0, "client-kill", 0)
    assert not may_overlap("evict", 0, "slow-grant", 1)  # both shun a key for the others
    assert may_overlap("evict", 0, "clock", None)
    assert not may_overlap("evict", 0, "redis-pause", None)
    assert not may_overlap("evict", 0, "redis-restart-aof", None)
    assert not may_overlap("evict", 0, "pause-holder", 0)
    assert may_overlap("evict", 0, "pause-holder", 1)
    assert not may_overlap("evict", 0, "evict", 1)
    assert not may_overlap("slow-cut", 0, "latency", 0)
    assert may_overlap("slow-cut", 0, "latency", 1)
    assert not may_overlap("slow-cut", 0, "evict", 0)
    assert may_overlap("slow-cut", 0, "script-flush", None)
    assert not may_overlap("slow-cut", 0, "redis-pause", None)
    assert not may_overlap("slow-cut", 0, "slow-cut", 1)


def board_in_body(token: int, key: int) -> Board:
    board = Board(multiprocessing.get_context("spawn"), 2)
    board.set(1, "token", token)
    board.set(1, "key", key)
    board.set_phase(1, BODY)
    return board


def test_a_stretch_taken_in_the_body_names_the_lease() -> None:
    board = board_in_body(token=42, key=3)
    asked = threading.Event()
    stop = threading.Event()

    def worker() -> None:  # the shown cycle takes the stretch, as Cycle.body_left does
        while board.get(1, "stretch") == 0 and not stop.is_set():
            stop.wait(0.001)
        asked.set()
        board.set(1, "stretch", 0)

    thread = threading.Thread(target=worker)
    thread.start()
    try:
        assert take_stretch(board, 1, 1500, 30.0, stop) == (42, 3)
    finally:
        stop.set()
        thread.join()
    assert asked.is_set()
    assert board.get(0, "stretch") == 0


def test_a_stretch_no_one_takes_is_withdrawn() -> None:
    board = board_in_body(token=42, key=3)
    assert take_stretch(board, 1, 1500, 0.02, threading.Event()) is None
    assert board.get(1, "stretch") == 0


# -- the lock check: an overlap after an eviction ----------------------------------------------


def evicted(*, renewed_after_delete: bool, fault_at: float = 0.3) -> list[Event]:
    """w0 holds key k (token 1, granted at 0.1, deadline 1.1, renewed at 0.35 -> deadline 1.3);
    evict (fault from ``fault_at``) deletes it at 0.40; w1 is granted k at 0.45 (token 2). w0's next
    renewal, sent at 0.60, is answered 0 and it is told at 0.61 -- or, with
    ``renewed_after_delete``, that renewal is confirmed (deadline 1.6) and w0 is never told."""
    events: list[Event] = []

    def add(process: str, op: str, kind: Any, at: float, **fields: Any) -> None:
        events.append(Event(process, op, kind, at, 1e9 + at, **fields))

    add("run", "start", "info", 0.0, detail={"ttl_ms": 1000, "heartbeat_ms": 250})
    add("w0", "acquire", "invoke", 0.09, id=0, key="k")
    add("w0", "acquire", "ok", 0.1, id=0, key="k", token=1, detail={"deadline": 1.1})
    add("nemesis", "fault", "invoke", fault_at, id=0, detail={"fault": "evict", "target": "w0"})
    add("w0", "renew", "ok", 0.36, grant=0, detail={"deadline": 1.3})
    add("w1", "acquire", "invoke", 0.44, id=0, key="k")
    add("w1", "acquire", "ok", 0.45, id=0, key="k", token=2, detail={"deadline": 1.44})
    if renewed_after_delete:
        add("w0", "renew", "ok", 0.61, grant=0, detail={"deadline": 1.6})
    else:
        add("w0", "renew", "fail", 0.61, grant=0, outcome="refused")
        add("w0", "lease-lost", "info", 0.611, grant=0, outcome="lease-lost",
            detail={"reason": "a renewal found the key gone"})  # fmt: skip
    add("w0", "release", "invoke", 1.0, grant=0)
    add("w0", "release", "fail", 1.01, grant=0)
    add("w0", "hold", "fail", 1.02, id=0, grant=0, outcome="lease-lost", detail={"body_end": 0.99})
    done = {"fault": "evict", "target": "w0", "key": "k", "deleted": True, "deleted_mono": 0.40}
    add("nemesis", "fault", "ok", 1.9, id=0, detail=done)
    add("w1", "release", "invoke", 1.2, grant=0)
    add("w1", "release", "ok", 1.21, grant=0)
    add("w1", "hold", "ok", 1.22, id=0, grant=0, detail={"body_end": 1.19})
    return sorted(events, key=lambda e: e.mono)


def test_an_overlap_the_holder_could_not_know_of_is_exempt() -> None:
    verdict = check_mutex(evicted(renewed_after_delete=False), ttl_ms=1000, heartbeat_ms=250)
    assert verdict.issues == ()
    assert verdict.exempt == ()
    (words,) = verdict.evicted
    assert "evict deleted w0's key at 0.400 s" in words
    assert "w1's lease (token 2) was granted at 0.450 s" in words


def test_an_overlap_after_an_eviction_is_its_own_finding() -> None:
    report = check_history(evicted(renewed_after_delete=False))
    assert report.property("mutual-exclusion").violations == ()
    assert [f.kind for f in report.findings if f.kind.startswith("lease-overlap")] == [
        "lease-overlap-after-evict"
    ]
    (finding,) = [f for f in report.findings if f.kind == "lease-overlap-after-evict"]
    assert finding.message.startswith(
        "1 pair(s) of leases overlapped after an evict deleted the first one's key under its "
        "holder, before a renewal could tell it (exempted from property f: its holder could not "
        "know before a renewal answered 0): key 'k': w1's lease (token 2) was granted at 0.450 s"
    )
    assert finding.remedy is not None and "noeviction" in finding.remedy


def test_an_eviction_that_began_before_the_grant_it_deleted_explains_the_overlap() -> None:
    """An evict that is not its episode's lead begins whatever its victim does, and waits for
    the victim's next lease: the fault begins before the grant, the DEL comes after it."""
    verdict = check_mutex(
        evicted(renewed_after_delete=False, fault_at=0.05), ttl_ms=1000, heartbeat_ms=250
    )
    assert verdict.issues == ()
    assert verdict.exempt == ()
    (words,) = verdict.evicted
    assert "evict deleted w0's key at 0.400 s" in words


def test_a_renewal_confirmed_after_the_delete_is_an_overlap() -> None:
    verdict = check_mutex(evicted(renewed_after_delete=True), ttl_ms=1000, heartbeat_ms=250)
    assert verdict.evicted == ()
    (issue,) = [i for i in verdict.issues if i.kind == "overlap"]
    assert issue.at == pytest.approx(0.45)
    assert "w0's lease (token 1) granted at 0.100 s, confirmed until 1.600 s" in issue.message


def test_an_eviction_of_another_key_explains_nothing() -> None:
    events = [
        e
        if not (e.op == "fault" and e.type == "ok")
        else Event(
            e.process, e.op, e.type, e.mono, e.wall, id=e.id, detail={**e.detail, "key": "other"}
        )
        for e in evicted(renewed_after_delete=False)
    ]
    verdict = check_mutex(events, ttl_ms=1000, heartbeat_ms=250)
    assert verdict.evicted == ()
    assert [i.kind for i in verdict.issues] == ["overlap"]


# -- property c: an asyncio body is cancelled at its loss notice --------------------------------


def body_after_loss(
    kinds: list[str],
    write_at: float,
    lost_at: float | None = 0.5,
    others: tuple[tuple[str, str | None, float, float], ...] = (),
    comeback: dict[str, Any] | None = None,
) -> list[Event]:
    """w1 (of ``kinds``) holds key a (token 3) from 0.1; evict deletes its key at 0.3; it is told
    of its loss at ``lost_at`` (None: never), and invokes its write at ``write_at`` (refused as
    stale). ``others``: more faults, each ``(kind, target, start, end)``; ``comeback``: what the
    nemesis saw of the key after the delete (more of the evict's detail)."""
    events: list[Event] = []

    def add(process: str, op: str, kind: Any, at: float, **fields: Any) -> None:
        events.append(Event(process, op, kind, at, 1e9 + at, **fields))

    add("run", "start", "info", 0.0,
        detail={"ttl_ms": 1000, "heartbeat_ms": 250, "worker_kinds": kinds})  # fmt: skip
    w1 = {"grant": 0, "key": "a", "token": 3}
    add("nemesis", "fault", "invoke", 0.2, id=0, detail={"fault": "evict", "target": "w1"})
    add("w1", "acquire", "invoke", 0.09, id=0, key="a")
    add("w1", "acquire", "ok", 0.1, id=0, key="a", token=3, outcome="granted",
        detail={"deadline": 1.1})  # fmt: skip
    add("w1", "read", "invoke", 0.11, id=1, **w1)
    add("w1", "read", "ok", 0.12, id=1, **w1, value=0, outcome="accepted")
    if lost_at is not None:
        add("w1", "renew", "fail", lost_at, grant=0, key="a", token=3, outcome="refused")
        reason = "a renewal found the key gone or owned by another owner"
        add("w1", "lease-lost", "info", lost_at, **w1, outcome="lease-lost",
            detail={"reason": reason})  # fmt: skip
    add("w1", "write", "invoke", write_at, id=2, **w1, value=1)
    add("w1", "write", "fail", write_at + 0.01, id=2, **w1, outcome="stale")
    add("w1", "hold", "fail", write_at + 0.02, id=0, **w1, outcome="stale",
        detail={"body_end": write_at + 0.01})  # fmt: skip
    add("nemesis", "fault", "ok", 2.0, id=0,
        detail={"fault": "evict", "target": "w1", "key": "a", "token": 3, "deleted": True,
                "deleted_mono": 0.3, **(comeback or {})})  # fmt: skip
    for i, (kind, target, start, end) in enumerate(others, 1):
        add("nemesis", "fault", "invoke", start, id=i, detail={"fault": kind, "target": target})
        add("nemesis", "fault", "ok", end, id=i, detail={"fault": kind, "target": target})
    add("run", "stop", "info", 3.0)
    add("run", "final", "ok", 3.0, key="a", value=0)
    return sorted(events, key=lambda e: e.mono)


def test_the_worker_kinds_come_from_the_start_event() -> None:
    events = body_after_loss(["sync", "asyncio", "threads", "asyncio"], 1.0)
    assert asyncio_workers(events) == frozenset({"w1", "w3"})
    assert asyncio_workers(events[1:]) == frozenset()


def test_an_asyncio_body_that_runs_on_after_its_loss_is_reported() -> None:
    report = check_history(body_after_loss(["sync", "asyncio"], 1.0))
    (violation,) = report.property("loss-reported").violations
    assert violation.message == (
        "key 'a': w1's lease (token 3) was declared lost at 0.50 s, but its asyncio body went "
        "on: its write was invoked at 1.00 s; the body is cancelled at the loss notice."
    )


@pytest.mark.parametrize("kind", ["sync", "threads"])
def test_a_thread_body_is_not_judged_by_the_cancel_rule(kind: str) -> None:
    report = check_history(body_after_loss(["sync", kind], 1.0))
    assert report.property("loss-reported").violations == ()


def test_an_access_handed_off_before_the_notice_is_not_reported() -> None:
    report = check_history(body_after_loss(["sync", "asyncio"], 0.5 + HANDED_OFF_S))
    assert report.property("loss-reported").violations == ()


def test_an_evicted_holder_is_told_within_two_heartbeats() -> None:
    report = check_history(body_after_loss(["sync", "sync"], 1.0, lost_at=0.8))
    assert report.property("loss-reported").violations == ()
    assert report.property("loss-reported").checked >= 2  # the grant, and the eviction


@pytest.mark.parametrize(
    ("lost_at", "late"), [(0.81, "was told only 0.51 s after it"), (None, "was never told")]
)
def test_an_evicted_holder_told_late_or_never_is_reported(lost_at: float | None, late: str) -> None:
    report = check_history(body_after_loss(["sync", "threads"], 1.0, lost_at=lost_at))
    (violation,) = report.property("loss-reported").violations
    assert violation.message == (
        "key 'a': w1's key (token 3) was deleted by evict at 0.30 s and its body ran on until "
        f"1.01 s, but it {late}; its next renewal is answered 0: the bound is two heartbeats "
        "(0.50 s), at 0.80 s."
    )


# The latency toxic of a 1000 ms ttl delays a reply by up to 200 + 50 ms.
SLOWED = [
    ("latency", "w1", 0.8 + 0.25),  # the renewal answered 0 may come late by the toxic
    ("partition", "w1", 0.9 + 0.5),  # two heartbeats from the cut's end
    ("pause-holder", "w1", 0.9 + 0.5),
    ("redis-pause", None, 0.9 + 0.5),  # a fault on all of Redis slows every holder
]


@pytest.mark.parametrize(("kind", "target", "due"), SLOWED)
def test_an_evicted_holder_slowed_by_another_fault_has_until_it_ends(
    kind: str, target: str | None, due: float
) -> None:
    on_time = body_after_loss(
        ["sync", "sync"], 2.0, lost_at=due, others=((kind, target, 0.2, 0.9),)
    )
    assert check_history(on_time).property("loss-reported").violations == ()
    late = body_after_loss(
        ["sync", "sync"], 2.0, lost_at=due + 0.02, others=((kind, target, 0.2, 0.9),)
    )
    (violation,) = check_history(late).property("loss-reported").violations
    assert violation.message.endswith(
        f"was told only {due + 0.02 - 0.3:.2f} s after it; its next renewal is answered 0: the "
        "bound is two heartbeats (0.50 s) counted from the faults that slowed its renewal, at "
        f"{due:.2f} s."
    )


@pytest.mark.parametrize(
    ("kind", "target", "start"),
    [
        ("partition", "w0", 0.2),  # on another worker
        ("clock", None, 0.2),  # a wall-clock jump moves no renewal
        ("partition", "w1", 0.85),  # begins after the notice was due
        ("partition", "w1", -0.5),  # ended two heartbeats before the delete (below)
    ],
)
def test_a_fault_that_cannot_slow_the_renewal_leaves_the_bound_at_two_heartbeats(
    kind: str, target: str | None, start: float
) -> None:
    end = -0.21 if start < 0 else start + 0.7
    events = body_after_loss(
        ["sync", "sync"], 2.0, lost_at=0.82, others=((kind, target, start, end),)
    )
    (violation,) = check_history(events).property("loss-reported").violations
    assert violation.message.endswith("the bound is two heartbeats (0.50 s), at 0.80 s.")


def test_an_evicted_body_that_ended_in_time_is_not_judged() -> None:
    report = check_history(body_after_loss(["sync", "sync"], 0.7, lost_at=None))
    assert report.property("loss-reported").violations == ()


def test_an_evicted_key_set_again_for_its_holder_is_reported() -> None:
    """The holder was told in time and its body ended before the bound, but the nemesis saw the
    key come back under the holder's owner token: its renewal recreated the deleted key."""
    recreated = {"recreated": True, "next_token": 1, "back_mono": 0.56}
    report = check_history(body_after_loss(["sync", "sync"], 0.7, lost_at=None, comeback=recreated))
    (violation,) = report.property("loss-reported").violations
    assert violation.message == (
        "key 'a': w1's key (token 3) was deleted by evict at 0.30 s and was set again for the "
        "same owner (token 1) by 0.56 s: a renewal of a missing key recreated it instead of "
        "answering 0."
    )
    assert violation.at == pytest.approx(0.56)


@pytest.mark.parametrize(
    "comeback",
    [
        {"recreated": False, "next_token": 4, "back_mono": 0.45},  # the next owner took the key
        {},  # the key did not come back while the nemesis watched
    ],
)
def test_an_evicted_key_taken_by_another_owner_or_left_missing_is_no_recreation(
    comeback: dict[str, Any],
) -> None:
    report = check_history(body_after_loss(["sync", "sync"], 1.0, lost_at=0.8, comeback=comeback))
    assert report.property("loss-reported").violations == ()
    unjudged = check_history(body_after_loss(["sync", "sync"], 1.0, lost_at=0.8))
    extra = report.property("loss-reported").checked - unjudged.property("loss-reported").checked
    assert extra == (1 if comeback else 0)


def test_same_owner_compares_the_owner_tokens_of_two_lease_values() -> None:
    assert same_owner("173:ab12", b"1:ab12")  # another fencing token, the same owner
    assert not same_owner("173:ab12", "174:cd34")
    assert not same_owner("173:ab12", None)
    assert not same_owner(None, "1:ab12")
    assert not same_owner("173:ab12", "garbage")


def test_a_shunned_key_gives_way_to_the_next() -> None:
    keys = ("k0", "k1", "k2")
    assert unshunned(keys, "k1", 2) == "k2"
    assert unshunned(keys, "k2", 3) == "k0"  # wraps around
    assert unshunned(keys, "k1", 3) == "k1"  # another key is shunned
    assert unshunned(keys, "k1", 0) == "k1"  # none is


def late_grant(deadline: float) -> list[Event]:
    """w0's acquire is sent at 0.0 and granted at 1.5 (its hand-off wait took longer than the
    ttl), confirmed until ``deadline``; it is declared lost at 1.51, with no fault anywhere."""
    events: list[Event] = []

    def add(process: str, op: str, kind: Any, at: float, **fields: Any) -> None:
        events.append(Event(process, op, kind, at, 1e9 + at, **fields))

    add("run", "start", "info", 0.0, detail={"ttl_ms": 1000, "heartbeat_ms": 250})
    add("w0", "acquire", "invoke", 0.0, id=0, key="k")
    add("w0", "acquire", "ok", 1.5, id=0, key="k", token=4, detail={"deadline": deadline})
    reason = "ttl_ms passed since the last confirmed acquire or renewal"
    add("w0", "lease-lost", "info", 1.51, grant=0, outcome="lease-lost", detail={"reason": reason})
    add("w0", "release", "invoke", 1.6, grant=0)
    add("w0", "release", "fail", 1.61, grant=0)
    add("w0", "hold", "fail", 1.62, id=0, grant=0, outcome="lease-lost", detail={"body_end": 1.55})
    return events


def test_a_grant_that_came_after_its_deadline_is_not_a_healthy_lease_let_go() -> None:
    verdict = check_mutex(late_grant(deadline=1.0), ttl_ms=1000, heartbeat_ms=250)
    assert verdict.issues == ()
    assert verdict.losses == 0
    assert verdict.expired_on_arrival == (
        "w0's lease of 'k' (token 4) granted at 1.500 s, confirmed only until 1.000 s",
    )


def test_a_grant_that_came_with_less_than_two_heartbeats_left_is_not_judged() -> None:
    verdict = check_mutex(late_grant(deadline=1.99), ttl_ms=1000, heartbeat_ms=250)
    assert verdict.issues == ()
    assert verdict.expired_on_arrival == (
        "w0's lease of 'k' (token 4) granted at 1.500 s, confirmed only until 1.990 s",
    )


def test_a_live_grant_lost_with_no_fault_is_still_a_violation() -> None:
    verdict = check_mutex(late_grant(deadline=2.0), ttl_ms=1000, heartbeat_ms=250)
    assert [i.kind for i in verdict.issues] == ["loss-explained"]
    assert verdict.expired_on_arrival == ()


def test_the_evictions_of_a_run_take_turns() -> None:
    from fencedlease_lab.harness.faults_lease import evict_number, slow_replies
    from fencedlease_lab.harness.schedule import draw_schedule

    schedule = draw_schedule(
        ["evict", "latency", "evict", "evict"], seed=3, workers=4, ttl_ms=1000,
        heartbeat_ms=250, body_ms=20, lead_ms=1000,
    )  # fmt: skip
    evicts = [f.index for f in schedule.faults if f.kind == "evict"]
    assert [evict_number(schedule, index) for index in evicts] == [0, 1, 2]
    assert slow_replies("nemesis-slow", 333) == {
        "type": "latency", "name": "nemesis-slow", "stream": "downstream",
        "attributes": {"latency": 333, "jitter": 0},
    }  # fmt: skip


@pytest.mark.parametrize(
    ("pause", "reported"),
    [
        (("pause-holder", "w1", 0.4, 0.9), False),  # frozen after the notice: recorded late
        (("pause-holder", "w0", 0.4, 0.9), True),  # another worker's pause explains nothing
        (("pause-holder", "w1", 0.05, 0.3), True),  # over before the notice
    ],
)
def test_an_asyncio_access_recorded_after_its_worker_was_frozen_is_not_judged(
    pause: tuple[str, str, float, float], reported: bool
) -> None:
    """A pause-holder of the worker between the loss notice and the access's invocation: the
    access was handed to the store's thread before the notice and recorded when the process ran
    again."""
    report = check_history(body_after_loss(["sync", "asyncio"], 1.0, others=(pause,)))
    violations = [
        v for v in report.property("loss-reported").violations if "asyncio body" in v.message
    ]
    assert len(violations) == int(reported)
