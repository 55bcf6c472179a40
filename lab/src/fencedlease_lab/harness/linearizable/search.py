"""The search: Wing & Gong's, with Lowe's memoisation, one key at a time (P-compositionality),
and the smallest failing prefix of a key found by bisection.

Pure: no I/O, no clock."""

from __future__ import annotations

from bisect import bisect_left
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Final

import attrs

from .model import RegisterOp, RegisterState, _State, _step

#: The return time of an operation that never completed: it may be placed after everything.
_INF: Final = float("inf")


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

    Returns a [`RegisterCheck`][fencedlease_lab.harness.linearizable.RegisterCheck]. The cost is
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
