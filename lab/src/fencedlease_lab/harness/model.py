"""The types a run of the harness is described by and produces:
[`CheckConfig`][fencedlease_lab.harness.CheckConfig] (what to run) and
[`CheckResult`][fencedlease_lab.harness.CheckResult] (what it made).
[`run`][fencedlease_lab.harness.run] makes them, [`report`][fencedlease_lab.harness.report] reads
them; both import them from here."""

from __future__ import annotations

from pathlib import Path

import attrs

from .checker import CheckReport, Extracted, extract
from .history import read_history
from .kinds import Fencing, Topology
from .nemesis import DEFAULT_FAULTS
from .resources import ResourceKind
from .schedule import Schedule
from .workload import Mode, WorkerKind

__all__ = ["CheckConfig", "CheckResult"]


@attrs.frozen
class CheckConfig:
    """What to run. Durations: ``duration_s`` in seconds; the rest in milliseconds.

    ``redis_url``: an external Redis (None: start one). ``workers``: processes (>= 2).
    ``faults``: fault kinds in order (see [`fencedlease_lab.harness.nemesis.FAULTS`][]).
    ``mode``: ``fenced``, ``write-fenced`` or ``unfenced``. ``seed``: for every random choice
    (None: a random seed, printed in the report). ``out_dir``: where ``history.jsonl``,
    ``report.json`` and ``timeline.png`` go. ``resource``: a kind of
    [`RESOURCES`][fencedlease_lab.harness.resources.RESOURCES] (default ``mixed``: the keys dealt
    to several kinds in turn, every key of a kind on it); ``resource_url`` overrides where it
    lives (else an SQLite file in ``out_dir``, a second redis-server of ours, a PostgreSQL of
    ours; the memory kinds always run in a resource process of the run's own; not for
    ``mixed``). ``ttl_ms``,
    ``heartbeat_ms`` (default ttl/4), ``body_ms`` (sleep in the critical section; default
    1.8 x ttl, see ``docs/harness.md`` for why), ``margin_ms`` (recovery bound beyond ttl).
    ``toxiproxy``: False connects workers straight to Redis (no network faults).
    ``allow_server_faults``: run the faults that act on the whole Redis server
    (``script-flush``, the ``redis-*`` ones; see
    [`fencedlease_lab.harness.nemesis.SERVER_WIDE`][]) on a ``redis_url`` too; without it they
    run only on a Redis the check started and are left out of the schedule otherwise.
    ``faults`` are scheduled at random from ``seed``
    ([`draw_schedule`][fencedlease_lab.harness.schedule.draw_schedule]); ``schedule`` replaces that
    draw with a recorded one (a replay: it must be for as many workers). ``lead_s``: seconds before
    the first fault (default: one ttl). ``workers_kind``: run every worker one way (``sync``,
    ``threads``, ``asyncio``; see [`worker_main`][fencedlease_lab.harness.workers.worker_main]);
    None: each worker's way is drawn from the seed. ``wait_share``: the share of acquires that wait
    (the rest fail fast). ``keys``: how many independent lease keys (and counters) the workers pick
    from. ``stale_share``: the share of each lane's cycles that are stale writers' (a lease not
    renewed, its write made after it ran out:
    [`stale`][fencedlease_lab.harness.workload.stale]; none on a ``*-append`` resource).
    """

    redis_url: str | None = None
    workers: int = 3
    duration_s: float = 55.0
    faults: tuple[str, ...] = DEFAULT_FAULTS
    mode: Mode = "fenced"
    seed: int | None = None
    out_dir: Path = Path("check-out")
    resource: ResourceKind = "mixed"
    resource_url: str | None = None
    ttl_ms: int = 1000
    heartbeat_ms: int | None = None
    body_ms: int | None = None
    margin_ms: int = 1000
    key: str = "check:counter"
    toxiproxy: bool = True
    lead_s: float | None = None
    allow_server_faults: bool = False
    schedule: Schedule | None = None
    workers_kind: WorkerKind | None = None
    wait_share: float = 0.5
    keys: int = 1
    topology: Topology = "standalone"
    replica_acks: int = 0
    fencing: Fencing = "counter"
    stale_share: float = 0.5

    @property
    def lease_keys(self) -> tuple[str, ...]:
        """The lease keys the workers pick from: ``key``, then ``<key>:1`` ... ``<key>:<n-1>``
        for ``keys`` = n (each with a counter of its own in the resource)."""
        return (self.key, *(f"{self.key}:{i}" for i in range(1, self.keys)))

    @property
    def heartbeat(self) -> int:
        return self.heartbeat_ms if self.heartbeat_ms is not None else max(1, self.ttl_ms // 4)

    @property
    def body(self) -> int:
        return self.body_ms if self.body_ms is not None else self.ttl_ms * 9 // 5


@attrs.frozen
class CheckResult:
    """What a run produced: the checker's ``report``, the files, run-level ``notes``, the
    ``seed`` used, where Redis and Toxiproxy came from, the faults ``left_out`` of the schedule
    (server-wide ones on a Redis the check did not start) and, in ``inconclusive``, why the run
    proved nothing (no grant, no access accepted, no fault injected though some were asked
    for); empty when it proved something. ``schedule``: the faults planned (what
    ``report.json`` records for a replay)."""

    config: CheckConfig
    report: CheckReport
    out_dir: Path
    history_path: Path
    report_path: Path
    timeline_path: Path | None
    notes: tuple[str, ...]
    seed: int
    redis: str
    toxiproxy: str | None
    left_out: tuple[str, ...] = ()
    inconclusive: tuple[str, ...] = ()
    schedule: Schedule | None = None

    @property
    def valid(self) -> bool:
        """No violation."""
        return self.report.valid

    @property
    def passed(self) -> bool:
        """No violation, and the run proved something (``inconclusive`` is empty)."""
        return self.report.valid and not self.inconclusive

    @property
    def exit_code(self) -> int:
        """``fencedlease check``'s exit status for this run: 1 with violations, else 2 when it
        proved nothing, else 0."""
        if not self.report.valid:
            return 1
        return 2 if self.inconclusive else 0

    def history(self) -> Extracted:
        """The run's history reassembled: grants, accesses, faults (reads the file)."""
        return extract(read_history(self.history_path))
