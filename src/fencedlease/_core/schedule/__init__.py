"""The renewal schedule: which leases are due for renewal and whose deadline is next. No I/O.

The sync renewer (a thread) and the async one (a task) both drive `RenewalSchedule`: pop a
batch, send it as one round trip, hand the replies to `RenewalSchedule.apply`, mark expired
leases lost, sleep until the next wakeup. The loss rules it applies are `fencedlease._core.state`'s.

The rule both follow so that a slow round trip costs no lease (every renewal time derives from the
confirmed deadline, `confirmed_due`):

* a batch takes every lease due within the smoothed round trip of the recent batches (and at least
  half a heartbeat, at most a whole one): renewing early is harmless, and a lease that would come
  due while the batch is in flight goes with it instead of waiting for its reply;
* up to `MAX_IN_FLIGHT` batches are in flight at once: a lease that comes due during a round
  trip anyway (acquired, or retried, meanwhile) goes out on time in a second one rather than a
  round trip late. With the first rule, the normal case stays at one batch per heartbeat.

The package's modules: `.entry` (a lease under renewal, what is sent for it), `.heaps` (the
schedule itself), `.renewer` (what both renewers do when a lease joins).
"""

from __future__ import annotations

from fencedlease._core.schedule.entry import (
    RenewalEntry,
    RenewalItem,
    RenewReply,
    confirmed_due,
    renewal_items,
)
from fencedlease._core.schedule.heaps import MAX_IN_FLIGHT, RenewalSchedule
from fencedlease._core.schedule.renewer import RenewerCore

__all__ = [
    "MAX_IN_FLIGHT",
    "RenewReply",
    "RenewalEntry",
    "RenewalItem",
    "RenewalSchedule",
    "RenewerCore",
    "confirmed_due",
    "renewal_items",
]
