"""What a worker is told
([`WorkerConfig`][fencedlease_lab.harness.workload.WorkerConfig]: picklable, for ``spawn``)
and how it draws its choices from its seed: the key and the wait of each cycle."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Final, Literal

import attrs

from ..kinds import Fencing
from ..resources import ResourceSpec

Mode = Literal["fenced", "write-fenced", "unfenced"]
WorkerKind = Literal["sync", "threads", "asyncio"]

#: How a worker may run (see :func:`~fencedlease_lab.harness.workers.worker_main`).
WORKER_KINDS: Final[tuple[WorkerKind, ...]] = ("sync", "threads", "asyncio")
#: The lanes (threads or tasks) of a ``threads`` or ``asyncio`` worker.
THREADS: Final = 3

MODES: Final[tuple[Mode, ...]] = ("fenced", "write-fenced", "unfenced")


@attrs.frozen
class WorkerConfig:
    """What one worker needs (picklable, for ``spawn``).

    ``redis_url``: the Redis the leases live in, as this worker reaches it (through its own
    Toxiproxy proxy when there is one). Times in milliseconds: ``ttl_ms`` (lease TTL),
    ``heartbeat_ms`` (renewal interval), ``body_ms`` (sleep inside the critical section),
    ``wait_ms`` (how long an acquire waits), ``socket_timeout_ms`` (every Redis command).
    ``duration_s``: seconds, counted from the ``go`` signal, after which no new cycle starts;
    ``max_cycles`` bounds the loop in count too (per lane). ``keys``: the lease keys a cycle
    picks from; ``wait_share``: the share of acquires that wait ``wait_ms`` (the others fail
    fast); ``kind``: how the worker runs
    ([`WORKER_KINDS`][fencedlease_lab.harness.workload.WORKER_KINDS], see
    [`worker_main`][fencedlease_lab.harness.workers.worker_main]). ``netns``: the network
    namespace the worker enters before anything else (its link for the kernel faults), None: the
    host's. ``replica_acks``, ``fencing``: the manager's options of those names; ``redis_url``
    may be ``redis+sentinel://`` or ``redis+cluster://`` (see
    [`lease_client`][fencedlease_lab.harness.topology.lease_client]). ``stale_share``: the share
    of cycles that are stale writers' ([`stale`][fencedlease_lab.harness.workload.stale]).
    """

    index: int
    name: str
    redis_url: str
    prefix: str
    keys: tuple[str, ...]
    mode: Mode
    resource: ResourceSpec
    history_path: str
    ttl_ms: int
    heartbeat_ms: int
    body_ms: int
    wait_ms: int
    socket_timeout_ms: int
    duration_s: float
    seed: int
    max_cycles: int = 10_000
    kind: WorkerKind = "sync"
    wait_share: float = 0.5
    netns: str | None = None
    replica_acks: int = 0
    fencing: Fencing = "counter"
    stale_share: float = 0.0


def client_name(prefix: str, worker_name: str) -> str:
    """The Redis ``CLIENT SETNAME`` of a worker's connections (how ``CLIENT KILL`` finds them):
    the run's key ``prefix`` (which holds its random id) and the worker's name, so that a
    ``client-kill`` never hits a connection of another run or another application."""
    return f"{prefix}:{worker_name}"


def lane_rng(config: WorkerConfig, lane: int) -> random.Random:
    """The random source of one lane (thread or task) of a worker: from the run's seed, the
    worker's index and the lane, so one seed gives the same choices."""
    return random.Random(f"{config.seed}:{config.index}:{lane}")


def pick(config: WorkerConfig, rng: random.Random) -> tuple[str, int]:
    """One cycle's choices: the key (uniform over ``config.keys``) and the acquire's wait
    (``config.wait_ms`` for a ``wait_share`` of the cycles, else 0: fail fast)."""
    key = rng.choice(config.keys)
    wait_ms = config.wait_ms if rng.random() < config.wait_share else 0
    return key, wait_ms


def unshunned(keys: Sequence[str], key: str, shun: int) -> str:
    """``key``, or the key after it in ``keys`` when it is the one the board's ``shun`` (1 + its
    index; 0: none) names."""
    if 0 < shun <= len(keys) and key == keys[shun - 1]:
        return keys[shun % len(keys)]
    return key
