"""Property ``c``, ``loss-reported``.

A lease lost during its critical section (the library said so, or another worker was granted
the same key before the body ended) ends in ``LeaseLostError`` or ``StaleTokenError``, never in a
normal return. And when the holder is cut off from Redis (``partition``, ``timeout``,
``redis-pause``, ``drop-replies``, ``drop-requests``, ``kernel-drop``, ``kernel-reject`` of at
least ttl), it is told of the loss within ttl + one heartbeat of the cut
(Kleppmann, "How to do distributed locking", 2016: a holder that does not know is the danger);
not a stale writer's lease, which nothing renews (its late write is the fence's to refuse).
After an ``evict`` (the holder's key deleted under it) whose holder's body ran on, the holder is
told within two heartbeats of the ``DEL`` (its next renewal is due within one, and is answered 0):
a library that takes the 0 for a success, or drops the notice, goes on claiming a key Redis
has given away. Another fault on the holder (or on all of Redis) that overlaps those two
heartbeats slows that renewal down: the two heartbeats then count from that fault's end, and a
``latency`` fault adds its toxic's largest delay
([`evict_notice_due`][fencedlease_lab.harness.properties.loss_reported.evict_notice_due]).
An evicted key never comes back holding its holder's owner token (the nemesis records whether it
did, ``recreated``): that owner has no acquire left to write it, so a renewal set the missing
key again, and the holder goes on claiming a key Redis had freed. In an ``asyncio`` worker (the
run's ``start`` event lists each worker's kind) a body is cancelled at its lease's loss notice,
so no access of a grant is invoked after that grant's ``lease-lost`` record (an access handed to
the store's thread at most
[`HANDED_OFF_S`][fencedlease_lab.harness.properties.loss_reported.HANDED_OFF_S] before it may
start just after it; not at all when a ``pause-holder`` froze the worker in between). The
``sync`` and ``threads`` workers are not judged so: a thread cannot be
cancelled, their bodies learn of the loss from the resource's fence and the end of the block.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from typing import Final

from ..extract import Access, Fault, Grant
from ..history import Event
from ..kinds import latency_toxic_ms
from ..mutex import EMPTYING_FAULTS, HARMLESS_FAULTS
from ._base import Context, Outcome, Property, Violation

__all__ = [
    "CUT_OFF_FAULTS",
    "FREEZING_FAULTS",
    "HANDED_OFF_S",
    "PROPERTY",
    "asyncio_workers",
    "evict_notice_due",
    "runs_after_loss",
]

KEY = "loss-reported"

#: Faults after which the holder must be told of its loss within ttl + one heartbeat.
CUT_OFF_FAULTS: Final = frozenset(
    {
        "partition", "timeout", "redis-pause", "drop-replies", "drop-requests",
        "kernel-drop", "kernel-reject",
    }
)  # fmt: skip

#: Seconds an asyncio worker's access may be invoked after its loss notice: the access was handed
#: to the store's thread before the notice, and that thread records its invocation when it runs.
HANDED_OFF_S: Final = 0.2


def asyncio_workers(events: Sequence[Event]) -> frozenset[str]:
    """The names (``w<index>``) of the workers the run's ``start`` event lists as ``asyncio``
    (``detail.worker_kinds``, one kind per worker index); none when it lists no kinds."""
    for event in events:
        if event.process == "run" and event.op == "start":
            kinds = event.detail.get("worker_kinds") or ()
            return frozenset(f"w{i}" for i, kind in enumerate(kinds) if kind == "asyncio")
    return frozenset()


#: Faults that freeze a worker's process: an access handed to its store's thread before the
#: loss notice is recorded when the process runs again.
FREEZING_FAULTS: Final = frozenset({"pause-holder"})


def runs_after_loss(
    grants: Sequence[Grant],
    accesses: Sequence[Access],
    workers: frozenset[str],
    faults: Sequence[Fault] = (),
) -> list[tuple[Grant, Access]]:
    """The accesses of a grant held by one of ``workers`` invoked more than
    [`HANDED_OFF_S`][fencedlease_lab.harness.properties.loss_reported.HANDED_OFF_S] after that
    grant's loss notice, each with its grant, in history order; not one whose worker a
    [`FREEZING_FAULTS`][fencedlease_lab.harness.properties.loss_reported.FREEZING_FAULTS] fault
    (of ``faults``) froze between the notice and the invocation (its store's thread recorded the
    handed-off access when the process ran again). (The asyncio worker hands a fenced write's
    ``recheck`` and the write to the store's thread as two calls, so a notice while a cut-off
    store holds the recheck cancels the write.)"""
    lost = {(g.process, g.id): g for g in grants if g.lost is not None and g.process in workers}
    frozen = [f for f in faults if f.kind in FREEZING_FAULTS and f.type == "ok"]
    found = []
    for access in accesses:
        grant = lost.get((access.process, access.grant)) if access.grant is not None else None
        if grant is None or grant.lost is None or access.invoked <= grant.lost + HANDED_OFF_S:
            continue
        if any(
            f.target == access.process
            and f.start <= access.invoked
            and (f.end if f.end is not None else access.invoked) >= grant.lost
            for f in frozen
        ):
            continue
        found.append((grant, access))
    return found


def _rival(
    grant: Grant, same_key: list[Grant], starts: list[float], until: float, emptied: list[float]
) -> Grant | None:
    """The first grant of the key to another worker after ``grant`` and before ``until``. A
    grant seen later but with a lower token was made by Redis before ``grant`` (its holder was
    paused between the reply and seeing it; the counter only grows): no rival, unless a fault
    that empties Redis (``emptied``: when each began) fell between the two, restarting the
    counter."""
    for other in same_key[bisect_right(starts, grant.granted) :]:
        if other.granted >= until:
            return None
        if other.process == grant.process:
            continue
        earlier = other.token < grant.token and not any(
            grant.invoked <= at <= other.granted for at in emptied
        )
        if not earlier:
            return other
    return None


def _silent_successes(ctx: Context) -> tuple[int, list[Violation]]:
    violations: list[Violation] = []
    checked = 0
    emptied = [f.start for f in ctx.data.faults if f.kind in EMPTYING_FAULTS and f.type == "ok"]
    for key, grants in ctx.grants_by_key.items():
        starts = [g.granted for g in grants]
        for grant in grants:
            if grant.end is None:
                continue
            checked += 1
            until = grant.needed_until or grant.end
            rival = _rival(grant, grants, starts, until, emptied)
            if (grant.lost is None and rival is None) or grant.end_type != "ok":
                continue
            if rival is not None:
                why = (
                    f"{rival.process} was granted the key (token {rival.token}) at "
                    f"{ctx.t(rival.granted)}, before the body ended at {ctx.t(until)}"
                )
            else:
                why = f"the library declared it lost at {ctx.t(grant.lost)}"
            lines = [grant.line, grant.end_line or grant.line]
            if rival is not None:
                lines.insert(1, rival.line)
            violations.append(
                ctx.violation(
                    KEY,
                    f"{ctx.on(key)}{grant.process}'s lease (token {grant.token}) was lost during "
                    f"its critical section ({why}) but the critical section returned normally "
                    f"at {ctx.t(grant.end)}: a silent success.",
                    grant.end,
                    lines,
                    key,
                )
            )
    return checked, violations


def _cancelled_bodies(ctx: Context) -> tuple[int, list[Violation]]:
    workers = asyncio_workers(ctx.events)
    checked = sum(1 for g in ctx.data.grants if g.lost is not None and g.process in workers)
    violations = [
        ctx.violation(
            KEY,
            f"{ctx.on(grant.key)}{grant.process}'s lease (token {grant.token}) was declared lost "
            f"at {ctx.t(grant.lost)}, but its asyncio body went on: its {access.op} was invoked at "
            f"{ctx.t(access.invoked)}; the body is cancelled at the loss notice.",
            access.invoked,
            (grant.line, *((grant.lost_line,) if grant.lost_line else ()), access.line),
            grant.key,
        )
        for grant, access in runs_after_loss(
            ctx.data.grants, ctx.data.accesses, workers, ctx.data.faults
        )
    ]
    return checked, violations


def evict_notice_due(
    evict: Fault,
    victim: str,
    deleted: float,
    faults: Sequence[Fault],
    ttl_ms: int,
    heartbeat_ms: int,
) -> float:
    """When the holder ``victim`` of the key ``evict`` deleted (at ``deleted``, monotonic
    seconds) must have been told at the latest: two heartbeats after the ``DEL`` (the next
    renewal is sent within one and answered 0), or after the end of any other fault on
    ``victim`` or on all of Redis that overlaps that window (a cut, a pause, a reset or a
    killed connection holds the renewal back until it ends), plus the ``latency`` toxic's
    largest delay while one is in force. A wall-clock jump (``clock``) moves no renewal."""
    beats = 2 * heartbeat_ms / 1000
    due = deleted + beats
    delay_ms, jitter_ms = latency_toxic_ms(ttl_ms)
    added = 0.0
    for fault in sorted(faults, key=lambda f: f.start):
        if fault is evict or fault.type != "ok" or fault.kind in HARMLESS_FAULTS:
            continue
        if fault.target is not None and fault.target != victim:
            continue
        end = fault.end if fault.end is not None else fault.start
        if fault.start > due + added or end < deleted - beats:
            continue  # the renewal that answers 0 is not slowed by it
        if fault.kind == "latency":
            added = max(added, (delay_ms + jitter_ms) / 1000)
        else:
            due = max(due, end + beats)
    return due + added


def _evictions(ctx: Context) -> tuple[int, list[Violation]]:
    beats = 2 * ctx.params.heartbeat_ms / 1000
    checked, violations = 0, []
    for fault in ctx.data.faults:
        deleted = fault.detail.get("deleted_mono")
        if fault.kind != "evict" or fault.type != "ok" or not isinstance(deleted, int | float):
            continue
        victim = next(
            (
                g for g in ctx.data.grants
                if g.process == fault.target and g.token == fault.detail.get("token")
                and g.key == fault.detail.get("key") and g.granted <= deleted
            ),
            None,
        )  # fmt: skip
        needed = None if victim is None else victim.needed_until
        if victim is None or needed is None:
            continue
        due = evict_notice_due(
            fault, victim.process, deleted, ctx.data.faults, ctx.params.ttl_ms,
            ctx.params.heartbeat_ms,
        )  # fmt: skip
        if needed <= due:
            continue  # the body ended before it had to be told
        checked += 1
        if victim.lost is not None and victim.lost <= due:
            continue
        late = (
            "was never told"
            if victim.lost is None
            else f"was told only {victim.lost - deleted:.2f} s after it"
        )
        slowed = (
            "" if due == deleted + beats else " counted from the faults that slowed its renewal"
        )
        violations.append(
            ctx.violation(
                KEY,
                f"{ctx.on(victim.key)}{victim.process}'s key (token {victim.token}) was deleted "
                f"by evict at {ctx.t(deleted)} and its body ran on until {ctx.t(needed)}, but it "
                f"{late}; its next renewal is answered 0: the bound is two heartbeats "
                f"({beats:.2f} s){slowed}, at {ctx.t(due)}.",
                due,
                (fault.line, victim.line) + ((victim.lost_line,) if victim.lost_line else ()),
                victim.key,
            )
        )
    return checked, violations


def _recreations(ctx: Context) -> tuple[int, list[Violation]]:
    checked, violations = 0, []
    for fault in ctx.data.faults:
        detail = fault.detail
        if fault.kind != "evict" or fault.type != "ok" or "recreated" not in detail:
            continue
        checked += 1
        if detail["recreated"] is not True:
            continue
        key, back = detail.get("key"), detail.get("back_mono")
        at = back if isinstance(back, int | float) else fault.end or fault.start
        again = detail.get("next_token")
        violations.append(
            ctx.violation(
                KEY,
                f"{ctx.on(key)}{fault.target}'s key (token {detail.get('token')}) was deleted by "
                f"evict at {ctx.t(detail.get('deleted_mono') or fault.start)} and was set again "
                f"for the same owner (token {again}) by {ctx.t(at)}: a renewal of a missing key "
                f"recreated it instead of answering 0.",
                at,
                (fault.line,),
                key if isinstance(key, str) else None,
            )
        )
    return checked, violations


def _stale_writers(events: Sequence[Event]) -> frozenset[tuple[str, int]]:
    """The grants a stale writer took (``acquire`` ``detail.stale_writer``): leases nothing
    renews, so no renewal can tell their holder of a cut; their late writes are the fence's to
    refuse."""
    return frozenset(
        (e.process, e.id)
        for e in events
        if e.op == "acquire" and e.type == "invoke" and e.id is not None
        and e.detail.get("stale_writer")
    )  # fmt: skip


def check(ctx: Context) -> Outcome:
    params = ctx.params
    checked, violations = _silent_successes(ctx)
    recreated_checked, recreated = _recreations(ctx)
    checked += recreated_checked
    violations += recreated
    cancelled_checked, cancelled = _cancelled_bodies(ctx)
    checked += cancelled_checked
    violations += cancelled
    evicted_checked, evicted = _evictions(ctx)
    checked += evicted_checked
    violations += evicted
    bound = (params.ttl_ms + params.heartbeat_ms) / 1000
    unrenewed = _stale_writers(ctx.events)
    for fault in ctx.data.faults:
        if fault.kind not in CUT_OFF_FAULTS or fault.type != "ok" or fault.end is None:
            continue
        if fault.end - fault.start < params.ttl_ms / 1000:
            continue
        for grant in ctx.data.grants:
            if fault.target is not None and grant.process != fault.target:
                continue
            if (grant.process, grant.id) in unrenewed:
                continue
            needed = grant.needed_until
            if grant.granted >= fault.start or needed is None:
                continue
            if needed <= fault.start + bound:
                continue  # the body ended before it had to be told
            checked += 1
            if grant.lost is None or grant.lost > fault.start + bound:
                late = (
                    "was never told"
                    if grant.lost is None
                    else f"was told only {grant.lost - fault.start:.2f} s after the cut"
                )
                violations.append(
                    ctx.violation(
                        KEY,
                        f"{ctx.on(grant.key)}{grant.process} (token {grant.token}) was cut off "
                        f"from Redis by {fault.kind} at {ctx.t(fault.start)} and its body ran on "
                        f"until {ctx.t(needed)}, but it {late}; the bound is ttl + one heartbeat "
                        f"= {bound:.2f} s.",
                        fault.start + bound,
                        (fault.line, grant.line) + ((grant.lost_line,) if grant.lost_line else ()),
                        grant.key,
                    )
                )
    violations.sort(key=lambda v: v.at if v.at is not None else 0.0)
    return Outcome(checked, violations)


PROPERTY = Property(KEY, "c", "a lost lease is reported, never a silent success", check)
