"""The correctness harness behind ``fencedlease check`` (Jepsen's shape; Kleppmann 2016's case).

- [`history`][fencedlease.lab.harness.history]: the JSON-lines history every process writes;
- [`workload`][fencedlease.lab.harness.workload]: worker processes doing a fenced read-modify-write;
- [`resources`][fencedlease.lab.harness.resources]: where the counter lives (SQLite, PostgreSQL,
Redis);
- [`nemesis`][fencedlease.lab.harness.nemesis]: the faults, recorded with their start and end;
- [`checker`][fencedlease.lab.harness.checker]: the pure checker of properties a-g;
- [`mutex`][fencedlease.lab.harness.mutex]: property f, the leases of one key never overlap;
- [`linearizable`][fencedlease.lab.harness.linearizable]: property g, the resource as a linearizable
  fenced register;
- [`report`][fencedlease.lab.harness.report]: the summary table, ``report.json`` and
``timeline.png``;
- [`environment`][fencedlease.lab.harness.environment]: the servers a run needs (Redis, resource,
proxies);
- [`safety`][fencedlease.lab.harness.safety]: the check writes and deletes only what it made;
- [`run`][fencedlease.lab.harness.run]: one run, end to end.

See ``docs/harness.md``.
"""

from __future__ import annotations

from .checker import CheckParams, CheckReport, check_history
from .history import Event, HistoryWriter, merge_histories, read_history
from .run import CheckConfig, CheckResult, run_check

__all__ = [
    "CheckConfig",
    "CheckParams",
    "CheckReport",
    "CheckResult",
    "Event",
    "HistoryWriter",
    "check_history",
    "merge_histories",
    "read_history",
    "run_check",
]
