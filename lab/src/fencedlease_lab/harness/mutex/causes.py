"""Which faults explain what: those that empty Redis (an overlap exempt), an ``evict`` its holder
could not know of yet (an overlap explained), and those that may cost a healthy holder its
lease (a loss explained).

Pure: no I/O, no clock."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from ..kinds import FAULTS, SLOWED_BY_LATENCY, latency_toxic_ms
from .facts import Claim, _Fault

#: Faults after which Redis may have forgotten a key before its expiry.
EMPTYING_FAULTS: Final = frozenset({"redis-restart-nopersist"})
#: Faults that must cost no lease: a loss while one is in force is still unexplained (a wall
#: clock jump must neither shorten nor lengthen a lease).
HARMLESS_FAULTS: Final = frozenset({"clock"})
#: Faults that cannot take a healthy lease away (``disrupts`` false in
#: [`FAULTS`][fencedlease_lab.harness.kinds.FAULTS]): a loss with only these in force is
#: unexplained. ``latency`` explains a loss only when its toxic's delay is large enough (see
#: [`could_cost_lease`][fencedlease_lab.harness.mutex.could_cost_lease]).
LEASE_KEEPING_FAULTS: Final = frozenset(kind for kind, info in FAULTS.items() if not info.disrupts)
#: Loss reasons that are no fault's doing (the manager closed, the process forked).
_SELF_INFLICTED: Final = ("manager was closed", "forked")


def _unknowable_eviction(
    faults: Sequence[_Fault], earlier: Claim, granted: float, ttl_ms: int
) -> _Fault | None:
    """The ``evict`` that explains an overlap of ``earlier`` with a grant of its key at
    ``granted``: one that deleted ``earlier``'s key (``detail.deleted_mono``: when the ``DEL`` had
    been answered; the fault began before it) on ``earlier``'s process after ``earlier``'s grant,
    having begun before ``granted`` (it may begin before ``earlier``'s grant: it waits for its
    victim's next lease when the victim holds none), while
    ``earlier``'s last confirmed deadline was set by a command sent before that (its deadline
    minus ttl). The holder of a deleted key learns of it only from its next renewal's 0 reply; a
    claim that a renewal sent after the delete went on confirming is not explained (the library
    took a 0, or another owner's key, for a renewal)."""
    for fault in faults:
        if fault.kind != "evict" or fault.failed or fault.target != earlier.process:
            continue
        if fault.deleted is None or (fault.key is not None and fault.key != earlier.key):
            continue
        if not (fault.start <= granted and earlier.start <= fault.deleted):
            continue
        if earlier.deadline - ttl_ms / 1000 < fault.deleted:
            return fault
    return None


def could_cost_lease(kind: str, ttl_ms: int, heartbeat_ms: int) -> bool:
    """Whether a fault of ``kind`` may cost a healthy holder its lease of ``ttl_ms`` renewed
    every ``heartbeat_ms``: any kind not in
    [`LEASE_KEEPING_FAULTS`][fencedlease_lab.harness.mutex.LEASE_KEEPING_FAULTS] (a kind the
    table does not know counts as one that may), and ``latency`` when the larger of
    ``heartbeat_ms`` and its toxic's largest delay ``d``
    ([`latency_toxic_ms`][fencedlease_lab.harness.kinds.latency_toxic_ms]), plus ``2 d``,
    reaches ``ttl_ms``: a lease is due a heartbeat after its last confirmed send, or when the
    reply of an acquire sent through the slow link comes (``d`` after the send, its deadline's
    origin); it may then wait for one of the renewer's batches in flight to come back
    (`fencedlease._core.schedule.MAX_IN_FLIGHT`), then for its own reply, each late by ``d``. (The
    renewal schedule keeps every lease within that bound,
    ``tests/unit/test_renewal_in_flight.py``; at ttl 1000 and heartbeat 250 three leases
    acquired together through a 344 ms delay already lose one.)"""
    if kind == "latency":
        delay_ms, jitter_ms = latency_toxic_ms(ttl_ms)
        largest = delay_ms + jitter_ms
        return max(heartbeat_ms, largest) + 2 * largest >= ttl_ms
    return kind not in LEASE_KEEPING_FAULTS


def could_cost_lease_together(
    kinds: Sequence[str], ttl_ms: int, heartbeat_ms: int, *, connected: bool = False
) -> bool:
    """Whether faults of ``kinds``, in force together on one holder (or on Redis), may cost it a
    healthy lease of ``ttl_ms`` renewed every ``heartbeat_ms``: one of them may
    ([`could_cost_lease`][fencedlease_lab.harness.mutex.could_cost_lease]), or a ``latency``
    fault is joined by one of
    [`SLOWED_BY_LATENCY`][fencedlease_lab.harness.kinds.SLOWED_BY_LATENCY], or by a connection
    the holder made meanwhile (``connected``): a reconnect, or a script sent again after
    NOSCRIPT, pays the toxic's delay once more per round trip."""
    if any(could_cost_lease(kind, ttl_ms, heartbeat_ms) for kind in kinds):
        return True
    return "latency" in kinds and (connected or any(k in SLOWED_BY_LATENCY for k in kinds))
