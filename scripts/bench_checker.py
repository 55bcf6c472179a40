"""Benchmark: the whole checker on synthetic many-key runs, and the register model check
(property g) alone on generated linearizable histories.

    python scripts/bench_checker.py                      # 10,000 and 50,000 operations, 32 keys
    python scripts/bench_checker.py --ops 200000 --keys 64 --processes 96 --budget-s 30

The whole checker: for each ``--ops`` size, a healthy run of ``--workers`` workers over ``--keys``
keys (:func:`fencedlease_lab.harness.synthetic.synthetic_history`, a fault every 3 s) is checked
with :func:`~fencedlease_lab.harness.checker.check_history` (every property, a to g); it must
pass. Then a stale write is planted (token 1 of ``k00`` accepted after everything) and it must be
caught. Each line prints the events, CPU and wall seconds.

The register check alone:
What it does: makes, for each ``--ops`` size, a linearizable history with
:func:`fencedlease_lab.harness.linearizable.random_history` (``--processes`` clients running lease
cycles on ``--keys`` keys with overlapping operations, ``--unknown`` of the outcomes forgotten,
about a third of the accesses refused as stale), checks it with
:func:`~fencedlease_lab.harness.linearizable.check_register` and prints the time taken (CPU
seconds of this process and wall seconds), the operations per CPU second, and whether the
history was found linearizable (it must be). Then it plants one stale read at the end and times
the check again: a failing key costs a bisection to its smallest failing prefix.

Exit status 1 if a generated history is judged non-linearizable (or a healthy run failing), a
planted fault is not caught, or a check took more than ``--budget-s`` CPU seconds.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Sequence
from typing import Any

import attrs

from fencedlease_lab.harness.checker import check_history
from fencedlease_lab.harness.history import Event
from fencedlease_lab.harness.linearizable import RegisterOp, check_register, random_history
from fencedlease_lab.harness.synthetic import synthetic_history


def _timed(ops: list[RegisterOp]) -> tuple[bool, float, float]:
    cpu, wall = time.process_time(), time.perf_counter()
    result = check_register(ops)
    return result.valid, time.process_time() - cpu, time.perf_counter() - wall


def _whole(events: list[Event]) -> tuple[int, float, float]:
    cpu, wall = time.process_time(), time.perf_counter()
    report = check_history(events)
    return len(report.violations), time.process_time() - cpu, time.perf_counter() - wall


def _planted(events: list[Event]) -> list[Event]:
    """``events`` with w0's write of ``k00`` with token 1 accepted after the run's end."""
    end = max(e.mono for e in events if e.process != "run")
    fields: dict[str, Any] = {"grant": 0, "key": "k00", "token": 1, "value": 1}
    return sorted(
        [
            *events,
            Event("w0", "write", "invoke", end + 0.1, 1e9, id=10**6, **fields),
            Event("w0", "write", "ok", end + 0.2, 1e9, id=10**6, outcome="accepted", **fields),
        ],
        key=lambda e: e.mono,
    )


def bench_whole(sizes: Sequence[int], keys: int, workers: int, seed: int, budget_s: float) -> bool:
    """Time the whole checker on a healthy synthetic run and on one with a planted stale write;
    False if the healthy one fails, the planted one passes, or a check overruns ``budget_s``."""
    ok = True
    print(f"{'ops':>8} {'events':>8} {'keys':>5} {'cpu s':>7} {'wall s':>7}  whole checker")
    for size in sizes:
        span = size / 220  # about the run's length in seconds: a fault every 3 s
        faults = [
            ("latency" if i % 2 else "redis-pause", 3.0 * i, 3.0 * i + 0.5,
             f"w{i % workers}" if i % 2 else None)
            for i in range(1, int(span / 3))
        ]  # fmt: skip
        events = synthetic_history(ops=size, keys=keys, workers=workers, seed=seed, faults=faults)
        for label, history, want in (
            ("healthy", events, False),
            ("planted", _planted(events), True),
        ):
            found, cpu, wall = _whole(history)
            verdict = f"{found} violation(s)" + (" (wrong)" if bool(found) != want else "")
            print(
                f"{size:>8} {len(history):>8} {keys:>5} {cpu:>7.3f} {wall:>7.3f}  {label}: "
                f"{verdict}"
            )
            ok = ok and bool(found) == want and cpu <= budget_s
    return ok


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--ops", type=int, nargs="+", default=[10_000, 50_000])
    parser.add_argument("--keys", type=int, default=32)
    parser.add_argument("--processes", type=int, default=48)
    parser.add_argument("--unknown", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--budget-s", type=float, default=10.0)
    args = parser.parse_args(argv)
    ok = bench_whole(args.ops, args.keys, args.workers, args.seed, args.budget_s)
    print()
    print(
        f"{'ops':>8} {'keys':>5} {'refused':>8} {'unknown':>8} {'cpu s':>7} {'wall s':>7} "
        f"{'ops/cpu s':>10}  verdict"
    )
    for size in args.ops:
        ops = random_history(
            random.Random(args.seed), ops=size, keys=args.keys, processes=args.processes,
            unknown=args.unknown,
        )  # fmt: skip
        refused = sum(1 for op in ops if op.outcome == "refused")
        unknown = sum(1 for op in ops if op.outcome == "unknown")
        valid, cpu, wall = _timed(ops)
        verdict = "linearizable" if valid else "NOT LINEARIZABLE (wrong)"
        print(
            f"{len(ops):>8} {args.keys:>5} {refused:>8} {unknown:>8} {cpu:>7.3f} {wall:>7.3f} "
            f"{len(ops) / max(cpu, 1e-9):>10.0f}  {verdict}"
        )
        ok = ok and valid and cpu <= args.budget_s
        # A stale read planted after everything: the last write of k0 overwritten, then read.
        end = max(op.completed or op.invoked for op in ops)
        token = max((op.token or 0 for op in ops if op.key == "k0"), default=0) + 1
        first = RegisterOp("x", "write", "k0", token, -1, "ok", end + 1, end + 2, owner="x")
        planted = [
            first,
            attrs.evolve(first, value=-2, invoked=end + 3, completed=end + 4),
            RegisterOp("x", "read", "k0", token, -1, "ok", end + 5, end + 6, owner="x"),
        ]
        caught, cpu, wall = _timed(ops + planted)
        verdict = "stale read caught" if not caught else "stale read MISSED"
        print(
            f"{len(ops) + 3:>8} {args.keys:>5} {refused:>8} {unknown:>8} {cpu:>7.3f} "
            f"{wall:>7.3f} {(len(ops) + 3) / max(cpu, 1e-9):>10.0f}  {verdict}"
        )
        ok = ok and not caught and cpu <= args.budget_s
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
