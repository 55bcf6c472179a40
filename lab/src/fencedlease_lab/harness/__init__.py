"""The correctness harness behind ``fencedlease check`` (Jepsen's shape; Kleppmann 2016's case).

- [`history`][fencedlease_lab.harness.history]: the JSON-lines history every process writes;
- [`workload`][fencedlease_lab.harness.workload]: worker processes doing a fenced read-modify-write;
- [`resources`][fencedlease_lab.harness.resources]: where the counters live, one kind per fencing
  surface (guard rows, fenced rows, list-append transactions, Redis, in-process);
- [`elle`][fencedlease_lab.harness.elle]: property h, list-append transactions (Elle's checker);
- [`kinds`][fencedlease_lab.harness.kinds]: the fault kinds, their needs and durations;
- [`nemesis`][fencedlease_lab.harness.nemesis]: the faults, recorded with their start and end;
- [`faults_clock`][fencedlease_lab.harness.faults_clock], ``faults_process``, ``faults_network``
  and the lab's [`netns`][fencedlease_lab.servers.netns]: the clock, kill-holder, one-way and
  kernel faults;
- [`schedule`][fencedlease_lab.harness.schedule]: which faults, on whom, when, drawn from the seed;
- [`campaign`][fencedlease_lab.harness.campaign]: replays of a report and campaigns of seeds;
- [`extract`][fencedlease_lab.harness.extract]: the history reassembled (grants, accesses, faults);
- [`checker`][fencedlease_lab.harness.checker]: the pure checker of properties a-h, key by key, each
  a module of [`properties`][fencedlease_lab.harness.properties] (its registry);
- [`mutex`][fencedlease_lab.harness.mutex]: property f, the leases of one key never overlap;
- [`linearizable`][fencedlease_lab.harness.linearizable]: property g, the resource as a linearizable
  fenced register;
- [`report`][fencedlease_lab.harness.report]: the summary table and ``report.json``;
- [`timeline`][fencedlease_lab.harness.timeline]: ``timeline.png``, readable at many keys;
- [`synthetic`][fencedlease_lab.harness.synthetic]: healthy many-key histories for benchmarks and
tests;
- [`environment`][fencedlease_lab.harness.environment]: the servers a run needs (Redis, resource,
proxies);
- [`safety`][fencedlease_lab.harness.safety]: the check writes and deletes only what it made;
- [`run`][fencedlease_lab.harness.run]: one run, end to end.

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
