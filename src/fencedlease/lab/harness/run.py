"""One run of the harness: servers, proxies, workers, the nemesis, the history, the verdict.

:func:`run_check` is what ``fencedlease check`` calls::

    from fencedlease.lab.harness.run import CheckConfig, run_check

    result = run_check(CheckConfig(duration_s=30, mode="fenced"))
    result.report.valid          # no violation
    result.history_path          # <out>/history.jsonl; also report.json and timeline.png

By default it starts its own redis-server (AOF on, ``appendfsync always``), so every nemesis is
available, including the Redis process ones. With ``redis_url`` it uses that server and leaves
its process alone: the ``redis-*`` faults are then skipped, and the report says so. Toxiproxy is
found by :func:`fencedlease.lab.servers.toxiproxy.toxiproxy_endpoint` (a real server when there is
one, else the embedded one); one proxy per worker.

Every process started here is stopped before :func:`run_check` returns or raises: workers get
SIGCONT, then the stop event, then SIGTERM, then SIGKILL, each bounded in time; servers are
closed by their context managers.
"""

from __future__ import annotations

import contextlib
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
from urllib.parse import urlsplit

import attrs

from fencedlease import redact_text, redact_url

from ..servers.redis import RedisServer, find_redis_binary, redis_endpoint
from .checker import CheckParams, check_history
from .history import HistoryWriter, merge_histories
from .model import CheckConfig, CheckResult
from .nemesis import (
    FaultSpec,
    Nemesis,
    NemesisEnv,
    fault_duration_s,
)
from .workload import (
    Board,
    ResourceSpec,
    WorkerConfig,
    prepare_resource,
    read_final_counter,
    worker_main,
)

__all__ = [
    "OUT_MARKER",
    "RESOURCE_MARKER",
    "CheckConfig",
    "CheckResult",
    "Progress",
    "UnsafeTargetError",
    "check_out_dir",
    "check_sqlite_resource",
    "run_check",
]

#: The file that marks a directory as made by ``fencedlease check``: only such a directory (or
#: an empty one, which then gets it) takes the run's files, and only the run's own file names
#: are ever replaced or removed in it.
OUT_MARKER = ".fencedlease-check"
#: The table (SQLite, PostgreSQL) and key suffix (Redis) that mark a resource the check made.
RESOURCE_MARKER = "fencedlease_check_marker"
_OUT_FILES = ("history.jsonl", "report.json", "timeline.png")
_SQLITE_SUFFIXES = ("", "-wal", "-shm", "-journal")


class UnsafeTargetError(ValueError):
    """``--out`` or ``--resource-url`` names something that holds data the check did not write:
    the check refuses rather than overwrite or delete it."""


def check_out_dir(out_dir: Path) -> None:
    """Refuse an ``out_dir`` that exists, is not empty and lacks :data:`OUT_MARKER`.

    Raises:
        UnsafeTargetError: so; nothing is written or removed.
    """
    if not out_dir.exists():
        return
    if not out_dir.is_dir():
        raise UnsafeTargetError(f"--out {out_dir} exists and is not a directory")
    if (out_dir / OUT_MARKER).is_file():
        return
    if any(out_dir.iterdir()):
        raise UnsafeTargetError(
            f"--out {out_dir} is a non-empty directory that fencedlease check did not create"
            f" (no {OUT_MARKER} in it); give a new or empty directory"
        )


def _claim_out_dir(out_dir: Path) -> None:
    check_out_dir(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / OUT_MARKER).write_text(
        "made by fencedlease check; it replaces history.jsonl, report.json, timeline.png,"
        " parts/ and resource.sqlite3 here\n",
        "utf-8",
    )


def check_sqlite_resource(path: str) -> bool:
    """Whether the SQLite file ``path`` is the check's own (it has the :data:`RESOURCE_MARKER`
    table; True) or absent or empty (False; it may be created). A file of any other content is
    refused.

    Raises:
        UnsafeTargetError: ``path`` holds data the check did not write (or is not SQLite).
    """
    if path == ":memory:" or not os.path.exists(path):
        return False
    if not os.path.isfile(path):
        raise UnsafeTargetError(f"the SQLite resource {path} exists and is not a file")
    if os.path.getsize(path) == 0:
        return False
    import sqlite3

    try:
        conn = sqlite3.connect(f"file:{Path(path).resolve().as_posix()}?mode=ro", uri=True)
        try:
            tables = {
                row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
            }
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise UnsafeTargetError(
            f"the SQLite resource {path} exists and is not a database the check made ({exc})"
        ) from None
    if RESOURCE_MARKER not in tables:
        raise UnsafeTargetError(
            f"the SQLite resource {path} is an existing database that fencedlease check did not"
            " create; the check would drop its tables, so it refuses: give a new path"
        )
    return True


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


def _upstream(url: str) -> tuple[str, int, str] | None:
    """``(host, port, db path)`` of a ``redis://`` URL, None for other schemes."""
    parts = urlsplit(url)
    if parts.scheme not in ("redis",) or parts.hostname is None:
        return None
    return parts.hostname, parts.port or 6379, parts.path or "/0"


def _proxied_url(url: str, listen: str) -> str:
    parts = urlsplit(url)
    auth = ""
    if parts.username or parts.password:
        auth = f"{parts.username or ''}:{parts.password or ''}@"
    return f"redis://{auth}{listen}{parts.path or '/0'}"


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


def run_check(
    config: CheckConfig, on_progress: Callable[[Progress], None] | None = None
) -> CheckResult:
    """Run the workload under the faults, then check the history and write the report files.

    ``on_progress`` is called about five times a second with a :class:`Progress`. Raises
    ``ValueError`` for a bad config, :class:`~fencedlease.lab.servers.redis.RedisUnavailable` when
    no Redis can be started; faults that cannot run are skipped and noted, not raised.
    """
    if config.workers < 2:
        raise ValueError("workers must be at least 2 (a lease needs someone to take it over)")
    if config.duration_s <= 0:
        raise ValueError("duration_s must be positive")
    seed = config.seed if config.seed is not None else secrets.randbelow(2**31)
    rng = random.Random(seed)
    out_dir = Path(config.out_dir)
    for url in (config.redis_url, config.resource_url if config.resource == "redis" else None):
        if url:
            _check_redis_url(url)
    if config.resource == "sqlite" and config.resource_url:
        check_sqlite_resource(config.resource_url)  # before anything is written
    _claim_out_dir(out_dir)
    parts_dir = out_dir / "parts"
    shutil.rmtree(parts_dir, ignore_errors=True)  # a marked directory: parts/ is the check's
    for name in _OUT_FILES:
        with contextlib.suppress(FileNotFoundError):
            (out_dir / name).unlink()
    parts_dir.mkdir()
    notes: list[str] = []
    secret_urls = [url for url in (config.redis_url, config.resource_url) if url]

    def scrub(text: str) -> str:
        """``text`` without the secrets of the URLs the run was given (notes, history)."""
        for url in secret_urls:
            text = redact_text(text, url)
        return text

    run_id = secrets.token_hex(4)
    prefix = f"fencedlease-check:{run_id}"
    names = [f"w{i}" for i in range(config.workers)]

    with ExitStack() as stack:
        # -- Redis for the leases
        server: RedisServer | None = None
        if config.redis_url:
            redis_url = config.redis_url
            redis_kind = "external"
            notes.append(
                "external Redis (--redis-url): the Redis process faults (redis-pause, "
                "redis-restart-aof, redis-restart-nopersist) are unavailable"
            )
        elif find_redis_binary() is not None:
            server = stack.enter_context(RedisServer(appendonly=True, appendfsync="always"))
            redis_url = server.url
            redis_kind = f"embedded redis-server {server.version()} (AOF, appendfsync always)"
        else:
            # No binary: the rest of the documented order (Docker through testcontainers).
            found = stack.enter_context(redis_endpoint(appendonly=True))
            redis_url, redis_kind = found.url, f"Redis in {found.kind}"
            notes.append(
                "no redis-server binary: Redis ran in Docker, so the Redis process faults are "
                "unavailable"
            )

        # -- the resource
        spec = _resource(config, out_dir, redis_url, stack, notes)
        _mark_resource(spec)
        prepare_resource(spec)

        # -- Toxiproxy, one proxy per worker
        worker_urls = [redis_url] * config.workers
        proxies: dict[int, Any] = {}
        toxiproxy_kind: str | None = None
        upstream = _upstream(redis_url)
        if config.toxiproxy and upstream is not None:
            try:
                from ..servers.toxiproxy import toxiproxy_endpoint

                endpoint = stack.enter_context(toxiproxy_endpoint())
                client = endpoint.client()
                for index, name in enumerate(names):
                    proxy = client.create(
                        upstream=f"{upstream[0]}:{upstream[1]}",
                        name=f"fencedlease-check-{run_id}-{name}",
                        listen="127.0.0.1:0",
                    )
                    stack.callback(_destroy, endpoint, proxy)
                    proxies[index] = proxy
                    worker_urls[index] = _proxied_url(redis_url, proxy.listen)
                toxiproxy_kind = f"{endpoint.kind} Toxiproxy at {endpoint.api_url}"
            except Exception as exc:  # no Toxiproxy: run without network faults, and say so
                notes.append(
                    f"Toxiproxy unavailable ({type(exc).__name__}: {exc}): no network faults"
                )
                worker_urls = [redis_url] * config.workers
                proxies = {}
        elif config.toxiproxy:
            notes.append("Redis URL is not redis://host:port: no Toxiproxy, no network faults")

        # -- processes
        ctx = multiprocessing.get_context("spawn")
        board = Board(ctx, config.workers)
        go, stop = ctx.Event(), ctx.Event()
        run_writer = stack.enter_context(HistoryWriter(parts_dir / "history-run.jsonl", "run"))
        nemesis_writer = stack.enter_context(
            HistoryWriter(parts_dir / "history-nemesis.jsonl", "nemesis")
        )
        schedule = [
            FaultSpec(kind, fault_duration_s(kind, config.ttl_ms, config.heartbeat))
            for kind in config.faults
        ]
        env = NemesisEnv(
            writer=nemesis_writer,
            board=board,
            worker_names=names,
            admin_url=redis_url,
            prefix=prefix,
            key=config.key,
            ttl_ms=config.ttl_ms,
            heartbeat_ms=config.heartbeat,
            body_ms=config.body,
            redis_server=server,
            proxies=proxies,
            extra_flush_urls=[spec.target] if spec.kind == "redis" else [],
            rng=random.Random(rng.random()),
        )
        nemesis = Nemesis(env, schedule, gap_s=config.ttl_ms / 1000)
        stack.callback(nemesis.close)
        wait_ms = 2 * config.ttl_ms + config.body
        join_s = (wait_ms + config.body + 2 * config.ttl_ms) / 1000 + 5.0
        with _processes(ctx, stop, join_s) as procs:
            for index, name in enumerate(names):
                worker = WorkerConfig(
                    index=index,
                    name=name,
                    redis_url=worker_urls[index],
                    prefix=prefix,
                    key=config.key,
                    mode=config.mode,
                    resource=spec,
                    history_path=str(parts_dir / f"history-{name}.jsonl"),
                    ttl_ms=config.ttl_ms,
                    heartbeat_ms=config.heartbeat,
                    body_ms=config.body,
                    wait_ms=wait_ms,
                    socket_timeout_ms=max(100, config.ttl_ms // 2),
                    duration_s=config.duration_s,
                    seed=rng.randrange(2**31),
                )
                proc = ctx.Process(
                    target=worker_main,
                    args=(worker, board, go, stop),
                    name=f"fencedlease-check-{name}",
                    daemon=True,
                )
                proc.start()
                procs.append(proc)
            _wait_ready(board, procs, timeout_s=60.0)
            run_writer.record(
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
                    "resource": spec.kind,
                    "faults": list(config.faults),
                    "seed": seed,
                    "redis": redis_kind,
                    "toxiproxy": toxiproxy_kind,
                    "key": config.key,
                    "prefix": prefix,
                },
            )
            t0 = time.monotonic()
            end = t0 + config.duration_s
            go.set()
            nemesis_stop = threading.Event()
            lead = config.lead_s if config.lead_s is not None else config.ttl_ms / 1000
            nemesis.start(t0, end, nemesis_stop, lead)
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
                            len(schedule),
                        )
                    )
                if now >= end or not any(p.is_alive() for p in procs):
                    break
                time.sleep(min(0.2, max(0.0, end - now)))
            run_writer.record("stop", "info")
            stop.set()
            nemesis_stop.set()
            nemesis.join(timeout_s=10.0)
        # every worker is stopped here
        for kind, reason in nemesis.skipped:
            message = f"fault {kind} skipped: {reason}"
            notes.append(message)
        if nemesis.error is not None:
            notes.append(
                f"the nemesis stopped with {type(nemesis.error).__name__}: {nemesis.error}"
            )
        notes[:] = [scrub(note) for note in notes]
        for note in notes:
            run_writer.record("note", "info", outcome="run-note", detail={"message": note})
        try:
            final = read_final_counter(spec)
            run_writer.record("final", "ok", value=final)
        except Exception as exc:
            run_writer.record("final", "fail", detail={"error": f"{type(exc).__name__}: {exc}"})
        run_writer.close()
        nemesis_writer.close()

    history_path = out_dir / "history.jsonl"
    parts = sorted(parts_dir.glob("history-*.jsonl"))
    events = merge_histories(parts, history_path, redact=scrub if secret_urls else None)
    shutil.rmtree(parts_dir, ignore_errors=True)
    report = check_history(events, CheckParams.from_history(events))
    from .report import draw_timeline, write_report_json

    report_path = out_dir / "report.json"
    timeline_path: Path | None = out_dir / "timeline.png"
    result = CheckResult(
        config, report, out_dir, history_path, report_path, timeline_path, tuple(notes), seed,
        redis_kind, toxiproxy_kind,
    )  # fmt: skip
    try:
        draw_timeline(events, report, out_dir / "timeline.png")
    except Exception as exc:  # the picture is a convenience; the verdict stands without it
        notes.append(scrub(f"timeline.png not drawn: {type(exc).__name__}: {exc}"))
        result = attrs.evolve(result, timeline_path=None, notes=tuple(notes))
    write_report_json(report_path, result)
    return result


def _destroy(endpoint: Any, proxy: Any) -> None:
    with contextlib.suppress(Exception):
        endpoint.client()
        proxy.destroy()


def _wait_ready(board: Board, procs: list[Any], timeout_s: float) -> None:
    give_up = time.monotonic() + timeout_s
    while not all(board.get(i, "pid") for i in range(board.workers)):
        dead = [p.name for p in procs if not p.is_alive()]
        if dead:
            raise RuntimeError(f"worker(s) {dead} exited before they were ready")
        if time.monotonic() > give_up:
            raise RuntimeError(f"workers not ready within {timeout_s} s")
        time.sleep(0.02)


def _resource(
    config: CheckConfig, out_dir: Path, redis_url: str, stack: ExitStack, notes: list[str]
) -> ResourceSpec:
    if config.resource == "sqlite":
        path = config.resource_url or str(out_dir / "resource.sqlite3")
        # Only a file of the check's own (marked) is removed; any other was refused above.
        if check_sqlite_resource(path):
            for suffix in _SQLITE_SUFFIXES:
                with contextlib.suppress(FileNotFoundError):
                    os.remove(path + suffix)
        return ResourceSpec("sqlite", path)
    if config.resource == "redis":
        if config.resource_url:
            return ResourceSpec("redis", config.resource_url)
        if config.redis_url:
            notes.append("the Redis resource shares the external Redis (another key)")
            return ResourceSpec("redis", redis_url)
        # A server of its own, with AOF: the nemeses restart the lease Redis, not the data's.
        data = stack.enter_context(RedisServer(appendonly=True, appendfsync="always"))
        return ResourceSpec("redis", data.url)
    if config.resource_url:
        return ResourceSpec("postgres", config.resource_url)
    from ..servers.postgres import postgres_dsn

    return ResourceSpec("postgres", stack.enter_context(postgres_dsn()))


def _check_redis_url(url: str) -> None:
    """A Redis URL the library takes (scheme, port, options), checked with no I/O before any
    process starts.

    Raises:
        ValidationError: (a ``ValueError``) naming what is wrong, the password shown as ``***``.
    """
    from fencedlease import LeaseManager, ValidationError

    if url.partition("://")[0].lower() not in ("redis", "rediss", "unix"):
        raise ValidationError(
            "redis_url", f"a Redis URL is redis://, rediss:// or unix://; got {redact_url(url)!r}"
        )
    LeaseManager.from_url(url, prefix="fencedlease-check").close()


def _mark_resource(spec: ResourceSpec) -> None:
    """Mark the resource as the check's before it is prepared (which drops and recreates the
    counter), refusing one that holds the counter or its fence without the mark: a table or key
    the check did not create is never dropped or deleted.

    Raises:
        UnsafeTargetError: so.
    """
    if spec.kind == "sqlite":
        import sqlite3

        conn = sqlite3.connect(spec.target)
        try:
            conn.execute(f"CREATE TABLE IF NOT EXISTS {RESOURCE_MARKER} (made_by TEXT)")
            conn.commit()
        finally:
            conn.close()
    elif spec.kind == "redis":
        _mark_redis_resource(spec)
    else:
        _mark_postgres_resource(spec)


def _mark_redis_resource(spec: ResourceSpec) -> None:
    import redis

    from fencedlease import RedisFencedResource

    with redis.Redis.from_url(spec.target, socket_timeout=5.0, socket_connect_timeout=5.0) as r:
        resource = RedisFencedResource(r, spec.name)
        marker = f"{resource.data_key}:{RESOURCE_MARKER}"
        if not r.exists(marker) and r.exists(resource.data_key, resource.fence_key):
            raise UnsafeTargetError(
                f"the Redis resource {redact_url(spec.target)} holds {resource.data_key!r} or"
                f" {resource.fence_key!r}, which fencedlease check did not create; the check"
                " would delete them, so it refuses"
            )
        r.set(marker, "made by fencedlease check")


def _mark_postgres_resource(spec: ResourceSpec) -> None:
    import psycopg

    from .workload import _TABLE

    with psycopg.connect(spec.target, autocommit=True, connect_timeout=5) as conn:
        row = conn.execute(
            "SELECT to_regclass(%s) IS NOT NULL, to_regclass(%s) IS NOT NULL",
            (_TABLE, RESOURCE_MARKER),
        ).fetchone()
        assert row is not None
        counter, marked = row
        if counter and not marked:
            raise UnsafeTargetError(
                f"the PostgreSQL resource {redact_url(spec.target)} has a table {_TABLE}"
                " that fencedlease check did not create; the check would drop it, so it refuses"
            )
        conn.execute(f"CREATE TABLE IF NOT EXISTS {RESOURCE_MARKER} (made_by TEXT)")
