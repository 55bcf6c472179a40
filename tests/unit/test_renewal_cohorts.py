"""Renewal cohorts: the leases a batch confirmed together share one schedule item per heartbeat
and deadline, and behave exactly as if each had its own."""

from __future__ import annotations

from fencedlease._core.schedule import RenewalEntry, RenewalSchedule, renewal_items
from fencedlease._core.state import LeaseState, LossReason


def entries(
    schedule: RenewalSchedule, n: int, ttl_ms: int = 4000, beat_ms: int = 1000
) -> list[RenewalEntry]:
    made = []
    for i in range(n):
        state = LeaseState(f"k{i}", "o", 1, ttl_ms, 10.0 + ttl_ms / 1000, 1e9)
        entry = RenewalEntry(state, beat_ms, None)
        schedule.add(entry, 10.0)
        made.append(entry)
    return made


def renew_all(schedule: RenewalSchedule, now: float, limit: int) -> list[list[RenewalEntry]]:
    """Pop and confirm batches at ``now`` until nothing is due; the batches."""
    batches = []
    while batch := schedule.pop_batch(now, limit):
        renewal_items(batch)
        schedule.apply(batch, now, 1e9, [7] * len(batch), now)
        batches.append(batch)
    return batches


def test_a_confirmed_batch_is_one_item_per_heap() -> None:
    schedule = RenewalSchedule()
    made = entries(schedule, 10)
    assert [len(b) for b in renew_all(schedule, 11.0, 500)] == [10]
    live_due = [item for item in schedule._due if any(e.next_due == item[0] for e in item[2])]
    assert [(item[0], len(item[2])) for item in live_due] == [(12.0, 10)]
    assert sorted(item[0] for item in schedule._deadlines if item[2] is live_due[0][2]) == [15.0]
    assert {e.next_due for e in made} == {12.0}
    assert {e.state.deadline for e in made} == {15.0}


def test_a_cohort_split_by_the_batch_limit_keeps_its_order_and_time() -> None:
    schedule = RenewalSchedule()
    made = entries(schedule, 10)
    renew_all(schedule, 11.0, 500)
    batches = renew_all(schedule, 12.0, 4)
    assert [[e.state.key for e in b] for b in batches] == [
        ["k0", "k1", "k2", "k3"],
        ["k4", "k5", "k6", "k7"],
        ["k8", "k9"],
    ]
    assert {e.next_due for e in made} == {13.0}


def test_a_removed_lease_leaves_its_cohort_and_is_not_sent() -> None:
    schedule = RenewalSchedule()
    made = entries(schedule, 3)
    renew_all(schedule, 11.0, 500)
    schedule.remove(made[1])
    assert [[e.state.key for e in b] for b in renew_all(schedule, 12.0, 500)] == [["k0", "k2"]]
    schedule.remove(made[0])
    schedule.remove(made[2])
    assert schedule.next_wakeup(0) is None


def test_leases_of_other_heartbeats_or_ttls_ride_other_cohorts() -> None:
    schedule = RenewalSchedule()
    fast = entries(schedule, 2, ttl_ms=2000, beat_ms=500)
    slow = entries(schedule, 2)
    renew_all(schedule, 10.5, 500)
    assert {e.next_due for e in fast} == {11.0}
    assert {e.state.deadline for e in fast} == {12.5}
    assert {e.next_due for e in slow} == {11.5}
    assert {e.state.deadline for e in slow} == {14.5}
    assert schedule.next_wakeup(0) == 11.0


def test_a_cohort_lapses_together_at_its_deadline_when_unanswered() -> None:
    schedule = RenewalSchedule()
    made = entries(schedule, 3)
    renew_all(schedule, 11.0, 500)
    in_flight = schedule.pop_batch(12.0, 500)
    assert len(in_flight) == 3
    assert schedule.next_wakeup(1) == 15.0
    assert schedule.pop_expired(14.999) == []
    assert schedule.pop_expired(15.0) == made
    assert all(e.state.lost_reason == LossReason.DEADLINE for e in made)
    assert len(schedule) == 0
