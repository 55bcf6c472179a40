"""The three promises checked on a merged history (``overlap``, ``refusal-noticed``,
``loss-explained``: the package's docstring), and the result
([`MutexCheck`][fencedlease_lab.harness.mutex.MutexCheck]).

Pure: no I/O, no clock."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Literal

import attrs

from ..history import Event
from ..kinds import DOUBTS_RELEASE
from .causes import (
    _SELF_INFLICTED,
    EMPTYING_FAULTS,
    _unknowable_eviction,
    could_cost_lease_together,
)
from .facts import RELEASE_REFUSED, Claim, _claims, _Facts

IssueKind = Literal["overlap", "refusal-noticed", "loss-explained"]


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


def check_mutex(
    events: Sequence[Event],
    *,
    ttl_ms: int,
    heartbeat_ms: int,
    origin: float = 0.0,
) -> MutexCheck:
    """Check the three promises of the module docstring on a merged history.

    ``ttl_ms`` / ``heartbeat_ms``: the run's (milliseconds). Returns a
    [`MutexCheck`][fencedlease_lab.harness.mutex.MutexCheck]; a part the history has no events for
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
