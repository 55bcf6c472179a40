"""A finished lease keeps no memory: the renewal schedule's heaps hold a bounded number of entries
per live lease, however many leases came and went and whatever their TTL, and dropping the dead
entries changes nothing the schedule decides."""

from __future__ import annotations

import asyncio
import gc
import sys
from collections.abc import Callable
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fencedlease import LeaseManager
from fencedlease._core.schedule import (
    RenewalEntry,
    RenewalSchedule,
    RenewReply,
    renewal_items,
)
from fencedlease._core.schedule import heaps as schedule_module
from fencedlease._core.schedule.heaps import COMPACT_FACTOR, COMPACT_FLOOR
from fencedlease._core.state import LeaseState
from fencedlease.aio import AsyncLeaseManager

HOUR_MS = 3_600_000
BEAT_MS = HOUR_MS // 4
LIVE = 10
BOUND = COMPACT_FACTOR * LIVE + COMPACT_FLOOR  # 144 entries with ten live leases


def entry(key: str, now: float, ttl_ms: int = HOUR_MS, beat_ms: int = BEAT_MS) -> RenewalEntry:
    """A lease granted by an acquire sent at ``now``."""
    return RenewalEntry(LeaseState.granted(key, "o", 1, ttl_ms, now, 1e9), beat_ms, None)


def held(schedule: RenewalSchedule) -> int:
    """The entries the heaps' items hold, counted."""
    return sum(
        len(c) - start for heap in (schedule._due, schedule._deadlines) for *_, c, start in heap
    )


def with_live(now: float = 10.0) -> tuple[RenewalSchedule, list[RenewalEntry]]:
    schedule = RenewalSchedule()
    live = [entry(f"live{i}", now) for i in range(LIVE)]
    for lease in live:
        schedule.add(lease, now)
    return schedule, live


@pytest.mark.parametrize("finished", [1_000, 5_000])
def test_finished_leases_at_an_hour_ttl_leave_the_heaps_bounded_by_the_live_ones(
    finished: int,
) -> None:
    """Ten live leases and any number added and released at a one-hour TTL: each heap holds ten
    live entries plus at most 62 dead ones (compacted back to ten each time the 146th entry of
    the two heaps comes), and the live leases are renewed as before."""
    schedule, live = with_live()
    for i in range(finished):
        lease = entry(f"k{i}", 10.0)
        schedule.add(lease, 10.0)
        schedule.remove(lease)
        assert schedule.footprint() <= BOUND
    # From 20 entries, two per finished lease: the 63rd makes 146 > 144, back to 20.
    dead = finished % 63
    assert (len(schedule._due), len(schedule._deadlines)) == (LIVE + dead, LIVE + dead)
    assert schedule.footprint() == held(schedule) == 2 * (LIVE + dead)
    assert schedule.pop_batch(10.0 + BEAT_MS / 1000, 500) == live


def test_a_compaction_keeps_only_the_live_entries() -> None:
    """Compacted, the heaps hold each live lease once in each heap; drained, nothing."""
    schedule, live = with_live()
    for i in range(63):
        lease = entry(f"k{i}", 10.0)
        schedule.add(lease, 10.0)
        schedule.remove(lease)
    assert (len(schedule._due), len(schedule._deadlines)) == (LIVE, LIVE)
    assert schedule.footprint() == 2 * LIVE
    assert schedule.drain() == live
    assert schedule.footprint() == 0
    assert (schedule._due, schedule._deadlines) == ([], [])


def test_a_move_to_a_new_primary_leaves_no_dead_entry() -> None:
    """`all_due` makes each lease due now in the one item it is in: the heaps hold no more, and
    each lease goes out once."""
    schedule = RenewalSchedule()
    made = [entry(f"k{i}", 10.0, 1_000, 250) for i in range(3)]  # due at 10.25
    for lease in made:
        schedule.add(lease, 10.0)
    schedule.all_due(10.1)
    assert (len(schedule._due), schedule.footprint()) == (3, 6)
    assert {lease.next_due for lease in made} == {10.1}
    assert schedule.pop_due(10.1, 10) == made
    assert schedule.pop_due(10.25, 10) == []


def _released(schedule: RenewalSchedule, lease: RenewalEntry, now: float) -> None:
    schedule.remove(lease)


def _refused(schedule: RenewalSchedule, lease: RenewalEntry, now: float) -> None:
    batch = schedule.pop_due(now, 1)
    renewal_items(batch)
    schedule.apply(batch, now, 1e9, [0], now)


def _released_after_a_failed_renewal(
    schedule: RenewalSchedule, lease: RenewalEntry, now: float
) -> None:
    batch = schedule.pop_due(now, 1)
    renewal_items(batch)
    schedule.apply(batch, now, 1e9, ConnectionError("reset"), now)
    schedule.remove(lease)


def _released_in_flight(schedule: RenewalSchedule, lease: RenewalEntry, now: float) -> None:
    batch = schedule.pop_due(now, 1)
    renewal_items(batch)
    schedule.remove(lease)
    schedule.apply(batch, now, 1e9, [7], now)


def _renewed_then_released(schedule: RenewalSchedule, lease: RenewalEntry, now: float) -> None:
    batch = schedule.pop_due(now, 1)
    renewal_items(batch)
    schedule.apply(batch, now, 1e9, [7], now)
    schedule.remove(lease)


@pytest.mark.parametrize(
    "finish",
    [
        _released,
        _refused,
        _released_after_a_failed_renewal,
        _released_in_flight,
        _renewed_then_released,
    ],
)
def test_every_way_a_lease_ends_leaves_the_heaps_bounded(
    finish: Callable[[RenewalSchedule, RenewalEntry, float], None],
) -> None:
    """Released, refused by the store, released after a failed renewal or with a renewal in
    flight, or after renewals: 2,000 such leases at a one-hour TTL beside ten live ones leave
    the heaps within the bound after every step."""
    schedule, live = with_live(now=10.0)  # due at 910 s
    now = BEAT_MS / 1000  # each finished lease is granted at 0 s: due now, before the live ones
    for i in range(2_000):
        lease = entry(f"k{i}", 0.0)
        schedule.add(lease, now)
        finish(schedule, lease, now)
        assert len(schedule) == LIVE
        assert schedule.footprint() == held(schedule) <= BOUND
    assert schedule.pop_batch(10.0 + BEAT_MS / 1000, 500) == live


# -- the same decisions with and without compaction ----------------------------------------------


class _NeverCompacts(RenewalSchedule):
    def _maybe_compact(self) -> None:
        pass


Op = tuple[str, int, int]

KINDS = ["add", "add", "remove", "send", "send", "land", "land", "advance", "advance"]
KINDS += ["all_due", "manual", "expire"]  # renewals and adds weigh more: cohorts form

ops = st.lists(
    st.tuples(st.sampled_from(KINDS), st.integers(0, 50), st.integers(0, 50)),
    min_size=40,
    max_size=150,
)


class _World:
    """One schedule and its leases, driven by the ops."""

    def __init__(self, schedule: RenewalSchedule) -> None:
        self.schedule = schedule
        self.leases: list[RenewalEntry] = []
        self.in_flight: list[tuple[float, list[RenewalEntry]]] = []

    def step(self, op: Op, now: float) -> object:
        kind, a, b = op
        schedule = self.schedule
        if kind == "add":
            # Two kinds of lease only (one in eight at the long TTL): renewed together, cohorts.
            ttl_ms = HOUR_MS if a % 8 == 7 else 1_000
            lease = entry(f"k{len(self.leases)}", now, ttl_ms, ttl_ms // 4)
            self.leases.append(lease)
            schedule.add(lease, now)
        elif kind == "remove" and self.leases:
            schedule.remove(self.leases[a % len(self.leases)])
        elif kind == "send":  # a batch of 1 to 8: a cohort split by the limit
            batch = schedule.pop_batch(now, 1 + b % 8)
            renewal_items(batch)
            self.in_flight.append((now, batch))
            return [e.state.key for e in batch]
        elif kind == "land" and self.in_flight:  # the oldest batch: mostly confirmed (0s: all)
            sent, batch = self.in_flight.pop(0)
            replies: list[RenewReply] | BaseException = (
                ConnectionError("reset")
                if b % 6 == 5
                else [
                    0 if i + 1 == a % 9 else ConnectionError("x") if i + 1 == b % 7 else 7
                    for i in range(len(batch))
                ]
            )
            errors = schedule.apply(batch, sent, 1e9, replies, now)
            return [(e.state.key, str(x)) for e, x in errors]
        elif kind == "all_due":
            schedule.all_due(now)
        elif kind == "manual" and self.leases:
            lease = self.leases[a % len(self.leases)]
            if lease.state.confirm(now, 1e9, lease.state.ttl_ms, 7):
                schedule.deadline_moved(lease)
        elif kind == "expire":  # in any order: they are all lost at this moment
            return sorted(e.state.key for e in schedule.pop_expired(now))
        return None


@settings(max_examples=300, deadline=None)
@given(ops=ops)
def test_compaction_changes_no_decision_and_keeps_the_bound(ops: list[Op]) -> None:
    """Any sequence of adds, removals, renewals (confirmed, refused, failed, in flight), manual
    renewals, moves to a new primary and expiries: a schedule that compacts (at two entries per
    live lease and no floor, so that it compacts often) answers exactly as one that never does,
    and holds at most two entries per live lease after every step."""
    with (
        mock.patch.object(schedule_module, "COMPACT_FACTOR", 2),
        mock.patch.object(schedule_module, "COMPACT_FLOOR", 0),
    ):
        compacts, never = _World(RenewalSchedule()), _World(_NeverCompacts())
        now = 10.0
        for op in ops:
            if op[0] == "advance":
                now += 0.05 + op[1] / 200  # 50 to 300 ms
            assert compacts.step(op, now) == never.step(op, now)
            flying = len(never.in_flight) % 3
            assert compacts.schedule.next_wakeup(flying) == never.schedule.next_wakeup(flying)
            for world in (compacts, never):
                assert world.schedule.footprint() == held(world.schedule)
            assert compacts.schedule.footprint() <= 2 * len(compacts.schedule)
            assert [e.active for e in compacts.leases] == [e.active for e in never.leases]
            assert [e.next_due for e in compacts.leases] == [e.next_due for e in never.leases]


def test_compaction_with_leases_of_one_deadline_changes_no_batch() -> None:
    """The case the property above found: the next batch is the same with and without compaction
    when a removed lease's item lies between the due leases and a later one the batch fills with."""
    ops: list[Op] = [
        *[("add", 0, 0)] * 4,
        ("add", 7, 0),
        *[("remove", 0, 0)] * 12,
        ("remove", 1, 0),
        ("all_due", 0, 0),
        ("add", 0, 0),
        ("send", 0, 2),
        ("all_due", 0, 0),
        ("add", 0, 0),
        *[("remove", 0, 0)] * 14,
        ("remove", 34, 0),
        ("land", 0, 17),
        ("send", 0, 3),
    ]
    test_compaction_changes_no_decision_and_keeps_the_bound.hypothesis.inner_test(ops=ops)  # type: ignore[attr-defined]


# -- through the public API, both faces ----------------------------------------------------------


KEPT_AT_MOST = 2_000
"""Memory blocks the 4,000 holds after the first 1,000 may add: the finished leases that wait for
the schedule's next compaction (at most 32, half its floor of entries, some 26 blocks each), and
noise. Each finished hold kept 20 to 26 blocks (some 1 kB) for its whole TTL without it."""


def _blocks() -> int:
    """The interpreter's allocated memory blocks, once the garbage is collected (tracemalloc
    would show the same, at four times the cost)."""
    gc.collect()
    return sys.getallocatedblocks()


def test_finished_holds_keep_no_memory_sync() -> None:
    """5,000 finished ``hold()``s at a one-hour TTL take no more memory than 1,000, and the
    renewer's schedule holds at most its floor of entries."""
    with LeaseManager.from_url("memory://") as leases:
        for _ in range(1_000):
            with leases.hold("k", ttl_ms=HOUR_MS):
                pass
        after_1000 = _blocks()
        footprint_1000 = leases.renewer._schedule.footprint()
        for _ in range(4_000):
            with leases.hold("k", ttl_ms=HOUR_MS):
                pass
        after_5000 = _blocks()
        assert after_5000 - after_1000 < KEPT_AT_MOST  # 80,000 when each kept its own
        assert footprint_1000 <= COMPACT_FLOOR
        assert leases.renewer._schedule.footprint() <= COMPACT_FLOOR


def test_finished_holds_keep_no_memory_asyncio() -> None:
    """The asyncio face: 5,000 finished ``hold()``s at a one-hour TTL take no more memory than
    1,000, and the renewer's schedule holds at most its floor of entries."""

    async def main() -> tuple[int, int, int, int]:
        async with AsyncLeaseManager.from_url("memory://") as leases:
            for _ in range(1_000):
                async with leases.hold("k", ttl_ms=HOUR_MS):
                    pass
            after_1000 = _blocks()
            footprint_1000 = leases.renewer._schedule.footprint()
            for _ in range(4_000):
                async with leases.hold("k", ttl_ms=HOUR_MS):
                    pass
            after_5000 = _blocks()
            return after_1000, after_5000, footprint_1000, leases.renewer._schedule.footprint()

    after_1000, after_5000, footprint_1000, footprint_5000 = asyncio.run(main())
    assert after_5000 - after_1000 < KEPT_AT_MOST  # 104,000 when each kept its own
    assert footprint_1000 <= COMPACT_FLOOR
    assert footprint_5000 <= COMPACT_FLOOR
