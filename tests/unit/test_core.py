"""The renewal schedule and loss rules, on an injected clock (no threads, no server)."""

from __future__ import annotations

from fencedlease._core.clock import on_ns_grid
from fencedlease._core.schedule import RenewalEntry, RenewalSchedule
from fencedlease._core.state import LeaseState, LossReason
from fencedlease._core.view import LeaseView
from fencedlease.testing import FakeClock


def _state(ttl_ms: int = 1_000, sent: float = 100.0) -> LeaseState:
    return LeaseState.granted("k", "owner", 7, ttl_ms, sent, 1_700_000_000.0)


def test_deadline_counts_from_when_the_command_was_sent() -> None:
    """A grant sent at t=100 with ttl 1000 ms is lost at exactly t=101, not a moment before."""
    state = _state()
    assert state.check_deadline(100.999) is False
    assert state.check_deadline(101.0) is True
    assert state.lost_reason == LossReason.DEADLINE


def test_loss_is_final() -> None:
    """A lost lease is never confirmed back to life."""
    state = _state()
    state.mark_lost(LossReason.RENEW_REFUSED)
    assert state.confirm(100.5, 1.0, 1_000, 7) is False
    assert state.lost
    assert state.deadline == 101.0


def test_a_released_lease_is_never_lost() -> None:
    """After a confirmed release, deadlines and refused renewals are not losses."""
    state = _state()
    state.released = True
    assert state.mark_lost(LossReason.RENEW_REFUSED) is False
    assert state.check_deadline(500.0) is False


def test_listeners_fire_once() -> None:
    """A loss listener is called exactly once, and at once when added after the loss."""
    calls: list[str] = []
    state = _state()
    state.add_listener(lambda s: calls.append("before"))
    state.mark_lost(LossReason.DEADLINE)
    state.mark_lost(LossReason.RENEW_REFUSED)
    state.add_listener(lambda s: calls.append("after"))
    assert calls == ["before", "after"]
    assert state.lost_reason == LossReason.DEADLINE


def test_restored_lease_learns_its_token_from_a_renewal() -> None:
    """confirm() fills in a missing fencing token and never changes a known one."""
    state = LeaseState("k", "owner", None, 1_000, None, None)
    assert state.check_deadline(1e9) is False  # no deadline known: nothing invented
    state.confirm(10.0, 1.0, 2_000, 42)
    assert (state.fencing_token, state.deadline, state.ttl_ms) == (42, 12.0, 2_000)
    state.confirm(11.0, 2.0, 2_000, 43)
    assert state.fencing_token == 42


def test_first_renewal_is_one_heartbeat_after_add() -> None:
    """Nothing is due before now + heartbeat; then the entry is due."""
    schedule = RenewalSchedule()
    entry = RenewalEntry(_state(), 250, None)
    schedule.add(entry, 100.0)
    assert schedule.pop_due(100.249, 10) == []
    assert schedule.next_wakeup(batches_in_flight=0) == 100.25
    assert schedule.pop_due(100.25, 10) == [entry]
    assert schedule.pop_due(100.25, 10) == []  # in flight: not handed out twice


def test_first_renewal_counts_from_the_acquire_send_not_its_reply() -> None:
    """A 400 ms round trip, ttl 1200, heartbeat 600: the acquire sent at t=0 is answered at 0.4;
    the first renewal is due at 0.6 (send + heartbeat), not 1.0 (reply + heartbeat), which
    answered at 1.4 would land after the deadline of 1.2."""
    schedule = RenewalSchedule()
    state = _state(ttl_ms=1_200, sent=0.0)
    entry = RenewalEntry(state, 600, None)
    schedule.add(entry, 0.4)  # the reply came at 0.4
    assert entry.next_due == 0.6
    assert schedule.pop_due(0.599, 10) == []
    assert schedule.pop_due(0.6, 10) == [entry]


def test_renewals_keep_a_lease_alive_through_a_slow_round_trip() -> None:
    """The same 400 ms round trip for every renewal, five TTLs long: each renewal is sent one
    heartbeat after the previous send (deadline - ttl + heartbeat), each reply lands before the
    deadline it extends, and the lease is never lost."""
    rtt, ttl_s, heartbeat_s = 0.4, 1.2, 0.6
    schedule = RenewalSchedule()
    state = LeaseState.granted("k", "owner", 7, 1_200, 0.0, 1_700_000_000.0)
    entry = RenewalEntry(state, 600, None)
    schedule.add(entry, rtt)
    sends = []
    while True:
        sent = entry.next_due
        if sent > 5 * ttl_s:
            break
        assert schedule.pop_expired(sent) == []
        assert schedule.pop_due(sent, 10) == [entry]
        sends.append(sent)
        assert schedule.pop_expired(sent + rtt) == []  # the reply comes before the deadline
        assert schedule.apply([entry], sent, 0.0, [7], now=sent + rtt) == []
        assert state.deadline == on_ns_grid(sent + ttl_s)
        assert entry.next_due == on_ns_grid(state.deadline - ttl_s + heartbeat_s)
    assert not state.lost
    assert sends == [round(0.6 * i, 9) for i in range(1, 11)]  # on the grid, no float drift


def test_a_renewal_due_before_its_reply_came_goes_out_at_once() -> None:
    """A round trip longer than the heartbeat: the next renewal is due at send + heartbeat,
    already past when the reply lands, so it is handed out at the reply's moment."""
    schedule = RenewalSchedule()
    state = _state(ttl_ms=1_000, sent=0.0)
    entry = RenewalEntry(state, 250, None)
    schedule.add(entry, 0.3)
    assert schedule.pop_due(0.3, 10) == [entry]
    schedule.apply([entry], 0.3, 0.0, [7], now=0.6)
    assert entry.next_due == 0.55
    assert schedule.pop_due(0.6, 10) == [entry]


def test_due_leases_are_batched_up_to_the_limit() -> None:
    """pop_due returns at most `limit` entries, earliest first."""
    schedule = RenewalSchedule()
    entries = [RenewalEntry(_state(sent=0.0), 100 + i, None) for i in range(5)]
    for entry in entries:
        schedule.add(entry, 0.0)
    assert schedule.pop_due(10.0, 3) == entries[:3]
    assert schedule.pop_due(10.0, 3) == entries[3:]


def test_a_confirmed_renewal_moves_the_deadline_and_the_next_due() -> None:
    """A renewal sent at t=100.25 moves the deadline to 101.25 and the next tick to 100.5."""
    schedule = RenewalSchedule()
    state = _state()
    entry = RenewalEntry(state, 250, None)
    schedule.add(entry, 100.0)
    batch = schedule.pop_due(100.25, 10)
    assert schedule.apply(batch, 100.25, 5.0, [7], now=100.26) == []
    assert state.deadline == 101.25
    assert entry.next_due == 100.5
    assert not state.lost


def test_a_refused_renewal_is_a_loss() -> None:
    """A 0 reply (key gone or another owner's) marks the lease lost and stops renewing it."""
    schedule = RenewalSchedule()
    state = _state()
    entry = RenewalEntry(state, 250, None)
    schedule.add(entry, 100.0)
    schedule.apply(schedule.pop_due(100.25, 10), 100.25, 5.0, [0], now=100.26)
    assert state.lost
    assert state.lost_reason == LossReason.RENEW_REFUSED
    assert len(schedule) == 0


def test_a_refusal_racing_a_release_is_not_a_loss() -> None:
    """A renewal that lands after a deliberate release began does not report a loss."""
    schedule = RenewalSchedule()
    state = _state()
    entry = RenewalEntry(state, 250, None)
    schedule.add(entry, 100.0)
    batch = schedule.pop_due(100.25, 10)
    state.releasing = True
    schedule.apply(batch, 100.25, 5.0, [0], now=100.26)
    assert state.lost is False


def test_a_failed_round_trip_is_not_a_loss_and_retries_soon() -> None:
    """An error for the batch calls the hook and retries after max(50 ms, heartbeat / 4)."""
    schedule = RenewalSchedule()
    state = _state()
    entry = RenewalEntry(state, 250, None)
    schedule.add(entry, 100.0)
    error = ConnectionError("reset")
    hooks = schedule.apply(schedule.pop_due(100.25, 10), 100.25, 5.0, error, now=100.3)
    assert hooks == [(entry, error)]
    assert not state.lost
    assert entry.next_due == 100.3 + 0.0625  # max(50 ms, 250 ms / 4)


def test_silence_is_loss() -> None:
    """With every renewal failing, the lease is lost exactly at its deadline."""
    schedule = RenewalSchedule()
    state = _state()
    entry = RenewalEntry(state, 250, None)
    schedule.add(entry, 100.0)
    assert schedule.next_wakeup(batches_in_flight=2) == 101.0
    assert schedule.pop_expired(100.99) == []
    assert schedule.pop_expired(101.0) == [entry]
    assert state.lost
    assert state.lost_reason == LossReason.DEADLINE
    assert len(schedule) == 0


def test_replies_for_removed_entries_are_ignored() -> None:
    """A batch landing after its lease was removed changes nothing."""
    schedule = RenewalSchedule()
    state = _state()
    entry = RenewalEntry(state, 250, None)
    schedule.add(entry, 100.0)
    batch = schedule.pop_due(100.25, 10)
    schedule.remove(entry)
    schedule.apply(batch, 100.25, 5.0, [0], now=100.3)
    assert not state.lost


def test_blocked_holder_scenario() -> None:
    """ttl 300, heartbeat 100, the holder blocked 500 ms: the late renewal finds another owner
    (0) and the lease is lost, never re-acquired; the deadline alone already said so."""
    schedule = RenewalSchedule()
    state = _state(ttl_ms=300, sent=0.0)
    entry = RenewalEntry(state, 100, None)
    schedule.add(entry, 0.0)
    # Blocked: nothing ran until t=0.5.
    assert [e.state for e in schedule.pop_expired(0.5)] == [state]
    assert state.lost_reason == LossReason.DEADLINE
    assert schedule.pop_due(0.5, 10) == []


# -- a release in flight (rule 4), both faces' one rule ------------------------------------------


def _held(clock: FakeClock, ttl_ms: int = 1_000) -> tuple[LeaseState, LeaseView]:
    """A lease granted by an acquire sent now, and its face-neutral view."""
    state = LeaseState.granted("k", "owner", 7, ttl_ms, clock.monotonic(), clock.time())
    return state, LeaseView(state, clock)


def test_a_release_begun_in_time_is_decided_by_its_reply() -> None:
    """Begun at 0.9 s of a 1 s lease (it waits for a connection, then runs), answered at 1.5 s:
    no deadline loss meanwhile; "released" ends the lease cleanly, "not yours" is a loss."""
    for reply, lost in ((True, False), (False, True)):
        clock = FakeClock()
        state, view = _held(clock)
        clock.advance(900)
        assert view.lost is False
        state.release_begins()
        clock.advance(600)
        assert view.lost is False
        assert view._released(reply) is reply
        assert (state.lost, state.released) == (lost, reply)
        assert state.lost_reason == (LossReason.RELEASE_REFUSED if lost else None)


def test_a_body_that_outlived_the_deadline_is_lost_before_its_release() -> None:
    """Checked at 1.2 s of a 1 s lease (the body's end), before the release begins: lost, and
    the release's reply changes nothing (rule 5)."""
    clock = FakeClock()
    state, view = _held(clock)
    clock.advance(1_200)
    assert view.lost is True
    state.release_begins()
    assert view._released(True) is True
    assert (state.lost, state.lost_reason) == (True, LossReason.DEADLINE)


def test_a_failed_release_gives_the_deadline_back() -> None:
    """No answer to the release: the deadline rule applies again, and a new release may begin."""
    clock = FakeClock()
    state, view = _held(clock)
    state.release_begins()
    clock.advance(1_000)
    assert view.lost is False
    state.release_failed()
    assert state.releasing is False
    assert view.lost is True


def test_the_renewal_goes_on_while_a_release_waits() -> None:
    """A release waiting for a connection leaves the lease under renewal: the schedule still
    hands it out, a confirmed renewal moves the deadline, and a refusal racing the release (the
    release ran first) is not a loss: the release's own reply decides."""
    clock = FakeClock()
    state, _ = _held(clock)
    schedule = RenewalSchedule()
    entry = RenewalEntry(state, 250, None)
    schedule.add(entry, clock.monotonic())
    state.release_begins()
    clock.advance(250)
    batch = schedule.pop_due(clock.monotonic(), 10)
    assert batch == [entry]
    schedule.apply(batch, clock.monotonic(), clock.time(), [7], now=clock.monotonic())
    assert state.deadline == 1.25
    clock.advance(250)
    batch = schedule.pop_due(clock.monotonic(), 10)
    assert batch == [entry]
    schedule.apply(batch, clock.monotonic(), clock.time(), [0], now=clock.monotonic())
    assert state.lost is False


def test_a_renewal_that_stops_for_good_is_a_loss_unless_a_release_is_under_way() -> None:
    """The manager closed (or the renewer failed) with the lease still registered: lost, except
    while its release is under way (still renewed until the release's reply): that reply
    decides."""
    clock = FakeClock()
    state, _ = _held(clock)
    state.renewal_stopped(LossReason.CLOSED)
    assert (state.lost, state.lost_reason) == (True, LossReason.CLOSED)
    state, view = _held(clock)
    state.release_begins()
    state.renewal_stopped(LossReason.CLOSED)
    assert state.lost is False
    assert view._released(True) is True
    assert (state.lost, state.released) == (False, True)


def test_drain_stops_every_entry_and_returns_them() -> None:
    """drain() (both renewers' close) hands back every entry, in flight or not, inactive and
    gone from the schedule: nothing is due after it, whatever the time."""
    schedule = RenewalSchedule()
    waiting = RenewalEntry(_state(), 250, None)
    in_flight = RenewalEntry(_state(), 250, None)
    schedule.add(in_flight, 100.0)
    assert schedule.pop_due(100.25, 10) == [in_flight]
    schedule.add(waiting, 100.0)
    drained = schedule.drain()
    assert sorted(map(id, drained)) == sorted(map(id, [waiting, in_flight]))
    assert (waiting.active, in_flight.active, len(schedule)) == (False, False, 0)
    assert schedule.pop_due(1e9, 10) == []
    assert schedule.drain() == []


# Two renewals in flight at once may run in either order; the deadline is never later than the
# expiry the one that ran last set.


def test_a_late_reply_to_an_older_renewal_only_shortens_the_deadline() -> None:
    """A batch sent at 100.0 with ttl 10 s, a manual renewal at 100.5 with ttl 1 s; the manual
    reply is applied first, the batch's last: Redis holds 100.5 + 1 (or later), never 110."""
    state = LeaseState.granted("k", "o", 1, 10_000, 99.0, 1_000.0)
    assert state.confirm(100.5, 1_001.5, 1_000, 1)
    assert state.deadline == on_ns_grid(100.5 + 1.0)
    assert state.confirm(100.0, 1_001.0, 10_000, 1)  # the batch, answered last
    assert state.deadline == on_ns_grid(100.5 + 1.0)
    assert state.expires_wall == 1_001.5 + 1.0
    assert state.ttl_ms == 1_000  # the next renewal asks for what the newest one did


def test_the_first_newer_reply_with_another_ttl_counts_the_shorter_one() -> None:
    """A manual renewal with ttl 1 s sent at 100.0, then a batch with ttl 10 s at 100.5, run in
    the other order: the expiry may be 100.0's command run last, + 1 s; so 100.5 + 1 s, and
    the next renewal with ttl 10 s counts it whole."""
    state = LeaseState.granted("k", "o", 1, 1_000, 99.5, 1_000.0)
    assert state.confirm(100.0, 1_001.0, 1_000, 1)
    assert state.confirm(100.5, 1_001.5, 10_000, 1)
    assert state.deadline == on_ns_grid(100.5 + 1.0)
    assert state.confirm(101.0, 1_002.0, 10_000, 1)
    assert state.deadline == on_ns_grid(101.0 + 10.0)
