"""A lock-level model check: each key, as its holders saw it, is a linearizable fenced mutex.

The model is the ``FencedMutex`` of Jepsen's Hazelcast suite (its ``FencedLock`` workload, checked
with Knossos): a state ``(owner, fence)``; an ``acquire`` by a client is possible only when nobody
owns the lock, and its token must be strictly greater than every token seen before (an acquire
whose token is unknown, one that timed out, takes the lock and leaves the fence); a ``release`` is
possible only by the owner (owner-aware). A lease adds what a lock of that suite has no need
for: an ``expire`` of the holder's lease (the owner, if it is the holder, is no more; anyone else's
is a no-op), whose moment is unknown but never before its claim's end (the library's confirmed
deadline, the release's send or the loss notice, whichever came first), and the nemesis'
``evict`` of a key (whoever owns it is no more).

The operations of one key, from what the workers were told:

- ``acquire``: invoked at the acquire's invocation; its outcome known at its ``ok`` (the
  token granted); an acquire that ended ``info`` (timed out, an error) may have taken the lock at
  any point after its invocation, or never (Knossos' and Porcupine's reading of an unknown
  outcome), its token unknown; a refused acquire took nothing and is left out;
- ``release``: a release answered ``ok`` (the key deleted or handed on: the caller owned it)
  happened between its invocation and its answer; an ``info`` one may have happened or not; one
  answered ``fail`` (the key was gone or another's) changed nothing and is left out;
- ``expire``: one per grant, and per acquire of unknown outcome (from its invocation), may happen
  at any point after the claim's end, or never;
- ``evict`` (the nemesis deleted the key): between the fault's start and the delete's return
  (``deleted_mono``); an evict that deleted nothing is left out.

A fault that empties Redis (a restart without persistence) starts the key's history anew (the
counter restarts: every earlier token is forgotten); a grant whose acquire spans its start
belongs to neither side and is left out.

The search is Wing & Gong's with Lowe's memoisation, operations of unknown outcome optional, as
in [`linearizable`][fencedlease_lab.harness.linearizable]; a search that exceeds its budget leaves
the key not judged, which the result says.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Final, Literal

import attrs

from ..history import Event
from .causes import EMPTYING_FAULTS
from .facts import _claims, _Facts

__all__ = ["LockFailure", "LockModelCheck", "LockOp", "check_lock_model", "lock_step"]

LockOpKind = Literal["acquire", "release", "expire", "evict"]
#: Search steps one key may take before it is left not judged.
STEP_BUDGET: Final = 200_000
#: The state: (owner, fence), owner a (process, grant) pair or None.
LockState = tuple[tuple[str, int] | None, int]


@attrs.frozen
class LockOp:
    """One operation on one key's lock: ``kind``; ``client`` (the worker and the grant's id;
    ``("nemesis", 0)`` for an evict); ``token`` (an acquire's; None: unknown); ``invoked`` and
    ``completed`` (monotonic seconds; ``completed`` None: an unknown outcome, which may take
    effect at any point after ``invoked`` or never); ``line``: the history line that shows it."""

    kind: LockOpKind
    client: tuple[str, int]
    key: str
    token: int | None
    invoked: float
    completed: float | None
    line: int

    @property
    def known(self) -> bool:
        """Its outcome is known: it must appear in every linearization."""
        return self.completed is not None

    def describe(self, origin: float = 0.0) -> str:
        """``w1's acquire (token 5) [1.200 s .. 1.230 s]``, for messages."""
        who = self.client[0]
        token = f" (token {self.token})" if self.kind == "acquire" else ""
        end = "unknown" if self.completed is None else f"{self.completed - origin:.3f} s"
        return f"{who}'s {self.kind}{token} [{self.invoked - origin:.3f} s .. {end}]"


def lock_step(state: LockState, op: LockOp) -> LockState | None:
    """The model: the state after ``op``, or None when ``op`` is impossible from ``state``."""
    owner, fence = state
    if op.kind == "acquire":
        if owner is not None:
            return None
        if op.token is None:
            return (op.client, fence)
        return (op.client, op.token) if op.token > fence else None
    if op.kind == "release":
        return (None, fence) if owner == op.client else None
    if op.kind == "expire":
        return (None, fence) if owner == op.client else state
    return (None, fence)  # evict


@attrs.frozen
class LockFailure:
    """A key whose lock history no order explains: ``culprit``, the known operation whose
    completion ends the shortest such prefix; ``concurrent``: the operations overlapping it."""

    key: str
    culprit: LockOp
    concurrent: tuple[LockOp, ...]

    def explain(self, origin: float = 0.0) -> str:
        near = "; ".join(op.describe(origin) for op in self.concurrent[:6])
        return (
            f"key {self.key!r}: no order of its lock operations explains "
            f"{self.culprit.describe(origin)} (a fenced mutex: an acquire only when the key is "
            "free, with a token greater than every earlier one; a release only by its owner)"
            + (f". Concurrent with it: {near}." if near else ".")
        )


@attrs.frozen
class LockModelCheck:
    """The verdict: ``keys`` and ``ops`` judged, ``failures``, ``not_judged`` (keys whose search
    exceeded its budget)."""

    keys: int
    ops: int
    failures: tuple[LockFailure, ...]
    not_judged: tuple[str, ...]


def _linearizable(ops: Sequence[LockOp], budget: int) -> bool | None:
    """Whether some order of ``ops`` respecting real time has each known op possible; None when
    the search took more than ``budget`` steps."""
    order = sorted(range(len(ops)), key=lambda i: ops[i].invoked)
    known_mask = sum(1 << i for i, op in enumerate(ops) if op.known)
    seen: dict[tuple[int, LockState], list[int]] = defaultdict(list)
    stack: list[tuple[int, LockState]] = [(0, (None, 0))]
    steps = 0
    while stack:
        done, state = stack.pop()
        if done & known_mask == known_mask:
            return True
        steps += 1
        if steps > budget:
            return None
        # Real time: nothing invoked after the earliest pending known completion may come first.
        horizon = min(
            (
                op.completed
                for i, op in enumerate(ops)
                if op.completed is not None and not done >> i & 1
            ),
            default=float("inf"),
        )
        for i in order:
            op = ops[i]
            if op.invoked > horizon:
                break
            if done >> i & 1:
                continue
            after = lock_step(state, op)
            if after is None or (not op.known and after == state):
                continue  # impossible, or an optional op that would change nothing
            bits = done | 1 << i
            optional = bits & ~known_mask
            earlier = seen[(bits & known_mask, after)]
            if any(e & ~optional == 0 for e in earlier):
                continue  # a configuration with fewer optional ops taken did the same
            earlier.append(optional)
            stack.append((bits, after))
    return False


def _failure(key: str, ops: Sequence[LockOp], budget: int) -> LockFailure:
    """The culprit of the shortest failing prefix of ``ops``, which no order explains."""
    cuts = sorted({op.completed for op in ops if op.completed is not None})
    low, high = 0, len(cuts) - 1
    while low < high:
        middle = (low + high) // 2
        if _linearizable(_prefix(ops, cuts[middle]), budget) is False:
            high = middle
        else:
            low = middle + 1
    cut = cuts[low]
    culprit = next(op for op in ops if op.completed == cut)
    overlapping = [
        op
        for op in ops
        if op is not culprit
        and op.invoked <= cut
        and (op.completed is None or op.completed >= culprit.invoked)
    ]
    # The latest invoked first: optional operations of long-ended grants overlap everything.
    overlapping.sort(key=lambda op: op.invoked, reverse=True)
    return LockFailure(key, culprit, tuple(overlapping))


def _prefix(ops: Sequence[LockOp], cut: float) -> list[LockOp]:
    """The history as seen at ``cut``: what completed later has an unknown outcome."""
    return [
        op if op.completed is None or op.completed <= cut else attrs.evolve(op, completed=None)
        for op in ops
        if op.invoked <= cut
    ]


def lock_ops(events: Sequence[Event], *, ttl_ms: int) -> dict[tuple[str, int], list[LockOp]]:
    """Every key's lock operations, by (key, epoch): the epoch counts the faults that emptied
    Redis before the operations' grant was asked for (module docstring)."""
    facts = _Facts(events)
    empties = sorted(f.start for f in facts.faults if f.kind in EMPTYING_FAULTS and not f.failed)
    empty_ends = sorted(
        f.end if f.end is not None else float("inf")
        for f in facts.faults
        if f.kind in EMPTYING_FAULTS and not f.failed
    )

    def epoch(invoked: float, done: float | None) -> int | None:
        """The epoch of a grant asked for at ``invoked`` and known at ``done``; None when an
        emptying fault falls between the two."""
        first = sum(1 for s in empties if s < invoked)
        last = sum(1 for s in empty_ends if s <= (invoked if done is None else done))
        return first if first == last else None

    out: dict[tuple[str, int], list[LockOp]] = defaultdict(list)
    ends = {(c.process, c.grant): c for c in _claims(facts, ttl_ms)[0]}
    pending: dict[tuple[str, str, int], Event] = {}
    where: dict[tuple[str, int], tuple[str, int]] = {}
    for line, event in enumerate(events, 1):
        number = event.id if event.op == "acquire" else event.grant
        if event.op not in ("acquire", "release") or number is None:
            continue
        client = (event.process, number)
        if event.type == "invoke":
            pending[(event.op, event.process, number)] = event
            continue
        begun = pending.pop((event.op, event.process, number), None)
        if begun is None or event.type == "fail":
            continue  # a refused acquire took nothing; a refused release changed nothing
        done = event.mono if event.type == "ok" else None
        if event.op == "release":
            if client in where:
                key, known_era = where[client]
                out[(key, known_era)].append(
                    LockOp("release", client, key, None, begun.mono, done, line)
                )
            continue
        era = epoch(begun.mono, done)
        if era is None:
            continue
        key = str(begun.key or event.key or "")
        where[client] = (key, era)
        token = event.token if event.type == "ok" else None
        out[(key, era)].append(LockOp("acquire", client, key, token, begun.mono, done, line))
        claim = ends.get(client)
        # Never before the confirmed deadline (counted from a send), even for a grant whose
        # reply was seen after it (its claim starts and ends at the reply).
        expiry = begun.mono if claim is None or done is None else min(claim.deadline, claim.end)
        out[(key, era)].append(LockOp("expire", client, key, None, expiry, None, line))
    for fault in facts.faults:
        # An evict deleted the key (if it did) between its start and ``deleted_mono``.
        if fault.kind == "evict" and fault.key is not None and fault.deleted is not None:
            era = sum(1 for s in empties if s < fault.start)
            op = LockOp(
                "evict", ("nemesis", 0), fault.key, None, fault.start, fault.deleted, fault.line
            )
            out[(fault.key, era)].append(op)
    return out


def check_lock_model(
    events: Sequence[Event], *, ttl_ms: int, budget: int = STEP_BUDGET
) -> LockModelCheck:
    """Check every key's lock history against the fenced mutex (module docstring)."""
    failures: list[LockFailure] = []
    not_judged: list[str] = []
    by_key = lock_ops(events, ttl_ms=ttl_ms)
    for (key, era), ops in sorted(by_key.items()):
        verdict = _linearizable(ops, budget)
        if verdict is None:
            not_judged.append(f"lock model: key {key!r} (epoch {era}): search budget exceeded")
        elif not verdict:
            failures.append(_failure(key, ops, budget))
    return LockModelCheck(
        len({key for key, _ in by_key}),
        sum(len(ops) for ops in by_key.values()),
        tuple(failures),
        tuple(not_judged),
    )
