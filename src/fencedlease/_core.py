"""The engine shared by every face, by one name: clocks (:mod:`fencedlease._clock`), a lease's
state and the loss rules (:mod:`fencedlease._state`), the renewal schedule
(:mod:`fencedlease._schedule`), the acquire attempt (:mod:`fencedlease._attempt`) and the lease
view (:mod:`fencedlease._view`). Nothing here does I/O or starts a thread. The managers and the
renewers import the engine from here; the other modules import the part they use.
"""

from __future__ import annotations

from ._attempt import AcquireAttempt, is_ambiguous, may_have_written, never_sent
from ._clock import (
    SYSTEM_CLOCK,
    AsyncClock,
    Clock,
    SendTime,
    SystemClock,
    marking_sends,
    on_ns_grid,
)
from ._schedule import (
    MAX_IN_FLIGHT,
    RenewalEntry,
    RenewalSchedule,
    RenewReply,
    confirmed_due,
    renewal_items,
)
from ._state import (
    RELEASE_FLOOR_MS,
    LeaseState,
    LossReason,
    release_bound_s,
    release_wait_more_s,
    restored_state,
)
from ._view import LeaseView

__all__ = [
    "MAX_IN_FLIGHT",
    "RELEASE_FLOOR_MS",
    "SYSTEM_CLOCK",
    "AcquireAttempt",
    "AsyncClock",
    "Clock",
    "LeaseState",
    "LeaseView",
    "LossReason",
    "RenewReply",
    "RenewalEntry",
    "RenewalSchedule",
    "SendTime",
    "SystemClock",
    "confirmed_due",
    "is_ambiguous",
    "marking_sends",
    "may_have_written",
    "never_sent",
    "on_ns_grid",
    "release_bound_s",
    "release_wait_more_s",
    "renewal_items",
    "restored_state",
]
