"""The lock-level check (property f) on hand-made histories: overlapping claims, refused renewals
without a loss notice, losses without a fault."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fencedlease_lab.harness.checker import check_history
from fencedlease_lab.harness.history import Event
from fencedlease_lab.harness.mutex import (
    LEASE_KEEPING_FAULTS,
    check_mutex,
    claims_from_history,
    could_cost_lease,
)


class Leases:
    """Builds a history of leases; times are seconds (mono), ttl 1000 ms, heartbeat 250 ms."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.ids: dict[str, int] = {}
        self.add("run", "start", "info", 0.0,
                 detail={"ttl_ms": 1000, "heartbeat_ms": 250, "margin_ms": 1000})  # fmt: skip

    def add(self, process: str, op: str, kind: Any, at: float, **fields: Any) -> None:
        self.events.append(Event(process, op, kind, at, 1e9 + at, **fields))

    def grant(self, process: str, token: int, at: float, *, deadline: float | None = None,
              invoked: float | None = None, key: str = "k") -> int:  # fmt: skip
        grant = self.ids[process] = self.ids.get(process, -1) + 1
        self.add(process, "acquire", "invoke", at - 0.01 if invoked is None else invoked,
                 id=grant, key=key)  # fmt: skip
        detail = {} if deadline is None else {"deadline": deadline}
        self.add(process, "acquire", "ok", at, id=grant, key=key, token=token, detail=detail)
        return grant

    def renew(self, process: str, grant: int, at: float, deadline: float | None) -> None:
        if deadline is None:
            self.add(process, "renew", "fail", at, grant=grant, outcome="refused")
        else:
            self.add(process, "renew", "ok", at, grant=grant, detail={"deadline": deadline})

    def release(self, process: str, grant: int, at: float) -> None:
        self.add(process, "release", "invoke", at, grant=grant)
        self.add(process, "release", "ok", at + 0.01, grant=grant)
        self.add(process, "hold", "ok", at + 0.02, id=grant, grant=grant,
                 detail={"body_end": at - 0.001})  # fmt: skip

    def lost(self, process: str, grant: int, at: float, reason: str = "ttl passed") -> None:
        self.add(process, "lease-lost", "info", at, grant=grant, outcome="lease-lost",
                 detail={"reason": reason})  # fmt: skip

    def fault(self, kind: str, start: float, end: float, target: str | None = None) -> None:
        op = self.ids["nemesis"] = self.ids.get("nemesis", -1) + 1
        detail = {"fault": kind, **({"target": target} if target else {})}
        self.add("nemesis", "fault", "invoke", start, id=op, detail=detail)
        self.add("nemesis", "fault", "ok", end, id=op, detail=detail)

    def sorted(self) -> list[Event]:
        return sorted(self.events, key=lambda e: e.mono)

    def check(self) -> Any:
        return check_mutex(self.sorted(), ttl_ms=1000, heartbeat_ms=250)

    def issues(self) -> list[tuple[str, str]]:
        return [(i.kind, i.message) for i in self.check().issues]


def overlapping(second_at: float) -> Leases:
    """w0 granted at 0.10 (deadline 1.10), renewed at 0.35 (deadline 1.35), its renewal refused
    at 1.60 with a notice; w1 granted at ``second_at``."""
    h = Leases()
    g = h.grant("w0", 1, 0.10, deadline=1.10)
    h.renew("w0", g, 0.36, 1.35)
    h.renew("w0", g, 1.60, None)
    h.lost("w0", g, 1.60, "a renewal found the key gone")
    h.fault("redis-pause", 1.0, 1.5)
    h.grant("w1", 2, second_at, deadline=second_at + 1.0)
    return h


def test_overlap_is_caught_naming_both_grants_and_lines() -> None:
    h = overlapping(1.20)
    result = h.check()
    assert result.claims == 2
    ((kind, message),) = h.issues()
    assert kind == "overlap"
    assert message == (
        "key 'k': w1's lease (token 2) was granted at 1.200 s, while the library still told w0 "
        "it held the key: w0's lease (token 1) granted at 0.100 s, confirmed until 1.350 s, "
        "claimed until 1.350 s (deadline); they overlap by 0.150 s."
    )
    issue = result.issues[0]
    events = h.sorted()
    assert [(events[n - 1].process, events[n - 1].op, events[n - 1].type) for n in issue.lines] == [
        ("w0", "acquire", "ok"), ("w0", "renew", "ok"), ("w1", "acquire", "ok"),
    ]  # fmt: skip
    assert issue.at == pytest.approx(1.20)


def test_claims_that_only_touch_do_not_overlap() -> None:
    assert overlapping(1.35).issues() == []
    assert overlapping(1.349).issues()[0][0] == "overlap"


def test_renewals_of_one_grant_never_overlap_themselves() -> None:
    h = Leases()
    g = h.grant("w0", 1, 0.10, deadline=1.10)
    for n in range(1, 8):
        h.renew("w0", g, 0.10 + 0.25 * n, 1.10 + 0.25 * n)
    h.release("w0", g, 2.0)
    h.grant("w1", 2, 2.05, deadline=3.05)
    result = h.check()
    assert result.issues == ()
    claims, unknown_end = claims_from_history(h.sorted(), ttl_ms=1000)
    assert ([c.process for c in claims], unknown_end) == (["w0", "w1"], 0)
    claim = claims[0]
    assert claim.deadline == pytest.approx(2.85)
    assert (claim.end, claim.ended_by) == (2.0, "release")


def test_a_release_ends_the_claim_before_the_deadline() -> None:
    h = Leases()
    g = h.grant("w0", 1, 0.10, deadline=1.10)
    h.release("w0", g, 0.50)
    h.grant("w1", 2, 0.52, deadline=1.52)
    assert h.issues() == []


def test_without_recorded_deadlines_the_acquire_bounds_the_claim() -> None:
    """Today's histories: invoked + ttl is a lower bound of the deadline, cut by body_end."""
    h = Leases()
    h.grant("w0", 1, 0.50, invoked=0.0)
    h.grant("w1", 2, 0.90)
    result = h.check()
    assert result.lower_bound_claims == 2
    ((kind, message),) = h.issues()
    assert kind == "overlap"
    assert "confirmed at least until 1.000 s" in message
    late = Leases()
    late.grant("w0", 1, 0.50, invoked=0.0)
    late.grant("w1", 2, 1.10)  # maybe after w0's true deadline: not a proven overlap
    assert late.issues() == []


def test_a_grant_whose_hold_ended_without_a_release_time_is_not_judged() -> None:
    h = Leases()
    g = h.grant("w0", 1, 0.10, deadline=1.10)
    h.add("w0", "hold", "ok", 0.5, id=g, grant=g)
    h.grant("w1", 2, 0.30, deadline=1.30)
    result = h.check()
    assert (result.claims, result.unknown_end, result.issues) == (1, 1, ())


def test_overlap_across_a_restart_without_persistence_is_exempt() -> None:
    h = overlapping(1.20)
    h.fault("redis-restart-nopersist", 1.15, 1.18)
    result = h.check()
    assert result.issues == ()
    assert len(result.exempt) == 1
    assert result.exempt[0].endswith("redis-restart-nopersist at 1.150 s emptied Redis in between.")


def test_a_refused_renewal_without_a_loss_notice_is_caught() -> None:
    h = Leases()
    g = h.grant("w0", 1, 0.10, deadline=1.10)
    h.renew("w0", g, 0.36, None)
    h.fault("redis-restart-nopersist", 0.2, 0.3)
    ((kind, message),) = h.issues()
    assert kind == "refusal-noticed"
    assert message == (
        "w0's lease (grant 0) had a renewal answered 0 at 0.360 s but was never declared lost: "
        "its holder was not told."
    )


def test_a_refused_renewal_with_a_loss_notice_passes() -> None:
    h = overlapping(1.40)
    result = h.check()
    assert (result.refusals, result.losses, result.issues) == (1, 1, ())


def test_a_renewal_confirmed_after_a_refusal_is_caught() -> None:
    h = overlapping(1.40)
    h.renew("w0", 0, 1.70, 2.70)
    kinds = [kind for kind, _ in h.issues()]
    assert "refusal-noticed" in kinds
    assert any("a lost lease came back" in message for _, message in h.issues())


def loss_with(fault: tuple[str, float, float, str | None] | None) -> Leases:
    h = Leases()
    g = h.grant("w0", 1, 0.10, deadline=1.10)
    h.lost("w0", g, 3.0)
    if fault is not None:
        h.fault(*fault)
    return h


def test_a_loss_without_a_fault_is_caught() -> None:
    ((kind, message),) = loss_with(None).issues()
    assert kind == "loss-explained"
    assert message == (
        "w0's lease (token 1) was declared lost at 3.000 s (ttl passed) with no fault that can "
        "cost a lease on Redis or on w0 in the 1.25 s (ttl + one heartbeat) before: the library "
        "let a healthy lease go."
    )


def test_a_loss_with_only_lease_keeping_faults_in_force_is_caught_and_names_them() -> None:
    h = loss_with(("latency", 1.0, 4.0, "w0"))
    h.fault("client-kill", 2.0, 2.6, "w1")  # another worker's connection
    h.fault("clock", 2.5, 2.9, None)
    ((kind, message),) = h.issues()
    assert kind == "loss-explained"
    assert message == (
        "w0's lease (token 1) was declared lost at 3.000 s (ttl passed) with no fault that can "
        "cost a lease on Redis or on w0 in the 1.25 s (ttl + one heartbeat) before (only "
        "clock, latency, which cost no lease): the library let a healthy lease go."
    )


@pytest.mark.parametrize(
    "extra", [("client-kill", 2.0, 2.6, "w0"), ("script-flush", 2.5, 2.5, None)]
)
def test_latency_with_a_reconnect_or_a_script_reload_explains_a_loss(
    extra: tuple[str, float, float, str | None],
) -> None:
    # Each makes the renewal take a second round trip, which pays the slow link's delay again.
    h = loss_with(("latency", 1.0, 4.0, "w0"))
    h.fault(*extra)
    assert h.issues() == []
    alone = loss_with(extra)
    assert [kind for kind, _ in alone.issues()] == ["loss-explained"]


@pytest.mark.parametrize(
    ("process", "at", "explained"),
    [
        ("w0", 2.3, True),  # the holder connected during the fault, within ttl + heartbeat
        ("w0", 1.7, False),  # 1.3 s before the notice: outside ttl + heartbeat
        ("w0", 3.1, False),  # after the notice
        ("w1", 2.3, False),  # another worker's connection
    ],
)
def test_latency_with_a_connection_made_meanwhile_explains_a_loss(
    process: str, at: float, explained: bool
) -> None:
    """A connection made under the slow link pays its handshake's round trips late (a dead
    pooled connection made again: the renewal's, say, after Redis restarted long before)."""
    h = loss_with(("latency", 1.0, 4.0, "w0"))
    h.add(process, "connect", "info", at)
    assert [kind for kind, _ in h.issues()] == ([] if explained else ["loss-explained"])
    # Without a latency fault, a connection explains nothing.
    alone = loss_with(None)
    alone.add(process, "connect", "info", at)
    assert [kind for kind, _ in alone.issues()] == ["loss-explained"]


def test_which_faults_could_cost_a_healthy_lease() -> None:
    # The latency toxic delays replies by at most 0.25 ttl: a heartbeat of ttl/4 (or one delay,
    # the larger) and two more (a wait for a batch in flight, then its own reply) fit in the ttl...
    assert not could_cost_lease("latency", 1000, 250)
    assert not could_cost_lease("latency", 1000, 499)
    # ...but not with a heartbeat of ttl/2 (the largest the library allows).
    assert could_cost_lease("latency", 1000, 500)
    kept = ("client-kill", "script-flush", "clock", "resource-link")
    assert [k for k in kept if could_cost_lease(k, 1000, 250)] == []
    assert could_cost_lease("partition", 1000, 250)
    assert could_cost_lease("evict", 1000, 250)
    assert could_cost_lease("no-such-kind", 1000, 250)  # unknown: may
    assert {"latency", "client-kill", "script-flush", "clock", "resource-link"} == (
        LEASE_KEEPING_FAULTS
    )


@pytest.mark.parametrize(
    "fault",
    [
        ("pause-holder", 1.0, 2.9, "w0"),  # aimed at the holder, during the window
        ("partition", 1.0, 1.8, "w0"),  # healed 1.2 s before the notice: within ttl + heartbeat
        ("redis-pause", 2.5, 4.0, None),  # a fault of Redis hits every holder
    ],
)
def test_a_loss_during_a_fault_window_is_explained(
    fault: tuple[str, float, float, str | None],
) -> None:
    assert loss_with(fault).issues() == []


@pytest.mark.parametrize(
    "fault",
    [
        ("partition", 1.0, 1.7, "w0"),  # healed 1.3 s before: outside ttl + heartbeat
        ("partition", 1.0, 2.9, "w1"),  # another worker's
        ("redis-pause", 3.1, 4.0, None),  # after the notice
        ("clock", 1.0, 4.0, None),  # a wall-clock jump must cost no lease, so it excuses none
        ("latency", 1.0, 4.0, "w0"),  # replies late by < ttl - heartbeat cost no lease
        ("client-kill", 2.0, 2.6, "w0"),  # the next renewal reconnects
    ],
)
def test_a_fault_outside_the_window_or_elsewhere_explains_nothing(
    fault: tuple[str, float, float, str | None],
) -> None:
    assert [kind for kind, _ in loss_with(fault).issues()] == ["loss-explained"]


def refused_release(fault: tuple[str, float, float, str | None] | None) -> Leases:
    """w0 granted at 0.10, renewed until 3.35; its release sent at 2.80 is refused at 2.90."""
    h = Leases()
    g = h.grant("w0", 1, 0.10, deadline=1.10)
    h.renew("w0", g, 2.35, 3.35)
    h.add("w0", "release", "invoke", 2.80, grant=g)
    h.add("w0", "release", "fail", 2.90, grant=g, outcome="refused")
    if fault is not None:
        h.fault(*fault)
    return h


@pytest.mark.parametrize(
    ("fault", "explained"),
    [
        (None, False),
        (("client-kill", 2.84, 2.86, "w0"), True),  # the release's connection killed after it ran
        (("client-kill", 2.70, 2.80, "w0"), True),  # ends as the release goes out
        (("client-kill", 2.60, 2.79, "w0"), False),  # over before the release was sent
        (("client-kill", 2.91, 2.95, "w0"), False),  # after the refusal
        (("client-kill", 2.84, 2.86, "w1"), False),  # another worker's connections
        (("script-flush", 2.84, 2.86, None), False),  # breaks no connection
    ],
)
def test_a_refused_release_is_explained_by_a_killed_connection_while_in_flight(
    fault: tuple[str, float, float, str | None] | None, explained: bool
) -> None:
    """The release is sent once more on a new connection; if the first had run, the second
    answers 0 and the library reports the lease lost: the safe side of a doubt it cannot settle."""
    issues = refused_release(fault).issues()
    if explained:
        assert issues == []
    else:
        assert [kind for kind, _ in issues] == ["loss-explained"]
        assert "(the release was refused)" in issues[0][1]


def test_a_loss_because_the_manager_closed_needs_no_fault() -> None:
    h = Leases()
    g = h.grant("w0", 1, 0.10, deadline=1.10)
    h.lost("w0", g, 0.5, "the lease manager was closed while the lease was held")
    result = h.check()
    assert (result.losses, result.issues) == (0, ())


# --- as property f of the checker -------------------------------------------------------------


def test_property_f_names_what_it_could_not_judge() -> None:
    """A history like today's (no deadlines, no renew events) is judged on what it has."""
    h = Leases()
    g = h.grant("w0", 1, 0.10)
    h.lost("w0", g, 3.0)
    result = check_history(h.sorted()).property("mutual-exclusion")
    assert result.letter == "f"
    assert result.status == "fail"
    assert result.note == (
        "judged: 1 claim(s), 0 refused renewal(s), 1 loss notice(s), 2 lock operation(s) over "
        "1 key(s); not judged: "
        "refusal-noticed: history lacks renew events (ok / fail refused); 1 claim(s) judged on "
        "a lower bound of their deadline (acquire invoked + ttl): the history lacks "
        "acquire/renew detail.deadline"
    )
    assert result.violations[0].message.startswith("[loss-explained] w0's lease (token 1)")


def test_property_f_not_checked_on_an_empty_history() -> None:
    result = check_history(Leases().sorted()).property("mutual-exclusion")
    assert result.status == "not checked"
    assert result.note is not None
    assert "not judged: overlap: history lacks grants" in result.note


def test_property_f_overlap_exempt_by_restart_becomes_a_finding() -> None:
    h = overlapping(1.20)
    h.fault("redis-restart-nopersist", 1.15, 1.18)
    report = check_history(h.sorted())
    assert report.property("mutual-exclusion").violations == ()
    (finding,) = [f for f in report.findings if f.kind == "lease-overlap-after-restart"]
    assert finding.message.startswith("1 pair(s) of leases overlapped across a restart")
    assert finding.remedy is not None


# --- generated claims -------------------------------------------------------------------------


@st.composite
def turns(draw: st.DrawFn) -> list[tuple[str, float, float, list[float], float]]:
    """Leases on one key taking turns: (process, granted, first deadline, renewal sends,
    release), each granted no earlier than the previous claim's end (its release or its last
    deadline, whichever came first)."""
    out = []
    free = 0.0
    for n in range(draw(st.integers(1, 12))):
        granted = free + draw(st.sampled_from([0.0, 0.001, 0.3]))
        sends = sorted(draw(st.lists(st.floats(0.0, 3.0), max_size=4)))
        sends = [granted + s for s in sends]
        deadline = granted + 1.0
        last = max([deadline, *(s + 1.0 for s in sends)])
        release = draw(st.none() | st.floats(0.01, 5.0))
        end = last if release is None else min(last, granted + release)
        out.append((f"w{n % 3}", granted, deadline, sends,
                    granted + release if release is not None else -1.0))  # fmt: skip
        free = end
    return out


def _build(schedule: list[tuple[str, float, float, list[float], float]]) -> Leases:
    h = Leases()
    for token, (process, granted, deadline, sends, release) in enumerate(schedule, 1):
        g = h.grant(process, token, granted, deadline=deadline)
        for send in sends:
            if release < 0 or send < release:
                h.renew(process, g, send + 0.001, send + 1.0)
        if release >= 0:
            h.release(process, g, release)
    return h


@settings(max_examples=150, deadline=None)
@given(schedule=turns())
def test_leases_taking_turns_never_overlap(
    schedule: list[tuple[str, float, float, list[float], float]],
) -> None:
    result = _build(schedule).check()
    assert result.issues == ()
    assert result.claims == len(schedule)


@settings(max_examples=150, deadline=None)
@given(schedule=turns(), early=st.floats(0.002, 0.5))
def test_a_grant_moved_into_the_previous_claim_is_caught(
    schedule: list[tuple[str, float, float, list[float], float]], early: float
) -> None:
    if len(schedule) < 2:
        schedule = [*schedule, ("w9", schedule[0][1] + 6.0, schedule[0][1] + 7.0, [], -1.0)]
    claims, _ = claims_from_history(_build(schedule).sorted(), ttl_ms=1000)
    victim = len(schedule) - 1
    previous_end = claims[victim - 1].end
    process, _, _, _, _ = schedule[victim]
    moved = previous_end - min(early, (previous_end - claims[victim - 1].start) / 2)
    schedule[victim] = (process, moved, moved + 1.0, [], -1.0)
    issues = _build(schedule).check().issues
    assert [i.kind for i in issues] == ["overlap"]
    assert issues[0].at == pytest.approx(moved)
