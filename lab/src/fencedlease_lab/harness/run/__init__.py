"""One run of the harness: servers, proxies, workers, the nemesis, the history, the verdict.

[`run_check`][fencedlease_lab.harness.run_check] is what ``fencedlease check`` calls:

```
from fencedlease_lab.harness.run import CheckConfig, run_check

result = run_check(CheckConfig(duration_s=30, mode="fenced"))
result.report.valid          # no violation
result.history_path          # <out>/history.jsonl; also report.json and timeline.png
```

By default it starts its own redis-server (AOF on, ``appendfsync always``), so every nemesis is
available, including the Redis process ones. With ``redis_url`` it uses that server, acts only
on what the run made there (its keys under its random prefix, deleted when the run ends; its
workers' connections) and leaves out the faults that act on the whole server
([`SERVER_WIDE`][fencedlease_lab.harness.nemesis.SERVER_WIDE]) unless ``allow_server_faults``; the
report says so. A run that proved nothing (no grant, no accepted access, no fault injected
though some were asked for) lists why in ``CheckResult.inconclusive``. Toxiproxy is
found by [`fencedlease_lab.servers.toxiproxy.toxiproxy_endpoint`][] (a real server when there is
one, else the embedded one); one proxy per worker.

Every process started here is stopped before [`run_check`][fencedlease_lab.harness.run_check]
returns or raises: workers get SIGCONT, then the stop event, then SIGTERM, then SIGKILL, each
bounded in time; servers are closed by their context managers.

The steps, a module each: [`prepare`][fencedlease_lab.harness.run.prepare] (the config and the
targets checked, the output directory claimed), [`faults`][fencedlease_lab.harness.run.faults]
(the schedule and the nemesis), [`processes`][fencedlease_lab.harness.run.processes] (the worker
processes), [`session`][fencedlease_lab.harness.run.session] (the run while they work) and
[`verdict`][fencedlease_lab.harness.run.verdict] (the history checked, the report written).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack

import attrs

from ...servers.netns import worker_links
from ..environment import start_proxies, start_redis, start_resource
from ..model import CheckConfig, CheckResult
from ..resource_links import resource_timeout_ms
from ..safety import (
    OUT_MARKER,
    RESOURCE_MARKER,
    UnsafeTargetError,
    check_out_dir,
    check_sqlite_resource,
)
from .prepare import _begin
from .session import Progress, _run_workers
from .verdict import _collect_and_check, _write_report, inconclusive_reasons

__all__ = [
    "OUT_MARKER",
    "RESOURCE_MARKER",
    "CheckConfig",
    "CheckResult",
    "Progress",
    "UnsafeTargetError",
    "check_out_dir",
    "check_sqlite_resource",
    "inconclusive_reasons",
    "run_check",
]


def run_check(
    config: CheckConfig, on_progress: Callable[[Progress], None] | None = None
) -> CheckResult:
    """Run the workload under the faults, then check the history and write the report files.

    ``on_progress`` is called about five times a second with a
    [`Progress`][fencedlease_lab.harness.run.Progress]. Raises ``ValueError`` for a bad config,
    [`RedisUnavailable`][fencedlease_lab.servers.redis.RedisUnavailable] when no Redis can be
    started; faults that cannot run are skipped and noted, not raised.
    """
    run = _begin(config)
    with ExitStack() as stack:
        lease_redis = start_redis(config, stack, run.notes, run.prefix)
        spec = start_resource(config, run.out_dir, lease_redis.url, stack, run.notes)
        # A replay's kinds are its schedule's (the faults it records may have been replaced).
        kinds = config.faults if config.schedule is None else config.schedule.kinds
        links, run.kernel_reason = worker_links(
            kinds, config.workers, run.run_id,
            resource=config.resource, toxiproxy=config.toxiproxy,
        )  # fmt: skip
        if links is not None:
            stack.callback(links.close)
        hosts = None if links is None else [link.host_ip for link in links.links]
        network = start_proxies(
            config, run.names, run.run_id, lease_redis.url, stack, run.notes, hosts,
            # Only a run that faults the resource's links pays for proxying them.
            resource=spec if "resource-link" in kinds else None,
            resource_timeout_ms=resource_timeout_ms(config.ttl_ms),
        )  # fmt: skip
        if links is not None and len(network.proxies) == config.workers:
            network = attrs.evolve(network, netns=tuple(link.netns for link in links.links))
            run.kernel_links = list(links.links)
        _run_workers(run, stack, lease_redis, spec, network, on_progress)
    events, report = _collect_and_check(run)
    return _write_report(run, events, report, lease_redis.kind, network.kind)
