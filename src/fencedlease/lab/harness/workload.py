"""The workload: N worker processes doing a fenced read-modify-write of one counter under a lease.

Each worker loops: take the lease on the shared key with
[`LeaseManager.hold`][fencedlease.LeaseManager.hold] (renewed in the background), read the counter,
sleep ``body_ms`` inside the critical section, write the value read plus one, leave the ``with``
block. Every step is an invoke/completion pair in the worker's own history file
([`fencedlease.lab.harness.history`][]). A watcher thread records the moment the library declares
the lease lost (``lease-lost``), which is how the checker times loss notices.

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

The counter lives in one of the resources of [`fencedlease.lab.harness.resources`][] (SQLite,
PostgreSQL or Redis), each opened by the worker for itself.

Workers are started with the ``spawn`` context, so everything handed to them is picklable:
[`WorkerConfig`][fencedlease.lab.harness.workload.WorkerConfig], the shared
[`Board`][fencedlease.lab.harness.workload.Board] arrays and a stop event.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import signal
import threading
import time
from typing import Any, Final, Literal

import attrs
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from fencedlease import (
    BackendError,
    Lease,
    LeaseLostError,
    LeaseManager,
    LeaseNotAcquiredError,
    StaleTokenError,
)

from .faults_clock import OffsetClock, make_offsets
from .faults_kernel import enter_netns
from .history import HistoryWriter, Operation
from .resources import ResourceSpec, open_store

__all__ = [
    "MODES",
    "PHASES",
    "Board",
    "Mode",
    "WorkerConfig",
    "worker_main",
]

Mode = Literal["fenced", "write-fenced", "unfenced"]

MODES: Final[tuple[Mode, ...]] = ("fenced", "write-fenced", "unfenced")

#: Where a worker is, as published on the :class:`Board` (the nemesis picks its victim by it).
IDLE, ACQUIRING, HOLDING, BODY, WRITING, RELEASING = range(6)
PHASES: Final = ("idle", "acquiring", "holding", "body", "writing", "releasing")


# --- the board: what workers publish for the nemesis and the progress display ---------------

_FIELDS: Final = (
    "pid", "phase", "since", "token", "grants", "acked", "refused", "lost", "errors",
)  # fmt: skip


class Board:
    """Per-worker counters in shared memory: ``pid``, ``phase`` (an index into
    [`PHASES`][fencedlease.lab.harness.workload.PHASES]), ``since`` (when the phase began:
    `time.monotonic` in milliseconds), ``token`` (held now, 0 when none), and running totals
    ``grants``, ``acked`` (acknowledged writes), ``refused`` (accesses refused as stale), ``lost``
    (leases lost), ``errors``.

    Made in the parent with a multiprocessing context and handed to the workers; reads are
    unlocked snapshots (good enough to pick a victim or draw progress). ``wall_offsets``: each
    worker's wall-clock offset in seconds, set by the ``clock`` fault
    ([`faults_clock`][fencedlease.lab.harness.faults_clock]).
    """

    def __init__(self, ctx: Any, workers: int) -> None:
        self.workers = workers
        self._array = ctx.Array("q", workers * len(_FIELDS), lock=False)
        self.wall_offsets = make_offsets(ctx, workers)

    def _index(self, worker: int, field: str) -> int:
        return worker * len(_FIELDS) + _FIELDS.index(field)

    def get(self, worker: int, field: str) -> int:
        """One field of one worker."""
        return int(self._array[self._index(worker, field)])

    def set(self, worker: int, field: str, value: int) -> None:
        """Set one field (only worker ``worker`` writes its own fields)."""
        self._array[self._index(worker, field)] = value

    def set_phase(self, worker: int, phase: int) -> None:
        """Enter ``phase`` now."""
        self._array[self._index(worker, "since")] = int(time.monotonic() * 1000)
        self._array[self._index(worker, "phase")] = phase

    def bump(self, worker: int, field: str) -> None:
        """Add one to a running total."""
        self._array[self._index(worker, field)] += 1

    def snapshot(self) -> list[dict[str, int]]:
        """Every worker's fields, as dicts."""
        return [{f: self.get(w, f) for f in _FIELDS} for w in range(self.workers)]


# --- the worker -------------------------------------------------------------------------------


@attrs.frozen
class WorkerConfig:
    """What one worker needs (picklable, for ``spawn``).

    ``redis_url``: the Redis the leases live in, as this worker reaches it (through its own
    Toxiproxy proxy when there is one). Times in milliseconds: ``ttl_ms`` (lease TTL),
    ``heartbeat_ms`` (renewal interval), ``body_ms`` (sleep inside the critical section),
    ``wait_ms`` (how long an acquire waits), ``socket_timeout_ms`` (every Redis command).
    ``duration_s``: seconds, counted from the ``go`` signal, after which no new cycle starts;
    ``max_cycles`` bounds the loop in count too. ``netns``: the network namespace the worker
    enters before anything else (its link for the kernel faults), None: the host's.
    """

    index: int
    name: str
    redis_url: str
    prefix: str
    key: str
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
    netns: str | None = None


def client_name(prefix: str, worker_name: str) -> str:
    """The Redis ``CLIENT SETNAME`` of a worker's connections (how ``CLIENT KILL`` finds them):
    the run's key ``prefix`` (which holds its random id) and the worker's name, so that a
    ``client-kill`` never hits a connection of another run or another application."""
    return f"{prefix}:{worker_name}"


def worker_main(config: WorkerConfig, board: Board, go: Any, stop: Any) -> None:
    """The body of one worker process: publish its pid, wait (at most 60 s) for the ``go``
    event, then loop over lease cycles until ``stop`` is set, ``duration_s`` has passed or
    ``max_cycles`` is reached. Everything it sees goes into its history."""
    if config.netns is not None:
        enter_netns(config.netns)  # before any thread or socket exists
    # The parent stops a straggler with SIGTERM; leave through the finally blocks.
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    # The library's warnings (a cleanup release that failed under a fault) are expected here and
    # would scribble over the live display; what matters is in the history.
    logging.getLogger("fencedlease").addHandler(logging.NullHandler())
    rng = random.Random(config.seed)
    timeout_s = config.socket_timeout_ms / 1000
    client = redis.Redis.from_url(
        config.redis_url,
        socket_timeout=timeout_s,
        socket_connect_timeout=timeout_s,
        client_name=client_name(config.prefix, config.name),
        # One transparent retry on a dropped connection: a CLIENT KILL is survived by
        # reconnecting, and the renewal that follows still checks the owner token.
        retry=Retry(NoBackoff(), 1),
    )
    _warm_pool(client, 6)
    # Wall time, wherever the worker reads it, is the clock fault's jumped one.
    clock = OffsetClock(board.wall_offsets, config.index)
    manager = LeaseManager(client, prefix=config.prefix, clock=clock)
    store = open_store(config.resource)
    writer = HistoryWriter(config.history_path, config.name, clock_wall=clock.time)
    attach = getattr(store, "attach_history", None)
    if attach is not None:  # a list-append resource records its transactions too
        attach(writer)
    board.set(config.index, "pid", os.getpid())  # ready: the run waits for every pid
    try:
        if not go.wait(60.0):
            return
        deadline = time.monotonic() + config.duration_s
        cycles = 0
        while not stop.is_set() and time.monotonic() < deadline and cycles < config.max_cycles:
            cycles += 1
            _cycle(config, board, manager, store, writer, rng)
    finally:
        board.set_phase(config.index, IDLE)
        board.set(config.index, "token", 0)
        with contextlib.suppress(Exception):
            manager.close()
        with contextlib.suppress(Exception):
            store.close()
        with contextlib.suppress(Exception):
            client.close()
        writer.close()


def _warm_pool(client: redis.Redis, size: int) -> None:
    """Open ``size`` pooled connections now, as a long-running service has them.

    Otherwise the release that ends the first critical section may need a new connection (the
    renewer's thread holds the pooled one) in the middle of a latency fault, and redis-py's
    handshake (HELLO, CLIENT SETNAME, CLIENT SETINFO...) costs about six round trips: more than
    a ttl under ttl/4 of latency, so the lease would expire while being released. That is real
    (and reported correctly as a loss), but it is connection setup, not the fault under test.
    A worker's manager uses up to six at once: the body's, the renewer's, the hand-off listener's
    and its queueing threads'.
    """
    pool = client.connection_pool
    connections = []
    with contextlib.suppress(redis.RedisError):
        for _ in range(size):
            connections.append(pool.get_connection())
    for connection in connections:
        pool.release(connection)


def _sleep_until(deadline: float) -> None:
    """Sleep until ``deadline`` on the monotonic clock, in slices of at most 20 ms.

    A paused worker (SIGSTOP) must wake as soon as it is resumed if its sleep is over: the
    controls' schedule depends on it. A single ``time.sleep`` does not promise that (on Python
    3.10 it went on sleeping the time that was left when the process was stopped).
    """
    while (left := deadline - time.monotonic()) > 0:
        time.sleep(min(left, 0.02))


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(0)


def _watch(lease: Lease, grant: int, writer: HistoryWriter, done: threading.Event) -> None:
    """Record the moment the library declares ``lease`` lost (bounded by the hold)."""
    while not done.is_set():
        if lease.wait_lost(timeout_ms=20):
            writer.record(
                "lease-lost",
                "info",
                grant=grant,
                key=lease.key,
                token=lease.fencing_token,
                outcome="lease-lost",
                detail={"reason": lease.lost_reason},
            )
            return


def _cycle(
    config: WorkerConfig,
    board: Board,
    manager: LeaseManager,
    store: Any,
    writer: HistoryWriter,
    rng: random.Random,
) -> None:
    me, key = config.index, config.key
    board.set_phase(me, ACQUIRING)
    acquire = writer.invoke("acquire", key=key)
    grant = acquire.id
    hold: Operation | None = None
    body_end: float | None = None
    done = threading.Event()
    watcher: threading.Thread | None = None
    token: int | None = None

    def renew_error(exc: BaseException) -> None:
        # Telemetry, not a loss: one failed renewal round trip (the library retries).
        writer.record(
            "renew-error", "info", grant=grant, key=key, token=token,
            outcome="backend-error", detail={"error": _describe(exc)},
        )  # fmt: skip

    try:
        with manager.hold(
            key,
            ttl_ms=config.ttl_ms,
            wait_ms=config.wait_ms,
            retry_delay_ms=50,
            heartbeat_ms=config.heartbeat_ms,
            on_renew_error=renew_error,
        ) as lease:
            token = lease.fencing_token
            acquire.ok(token=token, outcome="granted")
            board.set(me, "token", token or 0)
            board.set_phase(me, HOLDING)
            board.bump(me, "grants")
            hold = Operation(writer, "hold", grant, {"grant": grant, "key": key, "token": token})
            watcher = threading.Thread(
                target=_watch, args=(lease, grant, writer, done), daemon=True
            )
            watcher.start()
            try:
                value = _access(
                    writer, board, me, "read", grant, key, token, None,
                    lambda: store.read(lease, fenced=config.mode == "fenced"),
                )  # fmt: skip
                board.set_phase(me, BODY)
                _sleep_until(time.monotonic() + config.body_ms / 1000)
                board.set_phase(me, WRITING)
                _access(
                    writer, board, me, "write", grant, key, token, value + 1,
                    lambda: store.write(value + 1, lease, fenced=config.mode != "unfenced"),
                )  # fmt: skip
            finally:
                body_end = time.monotonic()
            board.set_phase(me, RELEASING)
        hold.ok(detail={"body_end": body_end})
    except LeaseNotAcquiredError:
        acquire.fail(outcome="not-acquired")
    except LeaseLostError as exc:
        board.bump(me, "lost")
        _end(hold, acquire, "fail", "lease-lost", exc, body_end)
    except StaleTokenError as exc:
        _end(hold, acquire, "fail", "stale", exc, body_end)
    except BackendError as exc:
        board.bump(me, "errors")
        _end(hold, acquire, "info", "backend-error", exc, body_end)
        # Redis or the store may be down (a restart, a partition): do not spin.
        time.sleep(rng.uniform(0.05, 0.15))
    except Exception as exc:  # anything else is recorded, not fatal: the run goes on
        board.bump(me, "errors")
        _end(hold, acquire, "info", "error", exc, body_end)
        time.sleep(rng.uniform(0.02, 0.08))
    finally:
        done.set()
        if watcher is not None:
            watcher.join(timeout=1.0)
        board.set_phase(me, IDLE)
        board.set(me, "token", 0)


def _end(
    hold: Operation | None,
    acquire: Operation,
    kind: Literal["fail", "info"],
    outcome: str,
    exc: BaseException,
    body_end: float | None,
) -> None:
    """Complete the hold (or, if nothing was acquired, the acquire) with ``kind``."""
    fields: dict[str, Any] = {"outcome": outcome, "detail": {"error": _describe(exc)}}
    if hold is None:
        if not acquire.done:
            getattr(acquire, kind)(**fields)
        return
    fields["detail"]["body_end"] = body_end
    getattr(hold, kind)(**fields)


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _access(
    writer: HistoryWriter,
    board: Board,
    me: int,
    op: str,
    grant: int,
    key: str,
    token: int | None,
    value: int | None,
    action: Any,
) -> Any:
    """Run one access to the resource as an invoke/completion pair; re-raise its error."""
    access = writer.invoke(op, grant=grant, key=key, token=token, value=value)
    try:
        result = action()
    except StaleTokenError as exc:
        board.bump(me, "refused")
        access.fail(outcome="stale", detail={"error": _describe(exc), "last": exc.last_token})
        raise
    except BackendError as exc:
        access.info(outcome="backend-error", detail={"error": _describe(exc)})
        raise
    if op == "write":
        board.bump(me, "acked")
        access.ok(outcome="accepted")
        return None
    access.ok(outcome="accepted", value=int(result))
    return result
