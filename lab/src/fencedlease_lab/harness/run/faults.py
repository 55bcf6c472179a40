"""The run's nemesis: the faults left out (not the check's own server, not on the topology),
the schedule drawn from the seed (or replayed), and what the nemesis acts on."""

from __future__ import annotations

import random
from contextlib import ExitStack

import attrs

from fencedlease import redact_url

from ..environment import LeaseRedis, Network
from ..history import HistoryWriter
from ..kinds import off_topology
from ..nemesis import Nemesis, NemesisEnv, left_out_faults
from ..resources import ResourceSpec
from ..schedule import draw_schedule
from ..workload import Board
from .prepare import _Run


def _make_nemesis(
    run: _Run,
    stack: ExitStack,
    board: Board,
    writer: HistoryWriter,
    lease_redis: LeaseRedis,
    spec: ResourceSpec,
    network: Network,
) -> Nemesis:
    config = run.config
    run.left_out = left_out_faults(
        config.faults, own_server=lease_redis.own, allow=config.allow_server_faults
    )
    off = off_topology(config.faults if config.schedule is None else config.schedule.kinds,
                       config.topology)  # fmt: skip
    if off:
        run.notes.append(f"left out: {', '.join(off)} (not on the {config.topology} topology)")
    if run.left_out:
        run.notes.append(
            f"left out: {', '.join(run.left_out)} (the Redis at {redact_url(lease_redis.url)} is"
            " not the check's own; --allow-server-faults runs them anyway)"
        )
    run.left_out += [kind for kind in off if kind not in run.left_out]
    schedule = config.schedule or draw_schedule(
        [kind for kind in config.faults if kind not in off],
        seed=run.seed,
        workers=config.workers,
        ttl_ms=config.ttl_ms,
        heartbeat_ms=config.heartbeat,
        body_ms=config.body,
        lead_ms=round(
            1000 * (config.lead_s if config.lead_s is not None else config.ttl_ms / 1000)
        ),
        worker_kinds=run.worker_kinds,
    )
    run.schedule = schedule
    schedule = attrs.evolve(
        schedule, faults=tuple(f for f in schedule.faults if f.kind not in run.left_out)
    )
    # SCRIPT FLUSH reaches the resource's Redis only when the check started it (or is allowed).
    own_resource = not (config.resource_url or config.redis_url)
    redis_parts = [part.target for part in spec.parts or (spec,) if part.kind == "redis"]
    flush_resource = own_resource or config.allow_server_faults
    env = NemesisEnv(
        writer=writer,
        board=board,
        worker_names=run.names,
        admin_url=lease_redis.admin_url,
        prefix=run.prefix,
        key=config.key,
        keys=config.lease_keys,
        ttl_ms=config.ttl_ms,
        heartbeat_ms=config.heartbeat,
        body_ms=config.body,
        redis_server=lease_redis.server,
        proxies=network.proxies,
        resource_proxies=network.resource_proxies,
        extra_flush_urls=redis_parts if flush_resource else [],
        client_prefix=run.prefix,
        rng=random.Random(f"nemesis:{run.seed}"),
        history_paths=[str(run.parts_dir / f"history-{name}.jsonl") for name in run.names],
        run_id=run.run_id,
        kernel_links=list(run.kernel_links),
        kernel_reason=run.kernel_reason,
        deployment=lease_redis.deployment,
        fencing=config.fencing,
        wall_clock=run.wall_clock,
    )
    nemesis = Nemesis(env, schedule)
    stack.callback(nemesis.close)
    return nemesis
