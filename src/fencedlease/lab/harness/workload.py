"""The workload: N worker processes doing a fenced read-modify-write of one counter under a lease.

Each worker loops: pick a key (from its own random source, seeded from the run's seed and the
worker's index), take the lease on it with [`LeaseManager.hold`][fencedlease.LeaseManager.hold]
(renewed in the background; for a share of the cycles waiting for it, through the fair hand-off
queue), read the counter, sleep ``body_ms`` inside the critical section, write the value read plus
one, leave the ``with`` block. Every step is an invoke/completion pair in the worker's own history
file ([`fencedlease.lab.harness.history`][]). What the library told the worker about its leases (the
grant and its confirmed deadline, every renewal's outcome, the release going out, the loss
notice) comes from the manager's ``on_event`` hook
([`Recorder`][fencedlease.lab.harness.recorder.Recorder]): that is what the lock-level check
([`mutex`][fencedlease.lab.harness.mutex]) judges.

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
import os
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, Final, Literal

import attrs
import redis

from fencedlease import (
    BackendError,
    Clock,
    LeaseLostError,
    LeaseManager,
    LeaseNotAcquiredError,
    StaleTokenError,
)

from .faults_clock import make_offsets
from .history import HistoryWriter, Operation
from .kinds import Fencing
from .recorder import Recorder
from .resources import ResourceSpec, open_store
from .topology import lease_client

__all__ = [
    "MODES",
    "PHASES",
    "THREADS",
    "WORKER_KINDS",
    "Board",
    "Cycle",
    "Mode",
    "WorkerConfig",
    "WorkerKind",
    "access",
    "connect_notes",
    "end_cycle",
    "lane_rng",
    "open_lane_store",
    "pick",
    "run_sync_worker",
    "unshunned",
]

Mode = Literal["fenced", "write-fenced", "unfenced"]
WorkerKind = Literal["sync", "threads", "asyncio"]

#: How a worker may run (see :func:`~fencedlease.lab.harness.workers.worker_main`).
WORKER_KINDS: Final[tuple[WorkerKind, ...]] = ("sync", "threads", "asyncio")
#: The lanes (threads or tasks) of a ``threads`` or ``asyncio`` worker.
THREADS: Final = 3

MODES: Final[tuple[Mode, ...]] = ("fenced", "write-fenced", "unfenced")

#: Where a worker is, as published on the :class:`Board` (the nemesis picks its victim by it).
IDLE, ACQUIRING, HOLDING, BODY, WRITING, RELEASING = range(6)
PHASES: Final = ("idle", "acquiring", "holding", "body", "writing", "releasing")


# --- the board: what workers publish for the nemesis and the progress display ---------------

_FIELDS: Final = (
    "pid", "phase", "since", "token", "key", "grants", "acked", "refused", "lost", "errors",
    "stretch", "steer", "shun", "alone", "linger", "retry",
)  # fmt: skip


class Board:
    """Per-worker counters in shared memory: ``pid``, ``phase`` (an index into
    [`PHASES`][fencedlease.lab.harness.workload.PHASES]), ``since`` (when the phase began:
    `time.monotonic` in milliseconds), ``token`` (held now, 0 when none), ``key`` (the index of
    the key held in the worker's ``keys``), and running totals ``grants``, ``acked``
    (acknowledged writes), ``refused`` (accesses refused as stale), ``lost`` (leases lost),
    ``errors``. A worker of several lanes shows one of its cycles at a time
    ([`Cycle`][fencedlease.lab.harness.workload.Cycle]): the one holding a lease, if any.
    ``stretch`` is the one field the nemesis writes: milliseconds by which the body of the cycle
    shown next (or now) is to outlast ``body_ms`` (a slow critical section, so that the holder
    renews during a fault); the cycle sets it back to 0 when it takes it. ``steer``, also the
    nemesis': 1 + the index of a key the worker's next cycle is to wait for (the key a fault is
    about to take from its holder, so that a waiter is there when Redis frees it), 0: none.
    ``shun``, the nemesis' too: 1 + the index of a key the worker's new cycles are not to pick
    (they take the next key instead) while it is set, so that a key the nemesis deleted is still
    missing when its holder's renewal comes; 0: none. ``alone``, the nemesis' too: 1 while the
    stretch is only to be taken by a cycle no other lane of the worker is acquiring or holding
    the key of (so that no lane of the holder's own waits for a key the nemesis deletes).
    ``linger`` and ``retry``, the nemesis' too, set before ``steer`` and taken with it:
    milliseconds the body of the steered cycle lasts at least (0: two heartbeats), and its
    ``retry_delay_ms`` (0: the default 50), so that a waiter the nemesis hands a key to waits
    for the release's message between rare polls, and claims the key past its expiry whatever
    lane it runs in.

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
    ``max_cycles`` bounds the loop in count too (per lane). ``keys``: the lease keys a cycle
    picks from; ``wait_share``: the share of acquires that wait ``wait_ms`` (the others fail
    fast); ``kind``: how the worker runs
    ([`WORKER_KINDS`][fencedlease.lab.harness.workload.WORKER_KINDS], see
    [`worker_main`][fencedlease.lab.harness.workers.worker_main]). ``netns``: the network
    namespace the worker enters before anything else (its link for the kernel faults), None: the
    host's. ``replica_acks``, ``fencing``: the manager's options of those names; ``redis_url``
    may be ``redis+sentinel://`` or ``redis+cluster://`` (see
    [`lease_client`][fencedlease.lab.harness.topology.lease_client]).
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


def client_name(prefix: str, worker_name: str) -> str:
    """The Redis ``CLIENT SETNAME`` of a worker's connections (how ``CLIENT KILL`` finds them):
    the run's key ``prefix`` (which holds its random id) and the worker's name, so that a
    ``client-kill`` never hits a connection of another run or another application."""
    return f"{prefix}:{worker_name}"


def run_sync_worker(
    config: WorkerConfig, board: Board, go: Any, stop: Any, recorder: Recorder, clock: Clock
) -> None:
    """Run a ``sync`` or ``threads`` worker (see
    [`worker_main`][fencedlease.lab.harness.workers.worker_main]) until ``stop``, ``duration_s`` or
    ``max_cycles`` (per thread); ``clock`` is the worker's (the ``clock`` fault's offset wall
    time)."""
    # One transparent retry on a dropped connection (redis:// and Sentinel): a CLIENT KILL is
    # survived by reconnecting, and the renewal that follows still checks the owner token.
    note, arm = connect_notes(recorder)
    client = lease_client(
        config.redis_url,
        config.socket_timeout_ms / 1000,
        client_name(config.prefix, config.name),
        note,
    )
    threads = THREADS if config.kind == "threads" else 1
    if isinstance(client, redis.Redis):
        _warm_pool(client, 5 + threads)
    arm()
    manager = LeaseManager(
        client,
        prefix=config.prefix,
        on_event=recorder,
        clock=clock,
        replica_acks=config.replica_acks,
        fencing=config.fencing,
    )
    board.set(config.index, "pid", os.getpid())  # ready: the run waits for every pid
    try:
        if not go.wait(60.0):
            return
        deadline = time.monotonic() + config.duration_s
        runners = [
            threading.Thread(
                target=_loop,
                args=(
                    config,
                    board,
                    manager,
                    recorder,
                    n,
                    stop,
                    deadline,
                ),
                name=f"worker-{n}",
                daemon=True,
            )
            for n in range(threads)
        ]
        for runner in runners:
            runner.start()
        for runner in runners:
            runner.join()
    finally:
        with contextlib.suppress(Exception):
            manager.close()
        with contextlib.suppress(Exception):
            client.close()


def lane_rng(config: WorkerConfig, lane: int) -> random.Random:
    """The random source of one lane (thread or task) of a worker: from the run's seed, the
    worker's index and the lane, so one seed gives the same choices."""
    return random.Random(f"{config.seed}:{config.index}:{lane}")


def _loop(
    config: WorkerConfig,
    board: Board,
    manager: LeaseManager,
    recorder: Recorder,
    lane: int,
    stop: Any,
    deadline: float,
) -> None:
    """One lane (thread) of a sync worker, with a store of its own (opened in this thread: an
    SQLite connection may be used only in the thread that made it)."""
    rng = lane_rng(config, lane)
    store = open_lane_store(config, recorder, lane)
    try:
        cycles = 0
        while not stop.is_set() and time.monotonic() < deadline and cycles < config.max_cycles:
            cycles += 1
            _cycle(config, board, manager, store, recorder, rng)
    finally:
        with contextlib.suppress(Exception):
            store.close()


def open_lane_store(config: WorkerConfig, recorder: Recorder, lane: int) -> Any:
    """The counter store of one lane (opened in the thread that uses it); a list-append
    resource also records its transactions in the worker's history, the values it appends named
    after the worker and the lane."""
    store = open_store(config.resource)
    attach = getattr(store, "attach_history", None)
    if attach is not None:
        attach(recorder.writer, lane=lane)
    return store


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


def connect_notes(recorder: Recorder) -> tuple[Callable[[], None], Callable[[], None]]:
    """``(note, arm)``: ``note()`` records a ``connect`` info event of the worker once ``arm()``
    has been called (after the pool is warmed): a connection of the worker started connecting
    during the run (see [`noting_connects`][fencedlease.lab.harness.topology.noting_connects])."""
    armed = threading.Event()

    def note() -> None:
        if armed.is_set():
            recorder.writer.record("connect", "info")

    return note, armed.set


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
            try:
                connections.append(pool.get_connection())
            except TypeError:  # redis-py before 5.3 requires a command's name (unused here)
                connections.append(pool.get_connection("PING"))
    for connection in connections:
        pool.release(connection)


# --- one cycle -------------------------------------------------------------------------------


#: The cycle each worker index of this process shows on the board (lanes share the slot).
_shown: dict[int, Cycle] = {}
_shown_lock = threading.Lock()
#: How many cycles of this process are acquiring or holding each key (under ``_shown_lock``).
_in_use: Counter[str] = Counter()


class Cycle:
    """The bookkeeping of one lease cycle, shared by the sync and the asyncio workers (only the
    waiting differs): the choices ([`pick`][fencedlease.lab.harness.workload.pick]), the acquire
    operation (routed to the recorder), the board, the hold operation, and how a failure ends the
    cycle.

    The lanes of a ``threads`` or ``asyncio`` worker share its board slot: a cycle shows itself
    when the slot is free, and a granted cycle takes it from one that only acquires, so that a
    holder is never hidden by another lane (the nemesis aims at the holder the board shows)."""

    def __init__(
        self, config: WorkerConfig, board: Board, recorder: Recorder, rng: random.Random
    ) -> None:
        self.config, self.board, self.rng = config, board, rng
        self.writer = recorder.writer
        self.key, self.wait_ms = pick(config, rng)
        self.key = unshunned(config.keys, self.key, board.get(config.index, "shun"))
        steered, self.linger_ms, self.retry_ms = self._steered()
        self.steered = steered is not None
        if steered is not None:
            self.key, self.wait_ms = steered, config.wait_ms
        with _shown_lock:
            _in_use[self.key] += 1
        self.token: int | None = None
        self._show(ACQUIRING, take=False)
        detail: dict[str, Any] = {"wait_ms": self.wait_ms}
        if steered is not None:
            detail["steered"] = True
        self.acquire = self.writer.invoke("acquire", key=self.key, detail=detail)
        self.grant = self.acquire.id
        self.hold: Operation | None = None
        self.body_end: float | None = None
        self.stretched_until = 0.0
        recorder.expect(self.acquire)

    def _steered(self) -> tuple[str | None, int, int]:
        """The key the nemesis steered this worker to (taken: the board's ``steer``,
        ``linger`` and ``retry`` are reset), or None; the milliseconds its body is to last at
        least, and its retry delay (0: the defaults). The seeded choice is drawn all the same,
        so the other cycles stay as drawn."""
        me, keys = self.config.index, self.config.keys
        with _shown_lock:
            steer = self.board.get(me, "steer")
            if steer <= 0:
                return None, 0, 0
            linger, retry = self.board.get(me, "linger"), self.board.get(me, "retry")
            for field in ("steer", "linger", "retry"):
                self.board.set(me, field, 0)
        return (keys[steer - 1] if steer <= len(keys) else None), linger, retry

    def hold_args(self) -> dict[str, Any]:
        """The keyword arguments of the cycle's ``hold``."""
        config = self.config
        return {
            "ttl_ms": config.ttl_ms, "wait_ms": self.wait_ms,
            "retry_delay_ms": self.retry_ms or 50,
            "heartbeat_ms": config.heartbeat_ms,
        }  # fmt: skip

    def _show(self, phase: int, *, take: bool) -> None:
        """Enter ``phase`` on the board if this cycle is shown there, or the slot is free, or
        ``take`` and the cycle shown holds no lease."""
        me = self.config.index
        with _shown_lock:
            shown = _shown.get(me)
            if shown is not self:
                if shown is not None and not (take and shown.token is None):
                    return
                _shown[me] = self
                take = True  # newly shown: its key and token too
            if take:
                self.board.set(me, "key", self.config.keys.index(self.key))
                self.board.set(me, "token", self.token or 0)
            self.board.set_phase(me, phase)

    def phase(self, phase: int) -> None:
        """Enter ``phase`` (on the board if shown). A steered cycle's body lasts two heartbeats
        at least: it holds the key a fault freed when the holder it was taken from next renews
        (so that a renewal of another owner's key shows); or the board's ``linger`` taken with
        the steer, when longer."""
        if phase == BODY and self.steered:
            least_s = max(2 * self.config.heartbeat_ms, self.linger_ms) / 1000
            self.stretched_until = max(self.stretched_until, time.monotonic() + least_s)
        self._show(phase, take=False)

    def body_left(self, until: float) -> float:
        """Seconds the body has left to run (it ends at ``until``, monotonic seconds, unless
        stretched): a stretch the nemesis put on the board for this worker is taken by the cycle
        it shows, and moves ``until`` to now plus the stretch. Called in slices of at most 20
        ms, so that a stretch asked for during the body is taken, and so that a paused worker
        (SIGSTOP) wakes as soon as it is resumed if its body is over (one long ``time.sleep``
        does not promise that: on Python 3.10 it slept on the time left at the stop)."""
        me, now = self.config.index, time.monotonic()
        with _shown_lock:
            alone = _in_use[self.key] == 1 or not self.board.get(me, "alone")
            stretch = self.board.get(me, "stretch") if _shown.get(me) is self and alone else 0
            if stretch > 0:
                self.board.set(me, "stretch", 0)
                self.stretched_until = max(self.stretched_until, now + stretch / 1000)
        return max(until, self.stretched_until) - now

    def granted(self, token: int | None) -> None:
        """The lease is held (``token``): the board, and the hold operation."""
        me = self.config.index
        self.token = token
        if not self.acquire.done:  # the event hook records it; never twice
            self.acquire.ok(token=token, outcome="granted")
        self._show(HOLDING, take=True)
        self.board.bump(me, "grants")
        self.hold = Operation(
            self.writer, "hold", self.grant, {"grant": self.grant, "key": self.key, "token": token}
        )

    def access(self, op: str, value: int | None, action: Any) -> Any:
        """One access to the resource
        ([`access`][fencedlease.lab.harness.workload.Cycle.access])."""
        return access(
            self.writer, self.board, self.config.index, op, self.grant, self.key, self.token,
            value, action,
        )  # fmt: skip

    def read(self, store: Any, lease: Any) -> int:
        """Read the key's counter (fenced in ``fenced`` mode only)."""
        fenced = self.config.mode == "fenced"
        return int(self.access("read", None, lambda: store.read(lease, fenced=fenced)))

    def recheck(self, store: Any, lease: Any) -> None:
        """On a strict store in ``fenced`` mode, a ``recheck`` before the write: the token its
        read had accepted, presented once more in strict mode; the store must refuse it (``ok``
        with outcome ``refused``; an ``accepted`` recheck is a violation of property ``a``).
        Nothing on any other store."""
        strict_key = getattr(store, "strict_key", None)
        if self.config.mode == "fenced" and strict_key is not None and strict_key(self.key):
            check = self.writer.invoke("recheck", grant=self.grant, key=self.key, token=self.token)
            try:
                again = bool(store.recheck(lease))
            except BackendError as exc:
                check.info(outcome="backend-error", detail={"error": _describe(exc)})
                raise
            check.ok(outcome="accepted" if again else "refused")

    def write(self, store: Any, lease: Any, value: int) -> None:
        """Write ``value`` to the key's counter (fenced unless ``unfenced``), after its
        `recheck` (the asyncio worker runs the two as separate store calls instead, so that a
        loss notice between them cancels the write: `write_only`)."""
        self.recheck(store, lease)
        self.write_only(store, lease, value)

    def write_only(self, store: Any, lease: Any, value: int) -> None:
        """The write of `write`, without the recheck."""
        fenced = self.config.mode != "unfenced"
        self.access("write", value, lambda: store.write(value, lease, fenced=fenced))

    def completed(self) -> None:
        assert self.hold is not None
        self.hold.ok(detail={"body_end": self.body_end})

    def failed(self, exc: Exception) -> float:
        """Record how ``exc`` ended the cycle; the seconds to pause before the next one (a
        store that is down is not hammered)."""
        board, me, rng = self.board, self.config.index, self.rng
        hold, acquire, body_end = self.hold, self.acquire, self.body_end
        if isinstance(exc, LeaseNotAcquiredError) and hold is None:
            if not acquire.done:
                acquire.fail(outcome="not-acquired")
            return rng.uniform(0.005, 0.02) if self.wait_ms == 0 else 0.0
        if isinstance(exc, LeaseLostError):
            board.bump(me, "lost")
            end_cycle(hold, acquire, "fail", "lease-lost", exc, body_end)
            return 0.0
        if isinstance(exc, StaleTokenError):
            end_cycle(hold, acquire, "fail", "stale", exc, body_end)
            return 0.0
        board.bump(me, "errors")
        if isinstance(exc, BackendError):
            end_cycle(hold, acquire, "info", "backend-error", exc, body_end)
            return rng.uniform(0.05, 0.15)  # Redis or the store may be down: do not spin
        end_cycle(hold, acquire, "info", "error", exc, body_end)  # recorded, not fatal
        return rng.uniform(0.02, 0.08)

    def finish(self) -> None:
        me = self.config.index
        with _shown_lock:
            _in_use[self.key] -= 1
            if _in_use[self.key] <= 0:
                del _in_use[self.key]
            if _shown.get(me) is not self:
                return
            del _shown[me]
            self.board.set(me, "token", 0)
            self.board.set_phase(me, IDLE)


def _cycle(
    config: WorkerConfig,
    board: Board,
    manager: LeaseManager,
    store: Any,
    recorder: Recorder,
    rng: random.Random,
) -> None:
    cycle = Cycle(config, board, recorder, rng)
    try:
        with manager.hold(cycle.key, **cycle.hold_args()) as lease:
            cycle.granted(lease.fencing_token)
            try:
                value = cycle.read(store, lease)
                cycle.phase(BODY)
                until = time.monotonic() + config.body_ms / 1000
                while (left := cycle.body_left(until)) > 0:
                    time.sleep(min(left, 0.02))
                cycle.phase(WRITING)
                cycle.write(store, lease, value + 1)
            finally:
                cycle.body_end = time.monotonic()
            cycle.phase(RELEASING)
        cycle.completed()
    except Exception as exc:
        time.sleep(cycle.failed(exc))
    finally:
        cycle.finish()


def end_cycle(
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


def access(
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
