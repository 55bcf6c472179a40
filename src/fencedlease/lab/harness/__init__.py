"""The correctness harness behind ``fencedlease check`` (Jepsen's shape; Kleppmann 2016's case).

- [`history`][fencedlease.lab.harness.history]: the JSON-lines history every process writes;
- [`workload`][fencedlease.lab.harness.workload]: worker processes doing a fenced read-modify-write;
- [`resources`][fencedlease.lab.harness.resources]: where the counters live, one kind per fencing
  surface (guard rows, fenced rows, list-append transactions, Redis, in-process);
- [`elle`][fencedlease.lab.harness.elle]: property h, list-append transactions (Elle's checker);
- [`kinds`][fencedlease.lab.harness.kinds]: the fault kinds, their needs and durations;
- [`nemesis`][fencedlease.lab.harness.nemesis]: the faults, recorded with their start and end;
- [`faults_clock`][fencedlease.lab.harness.faults_clock], ``faults_process``, ``faults_network``,
  ``faults_kernel``: the clock, kill-holder, one-way and kernel faults;
- [`schedule`][fencedlease.lab.harness.schedule]: which faults, on whom, when, drawn from the seed;
- [`campaign`][fencedlease.lab.harness.campaign]: replays of a report and campaigns of seeds;
- [`extract`][fencedlease.lab.harness.extract]: the history reassembled (grants, accesses, faults);
- [`checker`][fencedlease.lab.harness.checker]: the pure checker of properties a-h, key by key, each
  a module of [`properties`][fencedlease.lab.harness.properties] (its registry);
- [`mutex`][fencedlease.lab.harness.mutex]: property f, the leases of one key never overlap;
- [`linearizable`][fencedlease.lab.harness.linearizable]: property g, the resource as a linearizable
  fenced register;
- [`report`][fencedlease.lab.harness.report]: the summary table and ``report.json``;
- [`timeline`][fencedlease.lab.harness.timeline]: ``timeline.png``, readable at many keys;
- [`synthetic`][fencedlease.lab.harness.synthetic]: healthy many-key histories for benchmarks and
tests;
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
