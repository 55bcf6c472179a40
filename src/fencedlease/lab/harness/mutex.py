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
    ([`LEASE_KEEPING_FAULTS`][fencedlease.lab.harness.mutex.LEASE_KEEPING_FAULTS]: a wall-clock
    jump, a killed connection, flushed scripts, and replies late by so little that the larger of
    a heartbeat and one of them, plus two more, fit in the ttl, which the ``latency`` fault's
    are: see [`could_cost_lease`][fencedlease.lab.harness.mutex.could_cost_lease]). The
    ``latency`` fault holds its victim in one lease for its whole length, and is the only fault
    on that worker and on Redis while it is in force: a renewer that renews too late, or lets a
    slow reply cost the lease, is caught there whatever else the run did. A loss with no cause
    means the library let a healthy lease expire. Losses because the manager was closed (the
    run stopping) are not losses of this kind. A refused release is explained, besides, by a
    fault that broke the holder's connections while the release was in flight
    ([`DOUBTS_RELEASE`][fencedlease.lab.harness.kinds.DOUBTS_RELEASE]: a ``client-kill`` in force
    between its send and its refusal): the release was sent again on a new connection, and if
    the first had run, the second answered 0.

The events read (the history's [`Event`][fencedlease.lab.harness.Event]):

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
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Final, Literal

import attrs

from .history import Event
from .kinds import DOUBTS_RELEASE, FAULTS, SLOWED_BY_LATENCY, latency_toxic_ms

__all__ = [
    "EMPTYING_FAULTS",
    "HARMLESS_FAULTS",
    "LEASE_KEEPING_FAULTS",
    "Claim",
    "MutexCheck",
    "MutexIssue",
    "check_mutex",
    "claims_from_history",
    "could_cost_lease",
    "could_cost_lease_together",
]

#: Faults after which Redis may have forgotten a key before its expiry.
EMPTYING_FAULTS: Final = frozenset({"redis-restart-nopersist"})
#: Faults that must cost no lease: a loss while one is in force is still unexplained (a wall
#: clock jump must neither shorten nor lengthen a lease).
HARMLESS_FAULTS: Final = frozenset({"clock"})
#: Faults that cannot take a healthy lease away (``disrupts`` false in
#: [`FAULTS`][fencedlease.lab.harness.kinds.FAULTS]): a loss with only these in force is
#: unexplained. ``latency`` explains a loss only when its toxic's delay is large enough (see
#: [`could_cost_lease`][fencedlease.lab.harness.mutex.could_cost_lease]).
LEASE_KEEPING_FAULTS: Final = frozenset(kind for kind, info in FAULTS.items() if not info.disrupts)
#: Loss reasons that are no fault's doing (the manager closed, the process forked).
_SELF_INFLICTED: Final = ("manager was closed", "forked")

#: The loss reason of a release answered 0.
RELEASE_REFUSED: Final = "the release was refused"

IssueKind = Literal["overlap", "refusal-noticed", "loss-explained"]


@attrs.frozen
class Claim:
    """One grant's claim on its key, in monotonic seconds.

    ``start``: the grant's reply; ``deadline``: the last confirmed deadline (``exact`` False: only
    a lower bound, the acquire's invocation + ttl, and renewals recorded); ``end``: the claim's
    end, the earliest of the deadline, the release (``ended_by``: ``"deadline"``, ``"release"``,
    ``"body-end"``, ``"loss-notice"``); ``line``: the acquire's ``ok``; ``deadline_line``: the
    event that confirmed ``deadline``; ``end_line``: the event that ended it otherwise.
    """

    process: str
    grant: int
    key: str
    token: int | None
    start: float
    deadline: float
    exact: bool
    end: float
    ended_by: str
    line: int
    deadline_line: int
    end_line: int | None = None

    def describe(self, origin: float = 0.0) -> str:
        bound = "" if self.exact else " at least"
        return (
            f"{self.process}'s lease (token {self.token}) granted at {self.start - origin:.3f} s, "
            f"confirmed{bound} until {self.deadline - origin:.3f} s, claimed until "
            f"{self.end - origin:.3f} s ({self.ended_by})"
        )


@attrs.frozen
class MutexIssue:
    """One broken promise: ``kind`` (which of the three), ``message``, ``at`` (monotonic
    seconds), the history ``lines`` (1-based) that show it."""

    kind: IssueKind
    message: str
    at: float | None
    lines: tuple[int, ...]


@attrs.frozen
class MutexCheck:
    """The verdict. ``claims`` judged for overlaps, ``refusals`` (0 replies) and ``losses``
    (loss notices) judged; ``issues``; ``exempt``: overlaps explained by a fault that empties
    Redis, in words; ``evicted``: overlaps explained by an ``evict`` its holder could not yet
    know of, in words; ``not_judged``: each part that could not be, with what the history lacks;
    ``lower_bound_claims``: claims whose deadline is only bounded below (no recorded deadline);
    ``unknown_end``: grants left out because their claim's end is unknown; ``expired_on_arrival``:
    loss notices of grants whose reply came with less than two heartbeats left of their
    confirmed deadline (the acquire, or the hand-off wait it ended, took longer than the ttl
    less two heartbeats: the machine or the queue stalled it), in words: the library never had a
    lease it could renew in time, so they are not judged as losses."""

    claims: int
    refusals: int
    losses: int
    issues: tuple[MutexIssue, ...]
    exempt: tuple[str, ...]
    not_judged: tuple[str, ...]
    lower_bound_claims: int = 0
    unknown_end: int = 0
    expired_on_arrival: tuple[str, ...] = ()
    evicted: tuple[str, ...] = ()

    @property
    def checked(self) -> int:
        return self.claims + self.refusals + self.losses


@attrs.frozen
class _Grant:
    process: str
    id: int
    key: str
    token: int | None
    invoked: float
    granted: float
    line: int
    deadline: float | None


@attrs.frozen
class _Fault:
    kind: str
    target: str | None
    start: float
    end: float | None
    failed: bool
    line: int
    key: str | None = None
    deleted: float | None = None


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) else None


class _Facts:
    """What the checks need, gathered from the history in one pass."""

    def __init__(self, events: Sequence[Event]) -> None:
        self.grants: dict[tuple[str, int], _Grant] = {}
        self.renewed: dict[tuple[str, int], list[tuple[float, float | None, int]]] = defaultdict(
            list
        )
        self.refused: list[tuple[str, int, float, int]] = []
        self.renew_events = 0
        self.release_sent: dict[tuple[str, int], tuple[float, int]] = {}
        self.body_end: dict[tuple[str, int], tuple[float, int]] = {}
        self.hold_done: set[tuple[str, int]] = set()
        self.lost: dict[tuple[str, int], tuple[float, str, int]] = {}
        self.faults: list[_Fault] = []
        self.connects: dict[str, list[float]] = defaultdict(list)
        acquires: dict[tuple[str, int], tuple[Event, int]] = {}
        fault_starts: dict[int, tuple[Event, int]] = {}
        for line, event in enumerate(events, 1):
            op, kind = event.op, event.type
            if event.process == "nemesis" and op == "fault" and event.id is not None:
                if kind == "invoke":
                    fault_starts[event.id] = (event, line)
                elif event.id in fault_starts:
                    start, start_line = fault_starts.pop(event.id)
                    detail = {**start.detail, **event.detail}
                    self.faults.append(
                        _Fault(
                            str(detail.get("fault")), detail.get("target"), start.mono,
                            event.mono, kind == "fail", start_line, detail.get("key"),
                            _number(detail.get("deleted_mono")),
                        )
                    )  # fmt: skip
                continue
            if op == "connect":
                self.connects[event.process].append(event.mono)
                continue
            if op == "acquire" and event.id is not None:
                ident = (event.process, event.id)
                if kind == "invoke":
                    acquires[ident] = (event, line)
                elif kind == "ok" and ident in acquires:
                    invoke, _ = acquires.pop(ident)
                    deadline = event.detail.get("deadline")
                    self.grants[ident] = _Grant(
                        event.process, event.id, str(event.key or invoke.key or ""),
                        event.token, invoke.mono, event.mono, line,
                        float(deadline) if isinstance(deadline, int | float) else None,
                    )  # fmt: skip
                continue
            grant = event.grant if event.grant is not None else event.id
            if grant is None:
                continue
            ident = (event.process, grant)
            if op == "renew":
                self.renew_events += 1
                if kind == "ok":
                    deadline = event.detail.get("deadline")
                    self.renewed[ident].append(
                        (
                            event.mono,
                            float(deadline) if isinstance(deadline, int | float) else None,
                            line,
                        )
                    )
                elif kind == "fail" and event.outcome == "refused":
                    self.refused.append((event.process, grant, event.mono, line))
            elif op == "release" and kind == "invoke":
                self.release_sent.setdefault(ident, (event.mono, line))
            elif op == "release" and kind == "fail":
                reason = RELEASE_REFUSED
                self.lost.setdefault(ident, (event.mono, reason, line))
            elif op == "lease-lost":
                reason = str(event.detail.get("reason") or event.outcome or "")
                self.lost.setdefault(ident, (event.mono, reason, line))
            elif op == "hold" and kind != "invoke":
                self.hold_done.add(ident)
                body_end = event.detail.get("body_end")
                if isinstance(body_end, int | float):
                    self.body_end[ident] = (float(body_end), line)
                if event.outcome == "lease-lost":
                    self.lost.setdefault(ident, (event.mono, "lease-lost", line))
        for start, start_line in fault_starts.values():
            self.faults.append(
                _Fault(
                    str(start.detail.get("fault")), start.detail.get("target"), start.mono,
                    None, False, start_line,
                )
            )  # fmt: skip


def claims_from_history(events: Sequence[Event], *, ttl_ms: int) -> tuple[list[Claim], int]:
    """Every grant's [`Claim`][fencedlease.lab.harness.mutex.Claim] (ordered by start), and how many
    grants had none (their hold ended with no release time or body end recorded, so the claim's end
    is unknown)."""
    return _claims(_Facts(events), ttl_ms)


def _claims(facts: _Facts, ttl_ms: int) -> tuple[list[Claim], int]:
    claims: list[Claim] = []
    unknown_end = 0
    for ident, grant in facts.grants.items():
        exact = grant.deadline is not None
        deadline = grant.deadline if grant.deadline is not None else grant.invoked + ttl_ms / 1000
        deadline_line = grant.line
        for _, confirmed, line in facts.renewed.get(ident, ()):
            if confirmed is not None and confirmed > deadline:
                deadline, deadline_line = confirmed, line
        end, ended_by, end_line = deadline, "deadline", None
        cuts: list[tuple[float, str, int]] = []
        if ident in facts.release_sent:
            at, line = facts.release_sent[ident]
            cuts.append((at, "release", line))
        elif ident in facts.body_end:
            at, line = facts.body_end[ident]
            cuts.append((at, "body-end", line))
        elif ident in facts.hold_done:
            unknown_end += 1
            continue
        if ident in facts.lost:
            at, _, line = facts.lost[ident]
            cuts.append((at, "loss-notice", line))
        for at, why, line in cuts:
            if at < end:
                end, ended_by, end_line = at, why, line
        claims.append(
            Claim(
                grant.process, grant.id, grant.key, grant.token, grant.granted, deadline, exact,
                max(end, grant.granted), ended_by, grant.line, deadline_line, end_line,
            )
        )  # fmt: skip
    claims.sort(key=lambda c: c.start)
    return claims, unknown_end


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
    [`LEASE_KEEPING_FAULTS`][fencedlease.lab.harness.mutex.LEASE_KEEPING_FAULTS] (a kind the
    table does not know counts as one that may), and ``latency`` when the larger of
    ``heartbeat_ms`` and its toxic's largest delay ``d``
    ([`latency_toxic_ms`][fencedlease.lab.harness.kinds.latency_toxic_ms]), plus ``2 d``,
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
    ([`could_cost_lease`][fencedlease.lab.harness.mutex.could_cost_lease]), or a ``latency``
    fault is joined by one of
    [`SLOWED_BY_LATENCY`][fencedlease.lab.harness.kinds.SLOWED_BY_LATENCY], or by a connection
    the holder made meanwhile (``connected``): a reconnect, or a script sent again after
    NOSCRIPT, pays the toxic's delay once more per round trip."""
    if any(could_cost_lease(kind, ttl_ms, heartbeat_ms) for kind in kinds):
        return True
    return "latency" in kinds and (connected or any(k in SLOWED_BY_LATENCY for k in kinds))


def check_mutex(
    events: Sequence[Event],
    *,
    ttl_ms: int,
    heartbeat_ms: int,
    origin: float = 0.0,
) -> MutexCheck:
    """Check the three promises of the module docstring on a merged history.

    ``ttl_ms`` / ``heartbeat_ms``: the run's (milliseconds). Returns a
    [`MutexCheck`][fencedlease.lab.harness.mutex.MutexCheck]; a part the history has no events for
    is named in ``not_judged``, never passed silently.
    """
    facts = _Facts(events)
    issues: list[MutexIssue] = []
    exempt: list[str] = []
    evicted: list[str] = []
    not_judged: list[str] = []

    def t(mono: float | None) -> str:
        return "never" if mono is None else f"{mono - origin:.3f} s"

    # overlap ------------------------------------------------------------------------------
    claims, unknown_end = _claims(facts, ttl_ms)
    if not claims:
        not_judged.append("overlap: history lacks grants (acquire ok) with a known claim end")
    by_key: dict[str, list[Claim]] = defaultdict(list)
    for claim in claims:
        by_key[claim.key].append(claim)
    for key, key_claims in sorted(by_key.items()):
        widest: Claim | None = None
        for claim in key_claims:  # ordered by start
            # An empty claim (its deadline had passed when the reply was seen: the process was
            # paused in between) told its holder nothing it could act on: it overlaps nothing.
            if widest is not None and claim.start < min(widest.end, claim.end):
                emptied = next(
                    (
                        f
                        for f in facts.faults
                        if f.kind in EMPTYING_FAULTS
                        and not f.failed
                        and f.start < claim.start
                        and (f.end is None or f.end > widest.start)
                    ),
                    None,
                )
                eviction = _unknowable_eviction(facts.faults, widest, claim.start, ttl_ms)
                words = (
                    f"key {key!r}: {claim.process}'s lease (token {claim.token}) was granted at "
                    f"{t(claim.start)}, while the library still told {widest.process} it held "
                    f"the key: {widest.describe(origin)}; they overlap by "
                    f"{min(widest.end, claim.end) - claim.start:.3f} s."
                )
                if emptied is not None:
                    exempt.append(
                        f"{words} {emptied.kind} at {t(emptied.start)} emptied Redis in between."
                    )
                elif eviction is not None:
                    evicted.append(
                        f"{words} evict deleted {widest.process}'s key at {t(eviction.deleted)}, "
                        "and no renewal sent after it was confirmed: its holder could not know "
                        "before a renewal was answered."
                    )
                else:
                    lines = sorted(
                        {widest.line, widest.deadline_line, claim.line}
                        | ({widest.end_line} if widest.end_line else set())
                    )
                    issues.append(MutexIssue("overlap", words, claim.start, tuple(lines)))
            if widest is None or claim.end > widest.end:
                widest = claim

    # refusal-noticed ----------------------------------------------------------------------
    if facts.renew_events == 0:
        not_judged.append("refusal-noticed: history lacks renew events (ok / fail refused)")
    for process, grant, at, line in facts.refused:
        ident = (process, grant)
        later = [r for r in facts.renewed.get(ident, ()) if r[0] > at]
        if later:
            issues.append(
                MutexIssue(
                    "refusal-noticed",
                    f"{process}'s lease (grant {grant}) had a renewal answered 0 at {t(at)}, and "
                    f"yet a renewal was confirmed at {t(later[0][0])}: a lost lease came back.",
                    later[0][0],
                    (line, later[0][2]),
                )
            )
        if ident not in facts.lost:
            issues.append(
                MutexIssue(
                    "refusal-noticed",
                    f"{process}'s lease (grant {grant}) had a renewal answered 0 at {t(at)} but "
                    "was never declared lost: its holder was not told.",
                    at,
                    (line,),
                )
            )

    # loss-explained -----------------------------------------------------------------------
    window = (ttl_ms + heartbeat_ms) / 1000
    losses = 0
    expired_on_arrival: list[str] = []
    for (process, grant), (at, reason, line) in sorted(facts.lost.items(), key=lambda i: i[1][0]):
        if any(word in reason for word in _SELF_INFLICTED):
            continue
        granted = facts.grants.get((process, grant))
        deadline = None if granted is None else granted.deadline
        renewable = 2 * heartbeat_ms / 1000  # the first renewal is due at once when less is left
        if granted is not None and deadline is not None and deadline - granted.granted < renewable:
            expired_on_arrival.append(
                f"{process}'s lease of {granted.key!r} (token {granted.token}) granted at "
                f"{t(granted.granted)}, confirmed only until {t(deadline)}"
            )
            continue
        losses += 1
        near = [
            f
            for f in facts.faults
            if not f.failed
            and (f.target is None or f.target == process)
            and f.start <= at
            and (f.end is None or f.end >= at - window)
        ]
        connected = any(at - window <= c <= at for c in facts.connects.get(process, ()))
        kinds = [f.kind for f in near]
        if reason == RELEASE_REFUSED:
            # A connection of the holder broken between the release's send and its refusal:
            # the release went out once more, and if the first had run, the second answered 0.
            sent, _ = facts.release_sent.get((process, grant), (at, 0))
            if any(f.kind in DOUBTS_RELEASE and (f.end is None or f.end >= sent) for f in near):
                continue
        if not could_cost_lease_together(kinds, ttl_ms, heartbeat_ms, connected=connected):
            kept = sorted(set(kinds))
            only = (
                f" (only {', '.join(kept)}, which cost{'s' if len(kept) == 1 else ''} no lease)"
                if kept
                else ""
            )
            token = (
                facts.grants[(process, grant)].token if (process, grant) in facts.grants else None
            )
            issues.append(
                MutexIssue(
                    "loss-explained",
                    f"{process}'s lease (token {token}) was declared lost at {t(at)} ({reason}) "
                    f"with no fault that can cost a lease on Redis or on {process} in the "
                    f"{window:.2f} s (ttl + one heartbeat) before{only}: the library let a "
                    "healthy lease go.",
                    at,
                    (line,),
                )
            )
    return MutexCheck(
        len(claims),
        len(facts.refused),
        losses,
        tuple(sorted(issues, key=lambda i: i.at if i.at is not None else 0.0)),
        tuple(exempt),
        tuple(not_judged),
        sum(1 for c in claims if not c.exact),
        unknown_end,
        tuple(expired_on_arrival),
        tuple(evicted),
    )
