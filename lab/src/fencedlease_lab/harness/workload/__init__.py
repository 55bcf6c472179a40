"""The workload: N worker processes doing a fenced read-modify-write of one counter under a lease.

Each worker loops: pick a key (from its own random source, seeded from the run's seed and the
worker's index), take the lease on it with [`LeaseManager.hold`][fencedlease.LeaseManager.hold]
(renewed in the background; for a share of the cycles waiting for it, through the fair hand-off
queue), read the counter, sleep ``body_ms`` inside the critical section, write the value read plus
one, leave the ``with`` block. Every step is an invoke/completion pair in the worker's own history
file ([`fencedlease_lab.harness.history`][]). What the library told the worker about its leases (the
grant and its confirmed deadline, every renewal's outcome, the release going out, the loss
notice) comes from the manager's ``on_event`` hook
([`Recorder`][fencedlease_lab.harness.recorder.Recorder]): that is what the lock-level check
([`mutex`][fencedlease_lab.harness.mutex]) judges.

The body deliberately does not call ``lease.check()`` before writing: a check proves nothing about
the instant of the write, because a pause (GC, SIGSTOP, a swapped-out VM) can fall between the two
(Kleppmann, "How to do distributed locking", 2016). The workload models exactly that worst case,
so only the resource's fencing stands between a stale holder and the data.

Modes (what the resource checks):

- ``fenced``: the read and the write are fenced (the read moves the fence, so a stale holder
  cannot write under what a newer holder read);
- ``write-fenced``: only the write is fenced; the read is plain (the lost update of
  ``docs/harness.md``: a stale write lands between the new holder's read and its write);
- ``unfenced``: leases only; the resource checks nothing.

The counter lives in one of the resources of [`fencedlease_lab.harness.resources`][] (SQLite,
PostgreSQL or Redis), each opened by the worker for itself.

Workers are started with the ``spawn`` context, so everything handed to them is picklable:
[`WorkerConfig`][fencedlease_lab.harness.workload.WorkerConfig], the shared
[`Board`][fencedlease_lab.harness.workload.Board] arrays and a stop event.

The parts, by role: [`config`][fencedlease_lab.harness.workload.config] (what a worker is told,
and its seeded choices), [`board`][fencedlease_lab.harness.workload.board] (what it publishes),
[`cycle`][fencedlease_lab.harness.workload.cycle] (one lease cycle's bookkeeping, shared with the
asyncio worker of [`aio_worker`][fencedlease_lab.harness.aio_worker]) and
[`sync_worker`][fencedlease_lab.harness.workload.sync_worker] (the ``sync`` and ``threads``
workers).
"""

from __future__ import annotations

from .board import ACQUIRING, BODY, HOLDING, IDLE, PHASES, RELEASING, WRITING, Board
from .config import (
    MODES,
    THREADS,
    WORKER_KINDS,
    Mode,
    WorkerConfig,
    WorkerKind,
    client_name,
    lane_rng,
    pick,
    unshunned,
)
from .cycle import Cycle, access, end_cycle
from .lane import LANE_OP, LaneTally, lane_record
from .sync_worker import connect_notes, open_lane_store, run_sync_worker

__all__ = [
    "ACQUIRING",
    "BODY",
    "HOLDING",
    "IDLE",
    "LANE_OP",
    "MODES",
    "PHASES",
    "RELEASING",
    "THREADS",
    "WORKER_KINDS",
    "WRITING",
    "Board",
    "Cycle",
    "LaneTally",
    "Mode",
    "WorkerConfig",
    "WorkerKind",
    "access",
    "client_name",
    "connect_notes",
    "end_cycle",
    "lane_record",
    "lane_rng",
    "open_lane_store",
    "pick",
    "run_sync_worker",
    "unshunned",
]
