"""A model check of the data: is the fenced resource, key by key, a linearizable fenced register?

Each key of the resource is a register whose state is ``(value, fence)``: the value last written
and the highest token accepted (with the lease that presented it). Every access is checked
against one sequential model, the library's fencing rule (`fencedlease._core.fencing.decide`,
restated in [`step`][fencedlease.lab.harness.linearizable.step]):

- ``write(v, t)``: accepted (the register becomes ``(v, t)``) or refused with the last accepted
  token ``last``; a refusal changes nothing;
- ``read(t)``: accepted (it returns the value and moves the fence to ``t``: reads are
  token-checked) or refused;
- an unfenced access (a plain read or write, as in the ``write-fenced`` and ``unfenced`` modes)
  is always accepted and leaves the fence alone.

The check asks whether one total order of the operations exists that respects real time (an
operation that completed before another was invoked comes first), in which each operation's
recorded outcome (the value a read returned, a write's acceptance or refusal and the ``last``
token it was refused with) is what the model gives. Operations of unknown outcome (``info``, or
never completed) may or may not have taken effect, at any time after their invocation: the search
may place them anywhere after their invocation or leave them out, which is exact.

The algorithm is Wing & Gong's ("Testing and verifying concurrent objects", 1993) with Lowe's
memoisation of (set of linearised operations, model state) ("Testing for linearizability",
2017), as Porcupine and Knossos do it, and P-compositionality (Horn & Kroening, 2015): a history
is linearizable iff each key's sub-history is, so every key is checked alone. When a key fails,
the smallest prefix of its history (cut at a completion) that cannot be linearized is found by
bisection (a prefix of a linearizable history is linearizable) and reported with the operation
whose completion breaks it, the operations concurrent with it and the longest partial
linearization the search found.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import defaultdict
from collections.abc import Hashable, Iterable, Sequence
from typing import Any, Final, Literal

import attrs

from .history import Event

__all__ = [
    "KeyFailure",
    "RegisterCheck",
    "RegisterOp",
    "RegisterState",
    "check_register",
    "ops_from_history",
    "random_history",
    "step",
]

OpKind = Literal["read", "write"]
#: ``ok``: the resource accepted it (a read's ``value`` is what it returned); ``refused``: the
#: resource refused the token (``last``: the token it said it had accepted, None if unknown);
#: ``unknown``: it may or may not have taken effect.
OpOutcome = Literal["ok", "refused", "unknown"]

_INF: Final = float("inf")


@attrs.frozen
class RegisterOp:
    """One access of one key of the resource.

    ``kind``: ``read`` or ``write``; ``token``: the fencing token presented (None: an unfenced
    access); ``owner``: which lease presented it (two grants with the same token are told apart
    by it, as the resource tells them apart by the owner's fingerprint; None: unknown);
    ``value``: what a write wrote, or what an ``ok`` read returned; ``outcome``; ``last``: for a
    refusal, the last accepted token the resource reported; ``invoked`` / ``completed``:
    monotonic seconds (``completed`` None: it never completed); ``line`` / ``end_line``: the
    history lines (1-based) of the invocation and the completion.
    """

    process: str
    kind: OpKind
    key: str
    token: int | None
    value: int | None
    outcome: OpOutcome
    invoked: float
    completed: float | None = None
    owner: Hashable | None = None
    last: int | None = None
    line: int = 0
    end_line: int | None = None

    @property
    def fenced(self) -> bool:
        """Whether the resource checks this access's token."""
        return self.token is not None

    @property
    def determinate(self) -> bool:
        """Its outcome is known: it must appear in a linearization."""
        return self.outcome != "unknown" and self.completed is not None

    def describe(self, origin: float = 0.0) -> str:
        """``w1's read (token 5) returned 3 [1.20 s .. 1.23 s]``, for messages."""
        token = f"token {self.token}" if self.token is not None else "unfenced"
        if self.outcome == "refused":
            what = "was refused" + (
                f" (last accepted {self.last})" if self.last is not None else ""
            )
        elif self.outcome == "unknown":
            what = "had an unknown outcome" + (
                f" (writing {self.value})" if self.kind == "write" else ""
            )
        elif self.kind == "read":
            what = f"returned {self.value}"
        else:
            what = f"wrote {self.value}"
        end = "never" if self.completed is None else f"{self.completed - origin:.3f} s"
        return (
            f"{self.process}'s {self.kind} ({token}) {what} "
            f"[{self.invoked - origin:.3f} s .. {end}]"
        )


@attrs.frozen
class RegisterState:
    """The model's state: ``value``, ``fence`` (the highest accepted token; None: none yet) and
    ``owner`` (who presented it)."""

    value: int | None
    fence: int | None = None
    owner: Hashable | None = None

    def describe(self) -> str:
        fence = "none" if self.fence is None else str(self.fence)
        return f"(value {self.value}, fence {fence})"


_State = tuple[int | None, int | None, Hashable | None]


def _accepts(state: _State, token: int | None, owner: Hashable | None) -> _State | None:
    """The fencing rule on a state tuple: the new (fence, owner) half, or None when refused."""
    _, fence, fence_owner = state
    if token is None:  # unfenced: always accepted, the fence unchanged
        return state
    if fence is None or token > fence:
        return (state[0], token, owner)
    if token < fence:
        return None
    if fence_owner is not None and owner is not None and fence_owner != owner:
        return None  # the same number from a different lease: a duplicate grant
    return (state[0], fence, fence_owner if fence_owner is not None else owner)


def _step(state: _State, op: RegisterOp) -> _State | None:
    """The state after ``op`` if its recorded outcome is possible from ``state``, else None."""
    accepted = _accepts(state, op.token, op.owner)
    if op.outcome == "refused":
        if accepted is not None:
            return None
        if op.last is not None and op.last != state[1]:
            return None
        return state
    if op.outcome == "ok":
        if accepted is None:
            return None
        if op.kind == "read":
            return accepted if op.value == state[0] else None
        return (op.value, accepted[1], accepted[2])
    # unknown: whatever the model does (accepted or refused), the result is unconstrained
    if accepted is None:
        return state
    return (op.value, accepted[1], accepted[2]) if op.kind == "write" else accepted


def step(state: RegisterState, op: RegisterOp) -> RegisterState | None:
    """The model: the state after ``op`` (applied atomically) when its recorded outcome is the
    one the model gives from ``state``, else None. An ``unknown`` op always steps."""
    after = _step((state.value, state.fence, state.owner), op)
    return None if after is None else RegisterState(*after)


@attrs.frozen
class KeyFailure:
    """A key whose history is not linearizable.

    ``culprit``: the operation whose completion ends the smallest non-linearizable prefix (every
    shorter prefix is linearizable); ``concurrent``: operations of the prefix overlapping it in
    time; ``partial``: the longest partial linearization of that prefix the search found, in
    order, and ``partial_state`` the register's state after it; ``prefix_ops``: how many
    operations the prefix holds.
    """

    key: str
    culprit: RegisterOp
    concurrent: tuple[RegisterOp, ...]
    partial: tuple[RegisterOp, ...]
    partial_state: RegisterState
    prefix_ops: int

    def explain(self, origin: float = 0.0) -> str:
        """The failure in words."""
        tail = self.partial[-4:]
        order = "; ".join(op.describe(origin) for op in tail) if tail else "nothing"
        message = (
            f"key {self.key!r}: no order of its first {self.prefix_ops} operation(s) explains "
            f"{self.culprit.describe(origin)}. The longest order the search found linearizes "
            f"{len(self.partial)} of them, ending with {order}, which leaves the register at "
            f"{self.partial_state.describe()}."
        )
        if self.concurrent:
            message += " Concurrent with it: " + "; ".join(
                op.describe(origin) for op in self.concurrent[:6]
            )
            message += (
                "." if len(self.concurrent) <= 6 else f" and {len(self.concurrent) - 6} more."
            )
        return message

    @property
    def lines(self) -> tuple[int, ...]:
        """History lines of the culprit, the concurrent operations and the partial order's last."""
        ops = [self.culprit, *self.concurrent[:6], *self.partial[-4:]]
        found = {line for op in ops for line in (op.line, op.end_line) if line}
        return tuple(sorted(found))


@attrs.frozen
class RegisterCheck:
    """The verdict over every key: ``keys`` checked, ``ops`` checked (per key counts in
    ``per_key``), ``failures`` (one per non-linearizable key, in key order)."""

    keys: int
    ops: int
    failures: tuple[KeyFailure, ...]
    per_key: dict[str, int]

    @property
    def valid(self) -> bool:
        return not self.failures


# --- the search -------------------------------------------------------------------------------


class _Search:
    """Wing & Gong's search with Lowe's cache over one key's operations (a doubly linked list
    of call and return entries, Porcupine's layout)."""

    def __init__(self, ops: Sequence[RegisterOp], initial: _State) -> None:
        self.ops = ops
        self.initial = initial
        entries: list[tuple[float, int, int]] = []
        for index, op in enumerate(ops):
            # Calls sort before returns at equal times: touching operations count as concurrent.
            entries.append((op.invoked, 0, index))
            ret = op.completed if op.determinate and op.completed is not None else _INF
            entries.append((ret, 1, index))
        entries.sort()
        n = len(entries)
        # Node 0 is the head sentinel; entry i is node i + 1.
        self.is_return = [False] + [kind == 1 for _, kind, _ in entries]
        self.op_of = [-1] + [index for _, _, index in entries]
        self.next = list(range(1, n + 2))
        self.next[n] = 0  # 0 past the end (the head is never a successor)
        self.prev = [0, *range(0, n)]
        self.partner = [0] * (n + 1)
        call_node = [0] * len(ops)
        for node in range(1, n + 1):
            if not self.is_return[node]:
                call_node[self.op_of[node]] = node
        for node in range(1, n + 1):
            if self.is_return[node]:
                partner = call_node[self.op_of[node]]
                self.partner[node] = partner
                self.partner[partner] = node
        self.best: list[int] = []
        self.best_state: _State = initial

    def _unlink(self, node: int) -> None:
        prev, nxt = self.prev[node], self.next[node]
        self.next[prev] = nxt
        if nxt:
            self.prev[nxt] = prev

    def _relink(self, node: int) -> None:
        prev, nxt = self.prev[node], self.next[node]
        self.next[prev] = node
        if nxt:
            self.prev[nxt] = node

    def run(self, *, track: bool = False) -> bool:
        """True iff the operations are linearizable. ``track``: remember the longest partial
        linearization (`best`, `best_state`)."""
        ops = self.ops
        remaining = sum(1 for op in ops if op.determinate)
        # Lowe's cache, keyed by the determinate operations linearized and the state; the value
        # lists the sets of unknown operations linearized on the way. An unknown operation is
        # optional, so a configuration that has linearized more of them than one already seen
        # (same key) can do nothing that one could not: it is pruned (dominance).
        # An unknown fenced operation whose token is below the fence can never take effect any
        # more (the fence only grows): whether it was linearized no longer matters, and it is
        # left out of the key, so the branches with and without it meet again.
        cache: dict[tuple[int, _State], list[int]] = {}
        unknown_mask = 0
        fenced_unknowns: list[tuple[int, int]] = []
        for index, op in enumerate(ops):
            if not op.determinate:
                unknown_mask |= 1 << index
                if op.token is not None:
                    fenced_unknowns.append((op.token, index))
        fenced_unknowns.sort()
        unknown_tokens = [token for token, _ in fenced_unknowns]
        dead_below = [0]
        for _, index in fenced_unknowns:
            dead_below.append(dead_below[-1] | (1 << index))
        stack: list[tuple[int, _State]] = []
        state = self.initial
        linearized = 0
        node = self.next[0]
        is_return, op_of, nxt = self.is_return, self.op_of, self.next
        while remaining:
            if node == 0:  # only unknown calls left after the last return: cannot happen
                return False
            index = op_of[node]
            op = ops[index]
            if not is_return[node]:
                after = _step(state, op)
                if after is not None and (op.determinate or after != state):
                    bits = linearized | (1 << index)
                    unknown_bits = bits & unknown_mask
                    if after[1] is not None and unknown_bits:
                        unknown_bits &= ~dead_below[bisect_left(unknown_tokens, after[1])]
                    seen = cache.setdefault((bits & ~unknown_mask, after), [])
                    if not any(earlier & ~unknown_bits == 0 for earlier in seen):
                        seen.append(unknown_bits)
                        stack.append((node, state))
                        state, linearized = after, bits
                        self._unlink(node)
                        self._unlink(self.partner[node])
                        if op.determinate:
                            remaining -= 1
                        if track and len(stack) > len(self.best):
                            self.best = [op_of[n] for n, _ in stack]
                            self.best_state = state
                        node = nxt[0]
                        continue
                node = nxt[node]
                continue
            # A return whose operation is not linearized yet: undo the last choice.
            if not stack:
                return False
            node, state = stack.pop()
            index = op_of[node]
            linearized &= ~(1 << index)
            self._relink(self.partner[node])
            self._relink(node)
            if ops[index].determinate:
                remaining += 1
            node = nxt[node]
        return True


def _prefix(ops: Sequence[RegisterOp], cut: float) -> list[RegisterOp]:
    """The history as seen at ``cut``: operations invoked by then, those completing later
    turned into unknowns (a read's value forgotten)."""
    out: list[RegisterOp] = []
    for op in ops:
        if op.invoked > cut:
            continue
        if op.completed is not None and op.completed > cut:
            op = attrs.evolve(
                op,
                outcome="unknown",
                completed=None,
                value=op.value if op.kind == "write" else None,
                last=None,
            )
        out.append(op)
    return out


def _linearizable(ops: Sequence[RegisterOp], initial: _State) -> bool:
    return _Search(ops, initial).run()


def _check_key(key: str, ops: Sequence[RegisterOp], initial: _State) -> KeyFailure | None:
    if _linearizable(ops, initial):
        return None
    cuts = sorted({op.completed for op in ops if op.determinate and op.completed is not None})
    # The smallest cut whose prefix fails: prefixes of a linearizable history are linearizable.
    low, high = 0, len(cuts) - 1
    while low < high:
        middle = (low + high) // 2
        if _linearizable(_prefix(ops, cuts[middle]), initial):
            low = middle + 1
        else:
            high = middle
    cut = cuts[low]
    prefix = _prefix(ops, cut)
    culprit = next(op for op in prefix if op.determinate and op.completed == cut)
    search = _Search(prefix, initial)
    search.run(track=True)
    concurrent = tuple(
        op
        for op in prefix
        if op is not culprit
        and op.invoked <= cut
        and (op.completed is None or op.completed >= culprit.invoked)
    )
    return KeyFailure(
        key,
        culprit,
        concurrent,
        tuple(prefix[i] for i in search.best),
        RegisterState(*search.best_state),
        len(prefix),
    )


def check_register(ops: Iterable[RegisterOp], *, initial: int | None = 0) -> RegisterCheck:
    """Check ``ops`` (any order, any keys) key by key; ``initial``: every key's value before the
    first write (what a read before any write must return).

    Returns a [`RegisterCheck`][fencedlease.lab.harness.linearizable.RegisterCheck]. The cost is
    that of Wing & Gong's search with Lowe's cache: linear in the operations of a key when few are
    concurrent, exponential only in the number of operations concurrent at one time.
    """
    by_key: dict[str, list[RegisterOp]] = defaultdict(list)
    for op in ops:
        by_key[op.key].append(op)
    failures: list[KeyFailure] = []
    start: _State = (initial, None, None)
    for key in sorted(by_key):
        key_ops = sorted(by_key[key], key=lambda op: op.invoked)
        failure = _check_key(key, key_ops, start)
        if failure is not None:
            failures.append(failure)
    return RegisterCheck(
        len(by_key),
        sum(len(v) for v in by_key.values()),
        tuple(failures),
        {key: len(value) for key, value in sorted(by_key.items())},
    )


# --- from a history ---------------------------------------------------------------------------

#: Modes of the workload -> (reads fenced, writes fenced).
MODE_FENCING: Final[dict[str, tuple[bool, bool]]] = {
    "fenced": (True, True),
    "write-fenced": (False, True),
    "unfenced": (False, False),
}


def ops_from_history(events: Sequence[Event]) -> tuple[list[RegisterOp], str | None]:
    """The register operations of a merged history, or the reason they cannot be had.

    Needs, per access: ``read`` / ``write`` invoke and completion events with ``key``, ``token``
    and ``grant`` (the owner is ``(process, grant)``); a write's ``value`` on its invocation; an
    ``ok`` read's ``value``; a refusal as ``fail`` with outcome ``stale`` and ``detail.last``;
    and the run's ``start`` ``detail.mode`` (which accesses the resource fences). The run's
    ``final`` read, when it names no key, is a plain read of the only key. A ``fail`` with any
    other outcome certainly did not happen and is left out; ``info`` or no completion is unknown.
    Returns ``(ops, None)`` or ``([], "history lacks ...")``.
    """
    mode: str | None = None
    final: tuple[Event, int] | None = None
    pending: dict[tuple[str, str, int], tuple[Event, int]] = {}
    ops: list[RegisterOp] = []
    for line, event in enumerate(events, 1):
        if event.process == "run":
            if event.op == "start":
                raw = event.detail.get("mode")
                mode = raw if isinstance(raw, str) else None
            elif event.op == "final" and event.type == "ok" and event.value is not None:
                final = (event, line)
            continue
        if event.op not in ("read", "write") or event.id is None:
            continue
        pending_key = (event.process, event.op, event.id)
        if event.type == "invoke":
            pending[pending_key] = (event, line)
            continue
        started = pending.pop(pending_key, None)
        if started is None:
            continue
        invoke, invoke_line = started
        if event.type == "fail" and event.outcome != "stale":
            continue
        ops.append(_op(invoke, invoke_line, event, line))
    for invoke, invoke_line in pending.values():
        ops.append(_op(invoke, invoke_line, None, None))
    if mode not in MODE_FENCING:
        return [], "history lacks the resource's mode (the run's start detail.mode)"
    if not ops:
        return [], "history lacks read/write accesses"
    if any(not op.key for op in ops):
        return [], "history lacks the key of some accesses"
    reads_fenced, writes_fenced = MODE_FENCING[mode]
    ops = [
        op
        if (reads_fenced if op.kind == "read" else writes_fenced)
        else attrs.evolve(op, token=None, owner=None, last=None)
        for op in ops
    ]
    keys = {op.key for op in ops}
    if final is not None and len(keys) == 1:
        event, line = final
        key = event.key if event.key is not None else next(iter(keys))
        ops.append(
            RegisterOp(
                "run", "read", key, None, event.value, "ok", event.mono, event.mono,
                line=line, end_line=line,
            )
        )  # fmt: skip
    return ops, None


def _op(invoke: Event, invoke_line: int, done: Event | None, done_line: int | None) -> RegisterOp:
    kind: OpKind = "read" if invoke.op == "read" else "write"
    outcome: OpOutcome
    value: Any
    last: int | None = None
    if done is None or done.type == "info":
        outcome, value = "unknown", invoke.value if kind == "write" else None
    elif done.type == "fail":
        outcome, value = "refused", invoke.value if kind == "write" else None
        raw_last = done.detail.get("last")
        last = raw_last if isinstance(raw_last, int) and not isinstance(raw_last, bool) else None
    else:
        outcome = "ok"
        value = invoke.value if kind == "write" else done.value
    token = invoke.token if invoke.token is not None else (done.token if done else None)
    return RegisterOp(
        invoke.process,
        kind,
        str(invoke.key) if invoke.key is not None else "",
        token,
        value,
        outcome,
        invoke.mono,
        None if done is None or outcome == "unknown" else done.mono,
        owner=(invoke.process, invoke.grant) if invoke.grant is not None else None,
        last=last,
        line=invoke_line,
        end_line=done_line,
    )


# --- generated histories (benchmarks, property tests) -----------------------------------------


def random_history(
    rng: Any,
    *,
    ops: int,
    keys: int = 1,
    processes: int = 4,
    unknown: float = 0.0,
    fenced_reads: bool = True,
) -> list[RegisterOp]:
    """A linearizable history made from the model: ``processes`` clients run lease cycles (a new
    grant on a random key, then 1 to 4 reads or writes with its token) with random, overlapping
    durations; each operation takes effect at a random instant within its interval and its
    outcome is what the model says there. With probability ``unknown`` an operation's outcome
    is forgotten (it took effect or not, at random). ``rng``: a `random.Random`.
    Tokens are granted per key in the order the cycles start, so a slow holder goes stale.
    """
    plans: list[tuple[float, float, float, str, int, OpKind, int]] = []
    # (invoked, completed, effect_at, process, cycle, kind, key index)
    cycle = 0
    per_process = max(1, ops // processes)
    for p in range(processes):
        now = rng.uniform(0.0, 2.0)
        made = 0
        while made < per_process and len(plans) < ops:
            cycle += 1
            key = rng.randrange(keys)
            for _ in range(rng.randint(1, 4)):
                start = now + rng.uniform(0.0, 0.5)
                end = start + rng.uniform(0.1, 3.0)
                kind: OpKind = "read" if rng.random() < 0.5 else "write"
                plans.append((start, end, rng.uniform(start, end), f"p{p}", cycle, kind, key))
                now = end
                made += 1
                if made >= per_process or len(plans) >= ops:
                    break
    # Tokens: each cycle's grant, per key, in the order the cycles began.
    first: dict[int, tuple[float, int]] = {}
    for start, _, _, _, cyc, _, key in plans:
        if cyc not in first or start < first[cyc][0]:
            first[cyc] = (start, key)
    counters: dict[int, int] = defaultdict(int)
    token_of: dict[int, int] = {}
    for cyc, (_, key) in sorted(first.items(), key=lambda item: item[1][0]):
        counters[key] += 1
        token_of[cyc] = counters[key]
    states: dict[int, _State] = defaultdict(lambda: (0, None, None))
    made_ops: list[RegisterOp] = []
    value = 0
    for start, end, _, process, cyc, kind, key in sorted(plans, key=lambda plan: plan[2]):
        token = token_of[cyc]
        owner = (process, cyc)
        state = states[key]
        accepted = _accepts(state, token if (fenced_reads or kind == "write") else None, owner)
        value += 1
        op = RegisterOp(
            process, kind, f"k{key}", token if (fenced_reads or kind == "write") else None,
            value if kind == "write" else None, "ok", start, end, owner=owner,
        )  # fmt: skip
        if accepted is None:
            op = attrs.evolve(op, outcome="refused", last=state[1])
        elif kind == "read":
            op = attrs.evolve(op, value=state[0])
        if rng.random() < unknown:
            took_effect = rng.random() < 0.5
            op = attrs.evolve(op, outcome="unknown", completed=None, last=None,
                              value=op.value if kind == "write" else None)  # fmt: skip
            if not took_effect:
                made_ops.append(op)
                continue
        if accepted is not None:
            states[key] = (op.value, accepted[1], accepted[2]) if kind == "write" else accepted
        made_ops.append(op)
    made_ops.sort(key=lambda op: op.invoked)
    return made_ops
