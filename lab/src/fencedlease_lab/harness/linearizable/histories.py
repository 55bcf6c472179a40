"""Register operations from a merged history of the run, and random histories for the
benchmarks and the property tests.

Pure: no I/O (the random source is the caller's)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any, Final

import attrs

from ..history import Event
from .model import OpKind, OpOutcome, RegisterOp, _accepts, _State

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
