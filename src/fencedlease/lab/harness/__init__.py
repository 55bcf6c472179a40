"""The correctness harness behind ``fencedlease check`` (Jepsen's shape; Kleppmann 2016's case).

- :mod:`~fencedlease.lab.harness.history`: the JSON-lines history every process writes;
- :mod:`~fencedlease.lab.harness.workload`: worker processes doing a fenced read-modify-write;
- :mod:`~fencedlease.lab.harness.resources`: where the counter lives (SQLite, PostgreSQL, Redis);
- :mod:`~fencedlease.lab.harness.kinds`: the fault kinds, their needs and durations;
- :mod:`~fencedlease.lab.harness.nemesis`: the faults, recorded with their start and end;
- :mod:`~fencedlease.lab.harness.faults_clock`, ``faults_process``, ``faults_network``,
  ``faults_kernel``: the clock, kill-holder, one-way and kernel faults;
- :mod:`~fencedlease.lab.harness.schedule`: which faults, on whom, when, drawn from the seed;
- :mod:`~fencedlease.lab.harness.campaign`: replays of a report and campaigns of seeds;
- :mod:`~fencedlease.lab.harness.extract`: the history reassembled (grants, accesses, faults);
- :mod:`~fencedlease.lab.harness.checker`: the pure checker of properties a-g, key by key, each
  a module of :mod:`~fencedlease.lab.harness.properties` (its registry);
- :mod:`~fencedlease.lab.harness.mutex`: property f, the leases of one key never overlap;
- :mod:`~fencedlease.lab.harness.linearizable`: property g, the resource as a linearizable
  fenced register;
- :mod:`~fencedlease.lab.harness.report`: the summary table and ``report.json``;
- :mod:`~fencedlease.lab.harness.timeline`: ``timeline.png``, readable at many keys;
- :mod:`~fencedlease.lab.harness.synthetic`: healthy many-key histories for benchmarks and tests;
- :mod:`~fencedlease.lab.harness.environment`: the servers a run needs (Redis, resource, proxies);
- :mod:`~fencedlease.lab.harness.safety`: the check writes and deletes only what it made;
- :mod:`~fencedlease.lab.harness.run`: one run, end to end.

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
