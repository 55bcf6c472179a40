"""What a nemesis acts on ([`NemesisEnv`][fencedlease_lab.harness.nemesis.env.NemesisEnv]), what
each fault action is given ([`FaultSpec`][fencedlease_lab.harness.nemesis.env.FaultSpec]), and which
kinds an environment cannot run."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import attrs

from ...servers.netns import Link, kernel_unavailable_reason
from ...servers.redis import RedisServer
from ..faults_clock import WallClock
from ..history import HistoryWriter
from ..kinds import FAULTS, Fencing
from ..workload import Board

if TYPE_CHECKING:
    from ..topology import Deployment


@attrs.frozen
class FaultSpec:
    """What a ``_do_<kind>`` method is given: ``kind`` (a key of
    [`FAULTS`][fencedlease_lab.harness.kinds.FAULTS]) lasting ``duration_s``; ``index``, its place
    in the schedule (it names the fault's toxics)."""

    kind: str
    duration_s: float
    index: int = 0


@attrs.define
class NemesisEnv:
    """What the nemesis acts on. ``admin_url``: the lease Redis, reached directly (no proxy).
    ``redis_server``: ours, when we started it (None for ``--redis-url``). ``proxies``: worker
    index -> toxiproxy-python ``Proxy`` (empty without Toxiproxy); ``resource_proxies``: the
    workers' proxies to the networked resource servers (empty: none). ``extra_flush_urls``:
    other Redis servers whose scripts ``script-flush`` also flushes (a Redis resource the check
    started, or any when server faults are allowed). ``client_prefix``: the start of every
    client name of the run's workers (its random id is in it). ``alive``: whether worker
    ``index``'s process still runs (a victim may have died). ``keys``: the lease keys of the run
    (``key`` alone when empty); a worker's board ``key`` is an index into them.
    ``history_paths``: each worker's history file; ``restart_worker(index)``: start a fresh
    worker process at ``index`` once the old one is dead (None: the run cannot); ``run_id``: the
    run's random id (hex), in the name of the nftables tables of the kernel faults;
    ``kernel_links``: each worker's namespace link (empty when the workers have none),
    ``kernel_reason``: why they have none. ``deployment``: the Sentinel deployment or Redis
    Cluster the check started (``--topology``), for the topology faults; None on one server.
    ``fencing``: the workers' fencing mode, which a lease the nemesis holds itself
    (``slow-handoff``) uses too, so that the token it hands on is one the workers' would be.
    ``wall_clock``: the workers' wall clock, which the ``clock`` fault moves (None: libfaketime
    is not installed)."""

    writer: HistoryWriter
    board: Board
    worker_names: list[str]
    admin_url: str
    prefix: str
    key: str
    ttl_ms: int
    heartbeat_ms: int
    body_ms: int
    redis_server: RedisServer | None = None
    proxies: dict[int, Any] = attrs.field(factory=dict)
    resource_proxies: list[Any] = attrs.field(factory=list)
    extra_flush_urls: list[str] = attrs.field(factory=list)
    client_prefix: str = "fencedlease-check"
    rng: random.Random = attrs.field(factory=random.Random)
    alive: Callable[[int], bool] = attrs.field(default=lambda worker: True)
    keys: tuple[str, ...] = ()
    history_paths: list[str] = attrs.field(factory=list)
    restart_worker: Callable[[int], None] | None = None
    run_id: str = "0"
    kernel_links: list[Link] = attrs.field(factory=list)
    kernel_reason: str | None = None
    deployment: Deployment | None = None
    fencing: Fencing = "counter"
    wall_clock: WallClock | None = None

    @property
    def lease_keys(self) -> tuple[str, ...]:
        """The run's lease keys: ``keys``, else ``key``."""
        return self.keys or (self.key,)

    def held_key(self, worker: int) -> str:
        """The key worker ``worker`` shows on the board as held (or last held)."""
        keys = self.lease_keys
        index = self.board.get(worker, "key")
        return keys[index] if 0 <= index < len(keys) else keys[0]


def unavailable_reason(kind: str, env: NemesisEnv) -> str | None:
    """Why ``kind`` cannot run in ``env``, or None when it can."""
    needs = FAULTS[kind].needs
    if needs == "proxy" and not env.proxies:
        return "needs Toxiproxy (none could be found or started)"
    if needs == "resource-proxy" and not env.resource_proxies:
        return "needs a Redis or PostgreSQL resource behind Toxiproxy"
    if needs == "redis-process" and env.redis_server is None:
        return "needs a redis-server started by the harness (not available with --redis-url)"
    if needs == "restart" and (env.restart_worker is None or not env.history_paths):
        return "needs a run that can restart a worker process"
    if needs in ("sentinel", "cluster", "replicas"):
        kind_now = None if env.deployment is None else env.deployment.kind
        if kind_now is None or (needs != "replicas" and kind_now != needs):
            return f"needs --topology {'sentinel or cluster' if needs == 'replicas' else needs}"
    if needs == "faketime" and env.wall_clock is None:
        return "needs libfaketime (Debian's libfaketime package) to move the workers' wall clock"
    if needs == "kernel" and not env.kernel_links:
        return env.kernel_reason or kernel_unavailable_reason() or "the workers have no links"
    return None
