"""A lock-level check: the leases themselves, not the data they guard.

Fencing hides a broken lease from the data: a stale holder's write is refused, so the data checks
pass even when two workers held the same key at once. This module checks the library's own
promise, from what each worker was told:

``overlap``
    A grant's *claim* is the interval in which the library told its holder it held the key: from
    the grant (the acquire's reply) to its *last confirmed deadline* (the send time of the last
    acquire or renewal Redis confirmed, plus the TTL it set), cut short by the release being sent
    or a loss notice. The claims of different grants of one key never overlap: Redis grants a key
    only after the previous owner's key expired or was deleted, and that expiry is never before
    the deadline the library counted from the command's send. A claim starts at the grant's reply,
    not its send: an acquire sent just before the previous deadline may be served just after it.
    Claims that only touch (one ends at the instant the next starts) do not overlap. A fault that
    empties Redis (a restart without persistence) between the two grants explains an overlap: it
    is reported as exempt, not as a violation. So is one after an ``evict`` (the holder's key
    deleted under it) as long as no renewal sent after the delete was confirmed: the holder learns
    of the delete from its next renewal's 0 reply and cannot stop claiming before; a claim that
    renewals confirm after it is a violation (the counter survives a delete: the overlap is the
    library's).
``refusal-noticed``
    A renewal answered 0 (the key gone or owned by another) is followed by a loss notice for that
    lease, and never by a confirmed renewal: a lease, once lost, stays lost.
``loss-explained``
    No lease is lost without a fault to explain it: every loss notice (at ``L``) has a fault that
    could cause it active within ``[L - ttl - heartbeat, L]`` (a fault of Redis, or one aimed at
    the holder). A fault that cannot take a lease away explains none
    ([`LEASE_KEEPING_FAULTS`][fencedlease_lab.harness.mutex.LEASE_KEEPING_FAULTS]: a wall-clock
    jump, a killed connection, flushed scripts, and replies late by so little that the larger of
    a heartbeat and one of them, plus two more, fit in the ttl, which the ``latency`` fault's
    are: see [`could_cost_lease`][fencedlease_lab.harness.mutex.could_cost_lease]). The
    ``latency`` fault holds its victim in one lease for its whole length, and is the only fault
    on that worker and on Redis while it is in force: a renewer that renews too late, or lets a
    slow reply cost the lease, is caught there whatever else the run did. A loss with no cause
    means the library let a healthy lease expire. Losses because the manager was closed (the
    run stopping) are not losses of this kind. A refused release is explained, besides, by a
    fault that broke the holder's connections while the release was in flight
    ([`DOUBTS_RELEASE`][fencedlease_lab.harness.kinds.DOUBTS_RELEASE]: a ``client-kill`` in force
    between its send and its refusal): the release was sent again on a new connection, and if
    the first had run, the second answered 0.
``lock-model``
    Each key, as its holders saw it, is a linearizable fenced mutex, the model of Jepsen's
    Hazelcast suite (``FencedMutex``): an acquire only when the key is free, its token strictly
    greater than every token seen before; a release answered ``ok`` only by the key's owner; a
    lease's expiry at an unknown moment after its claim's end; acquires that timed out taken as
    unknown outcomes ([`lock_model`][fencedlease_lab.harness.mutex.lock_model]).

The events read (the history's [`Event`][fencedlease_lab.harness.Event]):

- ``acquire`` ``invoke`` (``key``) and ``ok`` (``token``; ``detail.deadline``: the confirmed
  deadline, monotonic seconds). Without ``detail.deadline`` the deadline is bounded below by the
  acquire's invocation + ttl (the successful attempt was sent no earlier), a weaker but sound
  claim;
- ``renew`` completions (``grant``): ``ok`` with ``detail.deadline`` (a confirmed renewal),
  ``fail`` with outcome ``refused`` (a 0 reply), ``info`` (an error: nothing is known);
- ``release`` ``invoke`` (``grant``): when the release was sent, the end of the claim; without
  it the ``hold`` completion's ``detail.body_end`` (the body finished, the release not yet sent)
  bounds it below;
- ``lease-lost`` (``grant``, ``detail.reason``), or a ``hold`` ending in ``lease-lost``: the loss
  notice;
- ``fault`` invoke/completion of the nemesis (``detail.fault``, ``detail.target``);
- ``connect`` (``info``): a connection of the worker started connecting during the run (a new
  one, or a dropped one made again); under a ``latency`` fault its handshake's round trips are
  each late by the fault's delay, so the checker counts it as able to cost a lease there, as it
  does a killed connection.

Pure: no I/O, no clock. Times in messages are seconds after ``origin``.

The parts: [`facts`][fencedlease_lab.harness.mutex.facts] (what is read from the history, and
the claims), [`causes`][fencedlease_lab.harness.mutex.causes] (which faults explain an overlap
or a loss), [`lock_model`][fencedlease_lab.harness.mutex.lock_model] (the fenced mutex model and
its search, which property f runs beside the others) and
[`check`][fencedlease_lab.harness.mutex.check] (the first three promises checked).
"""

from __future__ import annotations

from .causes import (
    EMPTYING_FAULTS,
    HARMLESS_FAULTS,
    LEASE_KEEPING_FAULTS,
    could_cost_lease,
    could_cost_lease_together,
)
from .check import MutexCheck, MutexIssue, check_mutex
from .facts import Claim, claims_from_history
from .lock_model import LockFailure, LockModelCheck, LockOp, check_lock_model, lock_step

__all__ = [
    "EMPTYING_FAULTS",
    "HARMLESS_FAULTS",
    "LEASE_KEEPING_FAULTS",
    "Claim",
    "LockFailure",
    "LockModelCheck",
    "LockOp",
    "MutexCheck",
    "MutexIssue",
    "check_lock_model",
    "check_mutex",
    "claims_from_history",
    "could_cost_lease",
    "could_cost_lease_together",
    "lock_step",
]
