"""Benchmark: the register model check (property g) on generated linearizable histories.

    python scripts/bench_checker.py                      # 10,000 and 50,000 operations, 32 keys
    python scripts/bench_checker.py --ops 200000 --keys 64 --processes 96 --budget-s 30

What it does: makes, for each ``--ops`` size, a linearizable history with
:func:`fencedlease.lab.harness.linearizable.random_history` (``--processes`` clients running lease
cycles on ``--keys`` keys with overlapping operations, ``--unknown`` of the outcomes forgotten,
about a third of the accesses refused as stale), checks it with
:func:`~fencedlease.lab.harness.linearizable.check_register` and prints the time taken (CPU
seconds of this process and wall seconds), the operations per CPU second, and whether the
history was found linearizable (it must be). Then it plants one stale read at the end and times
the check again: a failing key costs a bisection to its smallest failing prefix.

Exit status 1 if a generated history is judged non-linearizable, the planted one is not caught,
or a check took more than ``--budget-s`` CPU seconds.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Sequence

import attrs

from fencedlease.lab.harness.linearizable import RegisterOp, check_register, random_history


def _timed(ops: list[RegisterOp]) -> tuple[bool, float, float]:
    cpu, wall = time.process_time(), time.perf_counter()
    result = check_register(ops)
    return result.valid, time.process_time() - cpu, time.perf_counter() - wall


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--ops", type=int, nargs="+", default=[10_000, 50_000])
    parser.add_argument("--keys", type=int, default=32)
    parser.add_argument("--processes", type=int, default=48)
    parser.add_argument("--unknown", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--budget-s", type=float, default=10.0)
    args = parser.parse_args(argv)
    ok = True
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
