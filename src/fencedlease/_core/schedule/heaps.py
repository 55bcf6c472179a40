"""`RenewalSchedule`: the leases under renewal in two heaps of cohorts (by next renewal time and
by loss deadline), the batches it hands out and the replies it applies (the rules in
`fencedlease._core.schedule`). No I/O."""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable

from fencedlease._core.clock import on_ns_grid
from fencedlease._core.schedule.entry import RenewalEntry, RenewReply, confirmed_due
from fencedlease._core.state import LossReason

__all__ = ["COMPACT_FACTOR", "COMPACT_FLOOR", "MAX_IN_FLIGHT", "RenewalSchedule"]

MAX_IN_FLIGHT = 2
"""Renewal batches a renewer keeps in flight at most (see `fencedlease._core.schedule`)."""

_RTT_GAIN = 0.125
"""Weight of a new round trip in the smoothed estimate (TCP's SRTT gain, RFC 6298)."""

COMPACT_FACTOR = 8
COMPACT_FLOOR = 64
"""`RenewalSchedule` drops its heaps' dead entries once they hold more than ``COMPACT_FACTOR``
entries per live lease plus ``COMPACT_FLOOR`` (see `RenewalSchedule.footprint`). A live lease
holds one entry in each heap, plus the deadlines of its earlier renewals that have not come yet
while a live item above them keeps `RenewalSchedule.next_wakeup` from dropping them: at most one
per renewal of the last TTL, four with the default heartbeat (a quarter of the TTL). The factor
keeps such a steady state from compacting; the floor keeps a manager holding a few leases from
compacting on every release."""


_Cohort = tuple[float, int, list[RenewalEntry], int]
"""A heap item: a time, a tie-breaker, and the entries from an index on that share the time."""


def _live_due(entry: RenewalEntry, when: float) -> bool:
    return entry.active and entry.next_due == when


def _live_deadline(entry: RenewalEntry, when: float) -> bool:
    return entry.active and entry.state.deadline == when


def _compact(heap: list[_Cohort], live: Callable[[RenewalEntry, float], bool]) -> int:
    """Rebuild ``heap`` in place with its live entries only, each in the first item (by time,
    then tie-breaker) that holds it live, the one the schedule would have reached first; the
    items keep their times, tie-breakers and entry order. Returns the entries left. O(entries).
    """
    first: dict[RenewalEntry, int] = {}  # a live entry's live copies share one time: seq decides
    for when, seq, cohort, start in heap:
        for index in range(start, len(cohort)):
            entry = cohort[index]
            if live(entry, when) and first.get(entry, seq) >= seq:
                first[entry] = seq
    kept: list[_Cohort] = []
    for when, seq, cohort, start in heap:
        alive = [e for e in itertools.islice(cohort, start, None) if first.get(e) == seq]
        if alive:
            kept.append((when, seq, alive, 0))
    heapq.heapify(kept)
    heap[:] = kept
    return len(first)


class RenewalSchedule:
    """Which leases are due for renewal, and whose deadline is next; pure bookkeeping.

    Two heaps with lazy deletion, compacted: one ordered by next renewal time, one by loss
    deadline. A removed lease, or a time or deadline that moved, leaves a dead entry in an item
    until the item reaches the top, which at a long TTL is an hour away; so when the heaps hold
    more than `COMPACT_FACTOR` entries per live lease plus `COMPACT_FLOOR` (`footprint`), every
    dead entry is dropped at once. Memory stays bounded by the live leases, however many leases
    came and went, whatever their TTL. Their
    items are cohorts: the leases of one batch that share a heartbeat are due again at the same
    moment (one heartbeat after the batch was sent), and those that share a TTL have the same
    deadline, so each such group is one heap item, not one per lease: a renewal costs O(1) of
    bookkeeping, not two heap operations. The owner
    (a thread or a task) asks `pop_due` for a batch, sends it as one pipeline, hands the
    replies to `apply`, marks `pop_expired` leases lost, and sleeps until
    `next_wakeup`. All times are seconds on the monotonic clock.
    """

    def __init__(self) -> None:
        self._due: list[_Cohort] = []
        self._deadlines: list[_Cohort] = []
        self._seq = itertools.count()
        # A dict for its order: `all_due` and `drain` take the leases in the order they came.
        self._members: dict[RenewalEntry, None] = {}
        self._footprint = 0  # entries held by the heaps' items, live or dead: see `footprint`
        self.round_trip_s = 0.0
        """The smoothed round trip of the recent successful batches, in seconds (0: none yet)."""

    def __len__(self) -> int:
        return len(self._members)

    def footprint(self) -> int:
        """How many entries the two heaps' items hold, live or dead: at most
        ``COMPACT_FACTOR * len(self) + COMPACT_FLOOR`` after every call (`add` grows it by two
        and the bound by eight; the calls that push more, or remove, compact), and at most
        ``2 * len(self)`` right after a compaction (a live lease is in one item of each heap)."""
        return self._footprint

    def _maybe_compact(self) -> None:
        """Drop every dead entry from both heaps when they hold too many (see `footprint`).

        Amortized O(1) per entry pushed and per lease removed: a compaction that finds ``f``
        entries costs O(f) and leaves at most ``2 * n`` (``n`` live leases). The next one comes
        when ``f' > 8 * n'``; if meanwhile ``p`` entries were pushed and ``r`` leases removed,
        then ``f' <= 2 * n + p`` and ``n' >= n - r``, so ``8 * (n - r) < 2 * n + p`` bounds ``n``
        by ``(p + 8 * r) / 6`` and ``f'`` by ``2 * p + 3 * r``: those pushes and removals pay for
        it."""
        members = len(self._members)
        if self._footprint <= COMPACT_FACTOR * members + COMPACT_FLOOR:
            return
        self._footprint = _compact(self._due, _live_due) + _compact(self._deadlines, _live_deadline)

    def add(self, entry: RenewalEntry, now: float) -> None:
        """Start renewing ``entry``: first renewal one heartbeat after the confirming command was
        sent (the deadline's origin, see `confirmed_due`), not after its reply came: a slow
        round trip must not eat into the margin. At ``now`` at once if that moment has passed."""
        entry.active = True
        self._members[entry] = None
        self._push_due(entry, confirmed_due(entry, now))
        self._push_deadline(entry)

    def remove(self, entry: RenewalEntry) -> None:
        """Stop renewing ``entry`` (its heap items are dropped lazily, or by a compaction)."""
        self._drop(entry)
        self._maybe_compact()

    def _drop(self, entry: RenewalEntry) -> None:
        entry.active = False
        self._members.pop(entry, None)

    def entries(self) -> list[RenewalEntry]:
        """Every active entry, in flight or not (for shutdown)."""
        return list(self._members)

    def drain(self) -> list[RenewalEntry]:
        """Stop renewing every entry (`remove` each) and return them, for shutdown; the heaps are
        emptied."""
        entries = self.entries()
        for entry in entries:
            self._drop(entry)
        self._due.clear()
        self._deadlines.clear()
        self._footprint = 0
        return entries

    def all_due(self, now: float) -> None:
        """Make every entry that is not in flight due at ``now`` (the store moved to a new
        primary: every lease is confirmed there at once); one due earlier keeps its time.

        The due heap is built again, O(n) as the pushes would be: an entry left behind in an
        item at its old time would come alive there again were it ever due at that time once
        more, and go out in that item's place, which no compaction could reproduce."""
        held = sum(len(cohort) - start for _, _, cohort, start in self._due)
        due: list[_Cohort] = []
        for entry in self._members:
            if entry.next_due != math.inf:
                entry.next_due = when = min(entry.next_due, now)
                due.append((when, next(self._seq), [entry], 0))
        heapq.heapify(due)
        self._due[:] = due
        self._footprint += len(due) - held

    def _push_due(self, entry: RenewalEntry, due: float) -> None:
        entry.next_due = due
        self._footprint += 1
        heapq.heappush(self._due, (due, next(self._seq), [entry], 0))

    def deadline_moved(self, entry: RenewalEntry) -> None:
        """Watch ``entry``'s new deadline after a renewal the schedule did not apply itself."""
        if entry.active:
            self._push_deadline(entry)
            self._maybe_compact()

    def _push_deadline(self, entry: RenewalEntry) -> None:
        if entry.state.deadline is not None:
            self._footprint += 1
            heapq.heappush(self._deadlines, (entry.state.deadline, next(self._seq), [entry], 0))

    def pop_due(self, now: float, limit: int) -> list[RenewalEntry]:
        """Remove and return up to ``limit`` active entries due at ``now``, earliest first."""
        batch: list[RenewalEntry] = []
        self._take(batch, limit, now, fill=False)
        return batch

    def _take(self, batch: list[RenewalEntry], limit: int, now: float, fill: bool) -> None:
        """Move active entries from the due heap into ``batch``, earliest first, up to ``limit``,
        while each is due by ``now`` (``fill``: by ``now`` plus the larger of half its heartbeat
        and the smoothed round trip, at most its heartbeat); each is in flight from then on (not
        due again until `apply` says when)."""
        due = self._due
        rtt = self.round_trip_s
        inf = math.inf
        while due and len(batch) < limit:
            when, _, cohort, start = due[0]
            if fill:
                # A cohort's entries share a heartbeat (see `apply`); one with none left at its
                # time is dropped, not read: its dead entries' heartbeat would end the filling
                # where a compaction (which drops it) would go on.
                if not any(_live_due(cohort[i], when) for i in range(start, len(cohort))):
                    heapq.heappop(due)
                    self._footprint -= len(cohort) - start
                    continue
                heartbeat = cohort[start].heartbeat_s
                early = heartbeat if rtt > heartbeat else max(0.5 * heartbeat, rtt)
                if when > now + early:
                    break
            elif when > now:
                break
            heapq.heappop(due)
            end = len(cohort)
            self._footprint -= end - start
            for index in range(start, end):
                entry = cohort[index]
                if not entry.active or entry.next_due != when:
                    continue  # removed, or due at another time since
                if len(batch) >= limit:  # the rest keep their place
                    self._footprint += end - index
                    heapq.heappush(due, (when, next(self._seq), cohort, index))
                    break
                entry.next_due = inf
                batch.append(entry)

    def pop_batch(self, now: float, limit: int) -> list[RenewalEntry]:
        """`pop_due`, then, if anything was due, fill the batch up to ``limit`` with the
        entries due next, as long as each is due within half its own heartbeat, or within the
        smoothed round trip (`round_trip_s`) when that is longer, but never more than one
        heartbeat early.

        Renewing early is always safe (it only moves the deadline later), and it is what keeps the
        round trips down: leases acquired at scattered moments would otherwise each get a round
        trip of their own. Renewed together, they are due together again, so ``n`` leases settle
        into ``ceil(n / limit)`` round trips per heartbeat. Filling up to a round trip ahead also
        means no lease of the batch's time comes due while it is in flight, to wait for its reply
        (or for a second batch, see `MAX_IN_FLIGHT`).
        """
        batch = self.pop_due(now, limit)
        if batch:
            self._take(batch, limit, now, fill=True)
        return batch

    def pop_expired(self, now: float) -> list[RenewalEntry]:
        """Mark lost (rule 2) and stop renewing every active entry whose deadline is at or before
        ``now``; return them."""
        expired: list[RenewalEntry] = []
        heap = self._deadlines
        while heap:
            when, _, cohort, start = heap[0]
            if when > now:
                break
            heapq.heappop(heap)
            self._footprint -= len(cohort) - start
            for index in range(start, len(cohort)):
                entry = cohort[index]
                if entry.active and entry.state.deadline == when:
                    entry.state.check_deadline(now)
                    self._drop(entry)  # no compaction while this loop reads the heap
                    expired.append(entry)
        self._maybe_compact()
        return expired

    def next_wakeup(self, batches_in_flight: int) -> float | None:
        """When the owner must next act: the earliest deadline, and the earliest renewal unless
        `MAX_IN_FLIGHT` batches are in flight (no other may be sent before one lands). None
        when nothing is scheduled."""
        candidates: list[float] = []
        can_send = batches_in_flight < MAX_IN_FLIGHT
        for heap, wanted, live in (
            (self._deadlines, True, _live_deadline),
            (self._due, can_send, _live_due),
        ):
            # Drop the cohorts at the top none of whose entries is still there at that time.
            while heap:
                when, _, cohort, start = heap[0]
                if any(live(cohort[i], when) for i in range(start, len(cohort))):
                    break
                heapq.heappop(heap)
                self._footprint -= len(cohort) - start
            if wanted and heap:
                candidates.append(heap[0][0])
        return min(candidates) if candidates else None

    def apply(
        self,
        batch: list[RenewalEntry],
        sent_mono: float,
        sent_wall: float,
        replies: list[RenewReply] | BaseException,
        now: float,
    ) -> list[tuple[RenewalEntry, BaseException]]:
        """Take the replies of a batch sent at ``sent_mono``: confirm, mark lost (rule 1), or
        reschedule a retry (rule 3). ``replies`` is one item per entry, or one error for the whole
        round trip. Returns the ``(entry, error)`` pairs whose ``on_renew_error`` hook is due.

        A batch that was answered (``now - sent_mono`` is its round trip) updates
        `round_trip_s`."""
        errors: list[tuple[RenewalEntry, BaseException]] = []
        # The confirmed entries by heartbeat and the TTL they were sent with (which, with the
        # batch's send time, gives their deadline): each group is due again at one moment and
        # lost at one moment, a cohort.
        confirmed: dict[tuple[float, int], list[RenewalEntry]] = {}
        deadlines: dict[int, float] = {}  # by TTL: rounding to the nanosecond costs, once each
        if isinstance(replies, BaseException):
            replies = [replies] * len(batch)
        else:
            sample = max(0.0, now - sent_mono)
            rtt = self.round_trip_s
            self.round_trip_s = sample if rtt == 0.0 else rtt + _RTT_GAIN * (sample - rtt)
        for entry, reply in zip(batch, replies, strict=True):
            if not entry.active:
                continue  # released (or expired) while the batch was in flight
            state = entry.state
            if isinstance(reply, BaseException):
                errors.append((entry, reply))
                self._push_due(entry, on_ns_grid(now + entry.retry_s))
            elif reply > 0:
                ttl_ms = entry.sent_ttl_ms
                deadline = deadlines.get(ttl_ms)
                if deadline is None:
                    deadline = deadlines[ttl_ms] = on_ns_grid(sent_mono + ttl_ms / 1000)
                if state.confirm(sent_mono, sent_wall, ttl_ms, reply, deadline):
                    group = (entry.heartbeat_s, ttl_ms)
                    cohort = confirmed.get(group)
                    if cohort is None:
                        confirmed[group] = [entry]
                    else:
                        cohort.append(entry)
                else:
                    self._drop(entry)
            else:
                if not state.releasing:
                    state.mark_lost(LossReason.RENEW_REFUSED)
                self._drop(entry)
        for (_, ttl_ms), cohort in confirmed.items():
            when = confirmed_due(cohort[0], now)  # the same for the whole cohort
            for entry in cohort:
                entry.next_due = when
            self._footprint += 2 * len(cohort)
            heapq.heappush(self._due, (when, next(self._seq), cohort, 0))
            heapq.heappush(self._deadlines, (deadlines[ttl_ms], next(self._seq), cohort, 0))
        self._maybe_compact()
        return errors
