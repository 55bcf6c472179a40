"""One run of the harness: servers, proxies, workers, the nemesis, the history, the verdict.

[`run_check`][fencedlease.lab.harness.run_check] is what ``fencedlease check`` calls:

```
from fencedlease.lab.harness.run import CheckConfig, run_check

result = run_check(CheckConfig(duration_s=30, mode="fenced"))
result.report.valid          # no violation
result.history_path          # <out>/history.jsonl; also report.json and timeline.png
```

By default it starts its own redis-server (AOF on, ``appendfsync always``), so every nemesis is
available, including the Redis process ones. With ``redis_url`` it uses that server, acts only
on what the run made there (its keys under its random prefix, deleted when the run ends; its
workers' connections) and leaves out the faults that act on the whole server
([`SERVER_WIDE`][fencedlease.lab.harness.nemesis.SERVER_WIDE]) unless ``allow_server_faults``; the
report says so. A run that proved nothing (no grant, no accepted access, no fault injected
though some were asked for) lists why in ``CheckResult.inconclusive``. Toxiproxy is
found by [`fencedlease.lab.servers.toxiproxy.toxiproxy_endpoint`][] (a real server when there is
one, else the embedded one); one proxy per worker.

Every process started here is stopped before [`run_check`][fencedlease.lab.harness.run_check]
returns or raises: workers get SIGCONT, then the stop event, then SIGTERM, then SIGKILL, each
bounded in time; servers are closed by their context managers.
"""

from __future__ import annotations

import contextlib
import functools
import multiprocessing
import os
import random
import secrets
import shutil
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import attrs

from fencedlease import redact_text, redact_url

from .checker import CheckParams, CheckReport, check_history
from .environment import (
    LeaseRedis,
    Network,
    check_redis_url,
    start_proxies,
    start_redis,
    start_resource,
)
from .faults_kernel import Link, worker_links
from .history import Event, HistoryWriter, merge_histories
from .kinds import off_topology
from .model import CheckConfig, CheckResult
from .nemesis import Nemesis, NemesisEnv, left_out_faults
from .resources import ResourceSpec, read_final_counter, read_final_counters
from .safety import (
    OUT_MARKER,
    RESOURCE_MARKER,
    UnsafeTargetError,
    check_out_dir,
    check_sqlite_resource,
    claim_out_dir,
)
from .schedule import Schedule, draw_schedule, worker_seed
from .topology import check_topology
from .workers import worker_main
from .workload import WORKER_KINDS, Board, WorkerConfig, WorkerKind

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


@attrs.frozen
class Progress:
    """A snapshot for a live display: seconds ``elapsed`` of ``duration``, each worker's board
    fields, the fault in force (or None), and the faults done so far."""

    elapsed_s: float
    duration_s: float
    workers: list[dict[str, int]]
    current_fault: str | None
    faults_done: list[str]
    faults_planned: int


def run_check(
    config: CheckConfig, on_progress: Callable[[Progress], None] | None = None
) -> CheckResult:
    """Run the workload under the faults, then check the history and write the report files.

    ``on_progress`` is called about five times a second with a
    [`Progress`][fencedlease.lab.harness.run.Progress]. Raises ``ValueError`` for a bad config,
    [`RedisUnavailable`][fencedlease.lab.servers.redis.RedisUnavailable] when no Redis can be
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
            config, run.names, run.run_id, lease_redis.url, stack, run.notes, hosts
        )
        if links is not None and len(network.proxies) == config.workers:
            network = attrs.evolve(network, netns=tuple(link.netns for link in links.links))
            run.kernel_links = list(links.links)
        _run_workers(run, stack, lease_redis, spec, network, on_progress)
    events, report = _collect_and_check(run)
    return _write_report(run, events, report, lease_redis.kind, network.kind)


@attrs.define
class _Run:
    """One run's settings, its seed, where its files go, and the notes it gathers."""

    config: CheckConfig
    seed: int
    out_dir: Path
    parts_dir: Path
    secret_urls: list[str]
    run_id: str = attrs.field(factory=lambda: secrets.token_hex(4))
    notes: list[str] = attrs.field(factory=list)
    left_out: list[str] = attrs.field(factory=list)
    schedule: Schedule | None = None
    kernel_links: list[Link] = attrs.field(factory=list)
    kernel_reason: str | None = None

    @property
    def prefix(self) -> str:
        return f"fencedlease-check:{self.run_id}"

    @property
    def names(self) -> list[str]:
        return [f"w{i}" for i in range(self.config.workers)]

    @property
    def worker_kinds(self) -> list[WorkerKind]:
        """How each worker runs: the config's ``workers_kind``, else dealt from the seed: the
        kinds in turn (so that every kind runs when there are workers enough), in a seeded
        order of the workers (the same seed gives the same kinds)."""
        forced = self.config.workers_kind
        if forced is not None:
            return [forced] * self.config.workers
        count = self.config.workers
        kinds = [WORKER_KINDS[i % len(WORKER_KINDS)] for i in range(count)]
        random.Random(f"{self.seed}:kinds").shuffle(kinds)
        return kinds

    def scrub(self, text: str) -> str:
        """``text`` without the secrets of the URLs the run was given (notes, history)."""
        for url in self.secret_urls:
            text = redact_text(text, url)
        return text


def _begin(config: CheckConfig) -> _Run:
    """Check the config and the targets (no I/O but the SQLite check), then claim ``out_dir``.

    Raises:
        ValueError: a bad config;
            [`UnsafeTargetError`][fencedlease.lab.harness.run.UnsafeTargetError] (a ``ValueError``)
            for a target holding data the check did not write, before anything is written.
    """
    if config.workers < 2:
        raise ValueError("workers must be at least 2 (a lease needs someone to take it over)")
    if config.duration_s <= 0:
        raise ValueError("duration_s must be positive")
    if config.resource.startswith("memory") and config.resource_url:
        raise ValueError(
            f"--resource {config.resource} runs in a process of the run's own:"
            " --resource-url does not apply to it"
        )
    check_topology(
        config.topology,
        redis_url=config.redis_url,
        replica_acks=config.replica_acks,
        fencing=config.fencing,
    )
    if config.resource == "mixed" and config.resource_url:
        raise ValueError(
            "--resource mixed runs each kind where the check puts it: --resource-url needs"
            " one kind (--resource sqlite, redis, ...)"
        )
    seed = config.seed if config.seed is not None else secrets.randbelow(2**31)
    if config.schedule is not None and config.schedule.workers != config.workers:
        raise ValueError(
            f"the schedule is for {config.schedule.workers} workers, the run has {config.workers}"
        )
    out_dir = Path(config.out_dir)
    redis_resource = config.resource.startswith("redis")
    for url in (config.redis_url, config.resource_url if redis_resource else None):
        if url:
            check_redis_url(url)
    if config.resource.startswith("sqlite") and config.resource_url:
        check_sqlite_resource(config.resource_url)  # before anything is written
    parts_dir = claim_out_dir(out_dir)
    secret_urls = [url for url in (config.redis_url, config.resource_url) if url]
    return _Run(config, seed, out_dir, parts_dir, secret_urls)


def _run_workers(
    run: _Run,
    stack: ExitStack,
    lease_redis: LeaseRedis,
    spec: ResourceSpec,
    network: Network,
    on_progress: Callable[[Progress], None] | None,
) -> None:
    """Start the workers, run the nemesis schedule while they work, stop them all, and record
    the notes and the final counter in the run's history part."""
    config = run.config
    ctx = multiprocessing.get_context("spawn")
    board = Board(ctx, config.workers)
    go, stop = ctx.Event(), ctx.Event()
    run_writer = stack.enter_context(HistoryWriter(run.parts_dir / "history-run.jsonl", "run"))
    nemesis_writer = stack.enter_context(
        HistoryWriter(run.parts_dir / "history-nemesis.jsonl", "nemesis")
    )
    nemesis = _make_nemesis(run, stack, board, nemesis_writer, lease_redis, spec, network)
    wait_ms = 2 * config.ttl_ms + config.body
    join_s = (wait_ms + config.body + 2 * config.ttl_ms) / 1000 + 5.0
    with _processes(ctx, stop, join_s) as procs:
        nemesis.env.alive = lambda worker: worker < len(procs) and procs[worker].is_alive()
        _start_workers(run, ctx, board, go, stop, procs, spec, network, wait_ms)
        nemesis.env.restart_worker = functools.partial(
            _restart_worker,
            procs,
            stop,
            functools.partial(
                _start_workers, run, ctx, board, go, stop, procs, spec, network, wait_ms
            ),
        )
        _wait_ready(board, procs, timeout_s=60.0)
        _record_start(run, run_writer, spec, lease_redis, network)
        _run_schedule(run, board, procs, nemesis, go, stop, run_writer, on_progress)
    # every worker is stopped here
    _record_outcome(run, nemesis, spec, run_writer)
    run_writer.close()
    nemesis_writer.close()


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
        extra_flush_urls=redis_parts if flush_resource else [],
        client_prefix=run.prefix,
        rng=random.Random(f"nemesis:{run.seed}"),
        history_paths=[str(run.parts_dir / f"history-{name}.jsonl") for name in run.names],
        run_id=run.run_id,
        kernel_links=list(run.kernel_links),
        kernel_reason=run.kernel_reason,
        deployment=lease_redis.deployment,
        fencing=config.fencing,
    )
    nemesis = Nemesis(env, schedule)
    stack.callback(nemesis.close)
    return nemesis


def _start_workers(
    run: _Run,
    ctx: Any,
    board: Board,
    go: Any,
    stop: Any,
    procs: list[Any],
    spec: ResourceSpec,
    network: Network,
    wait_ms: int,
    only: int | None = None,
) -> None:
    """Start one process per worker (each joins ``procs`` as soon as it runs); with ``only``,
    that worker's alone, in place of its dead process (``kill-holder``)."""
    config = run.config
    for index, name in enumerate(run.names):
        if only is not None and index != only:
            continue
        worker = WorkerConfig(
            index=index,
            name=name,
            redis_url=network.worker_urls[index],
            prefix=run.prefix,
            keys=config.lease_keys,
            mode=config.mode,
            resource=spec,
            history_path=str(run.parts_dir / f"history-{name}.jsonl"),
            ttl_ms=config.ttl_ms,
            heartbeat_ms=config.heartbeat,
            body_ms=config.body,
            wait_ms=wait_ms,
            socket_timeout_ms=max(100, config.ttl_ms // 2),
            duration_s=config.duration_s,
            seed=worker_seed(run.seed, index),
            kind=run.worker_kinds[index],
            wait_share=config.wait_share,
            netns=network.netns[index] if network.netns else None,
            replica_acks=config.replica_acks,
            fencing=config.fencing,
        )
        proc = ctx.Process(
            target=worker_main,
            args=(worker, board, go, stop),
            name=f"fencedlease-check-{name}",
            daemon=True,
        )
        proc.start()
        if only is None:
            procs.append(proc)
        else:
            procs[only] = proc


def _restart_worker(procs: list[Any], stop: Any, start: Callable[..., None], index: int) -> None:
    """Start a fresh process for worker ``index`` (``start(only=index)``) once its dead one is
    reaped, unless the run is stopping; it continues the worker's history file."""
    procs[index].join(5.0)
    if not stop.is_set():
        start(only=index)


def _record_start(
    run: _Run,
    writer: HistoryWriter,
    spec: ResourceSpec,
    lease_redis: LeaseRedis,
    network: Network,
) -> None:
    config = run.config
    writer.record(
        "start",
        "info",
        detail={
            "ttl_ms": config.ttl_ms,
            "heartbeat_ms": config.heartbeat,
            "margin_ms": config.margin_ms,
            "body_ms": config.body,
            "duration_s": config.duration_s,
            "mode": config.mode,
            "workers": config.workers,
            "worker_kinds": list(run.worker_kinds),
            "resource": spec.kind,
            "faults": list(config.faults),
            "seed": run.seed,
            "redis": lease_redis.kind,
            "toxiproxy": network.kind,
            "key": config.key,
            "keys": list(config.lease_keys),
            "prefix": run.prefix,
            "topology": config.topology,
            "replica_acks": config.replica_acks,
            "fencing": config.fencing,
        },
    )


def _run_schedule(
    run: _Run,
    board: Board,
    procs: list[Any],
    nemesis: Nemesis,
    go: Any,
    stop: Any,
    writer: HistoryWriter,
    on_progress: Callable[[Progress], None] | None,
) -> None:
    """Let the workers go and run the nemesis schedule for ``duration_s`` (or until every worker
    has exited), reporting progress; then stop the workers and the nemesis."""
    config = run.config
    t0 = time.monotonic()
    end = t0 + config.duration_s
    go.set()
    nemesis_stop = threading.Event()
    nemesis.start(t0, end, nemesis_stop)
    while True:
        now = time.monotonic()
        if on_progress is not None:
            on_progress(
                Progress(
                    now - t0,
                    config.duration_s,
                    board.snapshot(),
                    nemesis.current,
                    list(nemesis.done),
                    len(nemesis.schedule.faults),
                )
            )
        if now >= end or not any(p.is_alive() for p in procs):
            break
        time.sleep(min(0.2, max(0.0, end - now)))
    writer.record("stop", "info")
    stop.set()
    nemesis_stop.set()
    nemesis.join(timeout_s=10.0)


def _record_outcome(run: _Run, nemesis: Nemesis, spec: ResourceSpec, writer: HistoryWriter) -> None:
    """The skipped faults and other notes (secrets scrubbed), and the counter's final value."""
    for kind, reason in nemesis.skipped:
        run.notes.append(f"fault {kind} skipped: {reason}")
    if nemesis.error is not None:
        run.notes.append(
            f"the nemesis stopped with {type(nemesis.error).__name__}: {nemesis.error}"
        )
    run.notes[:] = [run.scrub(note) for note in run.notes]
    for note in run.notes:
        writer.record("note", "info", outcome="run-note", detail={"message": note})
    try:
        if len(spec.keys) > 1:
            for key, value in read_final_counters(spec).items():
                writer.record("final", "ok", key=key, value=value)
        else:
            writer.record("final", "ok", value=read_final_counter(spec))
    except Exception as exc:
        writer.record("final", "fail", detail={"error": f"{type(exc).__name__}: {exc}"})


def _collect_and_check(run: _Run) -> tuple[list[Event], CheckReport]:
    """Merge the processes' history parts into ``history.jsonl`` (secrets scrubbed) and check it."""
    history_path = run.out_dir / "history.jsonl"
    parts = sorted(run.parts_dir.glob("history-*.jsonl"))
    redact = run.scrub if run.secret_urls else None
    events = merge_histories(parts, history_path, redact=redact)
    shutil.rmtree(run.parts_dir, ignore_errors=True)
    return events, check_history(events, CheckParams.from_history(events))


def _write_report(
    run: _Run,
    events: list[Event],
    report: CheckReport,
    redis_kind: str,
    toxiproxy_kind: str | None,
) -> CheckResult:
    """Draw ``timeline.png`` (a note if it cannot be drawn) and write ``report.json``."""
    from .report import draw_timeline, write_report_json

    out_dir = run.out_dir
    report_path = out_dir / "report.json"
    timeline_path: Path | None = out_dir / "timeline.png"
    result = CheckResult(
        run.config, report, out_dir, out_dir / "history.jsonl", report_path, timeline_path,
        tuple(run.notes), run.seed, redis_kind, toxiproxy_kind, tuple(run.left_out),
        tuple(inconclusive_reasons(report, run.config.faults, run.left_out)), run.schedule,
    )  # fmt: skip
    try:
        draw_timeline(events, report, out_dir / "timeline.png")
    except Exception as exc:  # the picture is a convenience; the verdict stands without it
        run.notes.append(run.scrub(f"timeline.png not drawn: {type(exc).__name__}: {exc}"))
        result = attrs.evolve(result, timeline_path=None, notes=tuple(run.notes))
    write_report_json(report_path, result)
    return result


def inconclusive_reasons(
    report: CheckReport, faults: tuple[str, ...] | list[str], left_out: list[str]
) -> list[str]:
    """Why a run proved nothing, from its ``report`` and the ``faults`` asked for (of which
    ``left_out`` were not scheduled); empty when it proved something. A run proves nothing when
    no lease was granted, when the resource accepted no access (no fencing was exercised), or
    when faults were asked for and none was injected (no fault completed)."""
    reasons: list[str] = []
    stats = report.stats
    if stats["grants"] == 0:
        reasons.append(
            "no lease was granted: the workers could not use Redis (unreachable, a wrong"
            " password, a user without the needed commands?); see history.jsonl"
        )
    elif stats["accepted_accesses"] == 0:
        reasons.append("the resource accepted no access: nothing was written under a lease")
    if faults and stats["faults_injected"] == 0:
        why = f" ({', '.join(left_out)} left out)" if left_out else ""
        reasons.append(f"no fault was injected though faults were asked for{why}")
    return reasons


# --- helpers ----------------------------------------------------------------------------------


@contextlib.contextmanager
def _processes(ctx: Any, stop: Any, join_s: float) -> Iterator[list[Any]]:
    """A list to put started processes in; all of them are stopped when the block ends."""
    procs: list[Any] = []
    try:
        yield procs
    finally:
        stop.set()
        for proc in procs:
            if proc.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGCONT)
        give_up = time.monotonic() + join_s
        for proc in procs:
            proc.join(max(0.1, give_up - time.monotonic()))
        for proc in procs:
            if proc.is_alive():
                proc.terminate()
                proc.join(3.0)
            if proc.is_alive():
                proc.kill()
                proc.join(3.0)


def _wait_ready(board: Board, procs: list[Any], timeout_s: float) -> None:
    give_up = time.monotonic() + timeout_s
    while not all(board.get(i, "pid") for i in range(board.workers)):
        dead = [p.name for p in procs if not p.is_alive()]
        if dead:
            raise RuntimeError(f"worker(s) {dead} exited before they were ready")
        if time.monotonic() > give_up:
            raise RuntimeError(f"workers not ready within {timeout_s} s")
        time.sleep(0.02)
