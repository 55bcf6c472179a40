"""Nemeses: the faults a run injects, each recorded in the history with its start and its end.

Jepsen's nemesis is a process that breaks things on a schedule; here it is a thread of the run's
process, acting on a [`Schedule`][fencedlease.lab.harness.schedule.Schedule] drawn from the run's
seed: episodes one after the other, the faults of an episode each on a thread of its own,
overlapping. Each fault is one ``fault`` operation in the history: ``invoke`` when it starts
(``detail.fault`` the kind, ``detail.target`` the worker it hits, if any, ``detail.index`` its place
in the schedule) and ``ok`` when it has healed (``fail`` if it could not be done), with what it saw.

Kinds ([`FAULTS`][fencedlease.lab.harness.kinds.FAULTS]):

| kind | what it does |
| --- | --- |
| ``latency`` | Toxiproxy ``latency`` toxic on the holder's proxy (ttl/5 ± ttl/20) |
| ``partition`` | the holder's proxy disabled (listener and connections closed) |
| ``timeout`` | Toxiproxy ``timeout`` 0 on the holder's proxy: a black hole |
| ``reset-peer`` | Toxiproxy ``reset_peer``: the holder's connections get TCP RST |
| ``pause-holder`` | SIGSTOP of the holder in its critical section, SIGCONT after (GC) |
| ``redis-pause`` | SIGSTOP of redis-server, SIGCONT after |
| ``redis-restart-aof`` | SIGKILL of redis-server and a restart that replays its AOF |
| ``redis-restart-nopersist`` | the same with persistence off: Redis comes back empty |
| ``client-kill`` | ``CLIENT KILL`` of every connection of the holder |
| ``script-flush`` | ``SCRIPT FLUSH``: every cached Lua script is forgotten |
| ``clock`` | every worker's wall clock jumps +5 ttl, then -5 ttl, then strobes |
| ``kill-holder`` | SIGKILL of the holder in its critical section; a fresh worker after |
| ``drop-replies`` | ``timeout`` 0 downstream only: Redis runs the requests, replies are lost |
| ``drop-requests`` | the same on the upstream only: the requests are lost |
| ``kernel-drop`` | nftables ``drop`` of the holder's packets to and from its port |
| ``kernel-reject`` | nftables ``reject with tcp reset`` of the holder's packets |
| ``evict`` | ``DEL`` of the holder's lease key (not its counter), right after a renewal |
| ``slow-cut`` | ``latency`` ttl/3 on the holder's replies until a renewal ran; its requests cut |
| ``slow-grant`` | ``latency`` ttl/3 on a worker's replies until it is granted; its requests cut |
| ``slow-handoff`` | a key handed to a queued worker, the message ttl/3 late; its requests cut |

The last ten are made in [`faults_clock`][fencedlease.lab.harness.faults_clock],
[`faults_process`][fencedlease.lab.harness.faults_process],
[`faults_network`][fencedlease.lab.harness.faults_network],
[`faults_kernel`][fencedlease.lab.harness.faults_kernel] and
[`faults_lease`][fencedlease.lab.harness.faults_lease].

One Toxiproxy proxy per worker sits between it and Redis, so a network fault cuts off one worker
alone. The victim of a fault is a worker index from the schedule (``holder`` in the table: an
episode's lead waits for its victim to enter its critical section, which makes a stale write
possible). Faults in force together compose: each undoes only its own doing (toxics are named
by the fault's index; a proxy, a worker or Redis stopped twice comes back when the last of the
two ends; each kernel cut has an nftables table of its own; a ``clock`` fault sets the wall
clocks back when it ends), and
[`Nemesis.heal_all`][fencedlease.lab.harness.nemesis.Nemesis.heal_all] undoes whatever is left when
the run ends.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import attrs
import redis

from fencedlease import Lease, LeaseManager, redis_keys

from ..servers.redis import RedisServer
from .faults_clock import run_clock_fault
from .faults_kernel import KERNEL_ACTIONS, KernelFirewall, Link, kernel_unavailable_reason
from .faults_lease import (
    HOLD_SLACK_S,
    Comeback,
    compare_and_delete,
    evict_number,
    owner_token,
    slow_replies,
    take_stretch,
    wait_for_one_waiter,
    wait_for_renewal,
    wait_for_value,
    watch_comeback,
)
from .faults_network import one_way_toxic, watch_lease
from .faults_process import KillTarget, kill_and_replace
from .faults_topology import TopologyFaults
from .history import HistoryWriter, Operation
from .kinds import (
    ALL_FAULTS,
    CUT_OFF,
    DEFAULT_FAULTS,
    FAULTS,
    SERVER_WIDE,
    FaultInfo,
    Fencing,
    fault_duration_s,
    latency_toxic_ms,
    left_out_faults,
    parse_faults,
)
from .workload import BODY, HOLDING, PHASES, WRITING, Board, client_name

if TYPE_CHECKING:
    from .schedule import PlannedFault, Schedule
    from .topology import Deployment

__all__ = [
    "ALL_FAULTS",
    "DEFAULT_FAULTS",
    "FAULTS",
    "SERVER_WIDE",
    "FaultInfo",
    "FaultSpec",
    "Nemesis",
    "NemesisEnv",
    "fault_duration_s",
    "left_out_faults",
    "parse_faults",
    "unavailable_reason",
]


@attrs.frozen
class FaultSpec:
    """What a ``_do_<kind>`` method is given: ``kind`` (a key of
    [`FAULTS`][fencedlease.lab.harness.kinds.FAULTS]) lasting ``duration_s``; ``index``, its place
    in the schedule (it names the fault's toxics)."""

    kind: str
    duration_s: float
    index: int = 0


@attrs.define
class NemesisEnv:
    """What the nemesis acts on. ``admin_url``: the lease Redis, reached directly (no proxy).
    ``redis_server``: ours, when we started it (None for ``--redis-url``). ``proxies``: worker
    index -> toxiproxy-python ``Proxy`` (empty without Toxiproxy). ``extra_flush_urls``: other
    Redis servers whose scripts ``script-flush`` also flushes (a Redis resource the check
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
    (``slow-handoff``) uses too, so that the token it hands on is one the workers' would be."""

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
    if needs == "redis-process" and env.redis_server is None:
        return "needs a redis-server started by the harness (not available with --redis-url)"
    if needs == "restart" and (env.restart_worker is None or not env.history_paths):
        return "needs a run that can restart a worker process"
    if needs in ("sentinel", "cluster", "replicas"):
        kind_now = None if env.deployment is None else env.deployment.kind
        if kind_now is None or (needs != "replicas" and kind_now != needs):
            return f"needs --topology {'sentinel or cluster' if needs == 'replicas' else needs}"
    if needs == "kernel" and not env.kernel_links:
        return env.kernel_reason or kernel_unavailable_reason() or "the workers have no links"
    return None


class Nemesis:
    """Runs a [`Schedule`][fencedlease.lab.harness.schedule.Schedule] on a thread of its own.

    Episodes run one after the other, each at its planned time or the schedule's gap after the
    previous one ended, whichever is later. The lead of an episode waits (at most
    ``schedule.aim_ms``) for its victim to be in its critical section; each fault of the episode
    then starts ``offset_ms`` after the lead began, on a thread of its own, and heals after its
    ``duration_ms``, independently of the others. An episode that would not end before
    ``end_mono`` minus the gap is skipped, its faults listed in
    [`skipped`][fencedlease.lab.harness.nemesis.Nemesis.skipped].
    [`heal_all`][fencedlease.lab.harness.nemesis.Nemesis.heal_all] undoes whatever is still in force
    (it is also run when the nemesis stops).
    """

    def __init__(self, env: NemesisEnv, schedule: Schedule) -> None:
        self.env = env
        self.schedule = schedule
        self.skipped: list[tuple[str, str]] = []
        self.done: list[str] = []
        self.error: BaseException | None = None
        self._admin = redis.Redis.from_url(
            env.admin_url, socket_timeout=2.0, socket_connect_timeout=2.0, decode_responses=True
        )
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()  # the counts below, signals to workers, proxy toggles
        self._redis_lock = threading.Lock()  # pausing, resuming and restarting redis-server
        self._in_force: dict[int, str] = {}
        self._paused_pids: dict[int, int] = {}
        self._redis_pauses = 0
        self._redis_paused_pid: int | None = None
        self._disabled: dict[int, int] = {}
        self._toxics: set[tuple[int, str]] = set()
        self._firewall = KernelFirewall(env.run_id)
        self._topology: TopologyFaults | None = None
        if env.deployment is not None:
            first = redis_keys(env.prefix, env.lease_keys[0]).fence
            self._topology = TopologyFaults(env.deployment, first)

    @property
    def current(self) -> str | None:
        """The kinds in force now, comma-separated, or None."""
        kinds = list(self._in_force.values())
        return ", ".join(kinds) if kinds else None

    # -- running -------------------------------------------------------------------------------

    def start(self, start_mono: float, end_mono: float, stop: threading.Event) -> None:
        """Run the schedule on a thread; its times count from ``start_mono``."""
        self._thread = threading.Thread(
            target=self._run, args=(start_mono, end_mono, stop), name="nemesis", daemon=True
        )
        self._thread.start()

    def join(self, timeout_s: float) -> None:
        """Wait for the thread (bounded), then heal everything."""
        if self._thread is not None:
            self._thread.join(timeout_s)
        self.heal_all()

    def _run(self, start_mono: float, end_mono: float, stop: threading.Event) -> None:
        try:
            ready = start_mono
            episodes = list(self.schedule.episodes())
            for number, episode in enumerate(episodes):
                at = max(start_mono + episode[0].start_ms / 1000, ready)
                if stop.wait(max(0.0, at - time.monotonic())):
                    # Every fault not begun is named, not only the first that did not fit.
                    self.skipped.extend(
                        (fault.kind, "the run ended first")
                        for later in episodes[number:]
                        for fault in later
                    )
                    return
                self._episode(episode, end_mono, stop)
                ready = time.monotonic() + self.schedule.gap_ms / 1000
        except BaseException as exc:  # recorded, never silent; the run reports it
            self.error = exc
        finally:
            self.heal_all()

    def _episode(self, faults: list[PlannedFault], end_mono: float, stop: threading.Event) -> None:
        runnable = []
        for fault in faults:
            reason = unavailable_reason(fault.kind, self.env)
            if reason is None:
                runnable.append(fault)
            else:
                self.skipped.append((fault.kind, reason))
        length = max(f.offset_ms + f.duration_ms for f in faults) / 1000
        gap = self.schedule.gap_ms / 1000

        def fits() -> bool:
            if time.monotonic() + length + gap <= end_mono:
                return True
            self.skipped.extend((f.kind, "did not fit in the run's duration") for f in runnable)
            return False

        if not runnable or not fits():
            return
        aim = self._aim(faults[0], stop)
        if stop.is_set() or not fits():
            return
        began = time.monotonic()
        threads = [
            threading.Thread(
                target=self._member,
                args=(fault, began, stop, aim if fault is faults[0] else {}),
                name=f"nemesis-{fault.index}",
                daemon=True,
            )
            for fault in runnable
        ]
        for thread in threads:
            thread.start()
        for thread in threads:  # each ends after its duration, or at once when stopped
            thread.join()

    def _member(
        self, fault: PlannedFault, began: float, stop: threading.Event, aim: dict[str, Any]
    ) -> None:
        try:
            if stop.wait(max(0.0, began + fault.offset_ms / 1000 - time.monotonic())):
                self.skipped.append((fault.kind, "the run ended first"))
                return
            self._fault(fault, stop, aim)
        except BaseException as exc:  # recorded, never silent; the run reports it
            self.error = exc

    def _fault(self, fault: PlannedFault, stop: threading.Event, aim: dict[str, Any]) -> None:
        kind, target = fault.kind, fault.target
        spec = FaultSpec(kind, fault.duration_ms / 1000, fault.index)
        action: Callable[[FaultSpec, threading.Event, Operation, int | None], None] = getattr(
            self, "_do_" + kind.replace("-", "_"), self._do_topology
        )
        board = self.env.board
        detail: dict[str, Any] = {
            "fault": kind,
            "duration_ms": fault.duration_ms,
            "index": fault.index,
            "episode": fault.episode,
            **aim,
        }
        if FAULTS[kind].needs == "redis-process" and "holder" not in detail:
            holder = self.pick_holder(0.0, (BODY,), 1e9)
            if holder is not None:
                detail["holder"] = self.env.worker_names[holder]
        token = None
        if target is not None:
            detail["target"] = self.env.worker_names[target]
            detail["phase"] = PHASES[board.get(target, "phase")]
            if not self.env.alive(target):
                detail["alive"] = False
            token = board.get(target, "token") or None
        self._in_force[fault.index] = kind
        op = self.env.writer.invoke("fault", token=token, detail=detail)
        try:
            action(spec, stop, op, target)
        except Exception as exc:
            if not op.done:
                op.fail(detail={**detail, "error": f"{type(exc).__name__}: {exc}"})
        finally:
            self._in_force.pop(fault.index, None)
            if not op.done:
                op.ok(detail=detail)
            self.done.append(kind)

    # -- choosing a victim ---------------------------------------------------------------------

    def pick_holder(
        self, wait_s: float, phases: Sequence[int] = (BODY,), fresh_ms: float = 50.0
    ) -> int | None:
        """The worker holding the lease, preferably one that entered one of ``phases`` at most
        ``fresh_ms`` milliseconds ago (a fault then falls early in its critical section, which
        makes the cases deterministic); waits up to ``wait_s`` seconds for one, then takes any
        worker in ``phases``, then any holder, then None."""
        board = self.env.board
        give_up = time.monotonic() + wait_s
        while True:
            snapshot = board.snapshot()
            now_ms = time.monotonic() * 1000
            inside = [w for w, s in enumerate(snapshot) if s["phase"] in phases and s["token"]]
            fresh = [w for w in inside if now_ms - snapshot[w]["since"] <= fresh_ms]
            if fresh:
                return self.env.rng.choice(fresh)
            if time.monotonic() >= give_up:
                if inside:
                    return self.env.rng.choice(inside)
                holders = [
                    w
                    for w, s in enumerate(snapshot)
                    if HOLDING <= s["phase"] <= WRITING and s["token"]
                ]
                return self.env.rng.choice(holders) if holders else None
            time.sleep(0.005)

    def _aim(self, lead: PlannedFault, stop: threading.Event) -> dict[str, Any]:
        """Wait (at most ``schedule.aim_ms``) for the lead's victim to enter its critical
        section, or, for a fault with no victim, for any worker to be in it. A cut-off
        (partition, timeout) waits for its victim to have just entered it, so that the body
        outlives ttl + one heartbeat after the cut and the loss notice can be timed. Returns
        the ``detail`` fields that say how it went: ``aim_ms`` waited, ``aimed`` (found)."""
        env, began = self.env, time.monotonic()
        give_up = began + self.schedule.aim_ms / 1000
        worker = lead.target
        if worker is None:
            holder = self.pick_holder(self.schedule.aim_ms / 1000, (BODY,), 1e9)
            found: dict[str, Any] = {"aimed": holder is not None}
            if holder is not None:
                found["holder"] = env.worker_names[holder]
            return {"aim_ms": round((time.monotonic() - began) * 1000), **found}
        fresh = float(env.body_ms)
        if lead.kind in CUT_OFF:
            fresh = max(50.0, env.body_ms - env.ttl_ms - 2 * env.heartbeat_ms)
        board, hit = env.board, False
        while env.alive(worker):
            since = time.monotonic() * 1000 - board.get(worker, "since")
            if board.get(worker, "phase") == BODY and board.get(worker, "token") and since <= fresh:
                hit = True
                break
            if time.monotonic() >= give_up or stop.wait(0.005):
                break
        return {"aim_ms": round((time.monotonic() - began) * 1000), "aimed": hit}

    @staticmethod
    def _finish(op: Operation, **extra: Any) -> None:
        op.ok(detail={**op.fields.get("detail", {}), **extra})

    # -- the faults ----------------------------------------------------------------------------
    # Each _do_<kind>(spec, stop, op, target) acts, waits out the fault (stop-aware), heals, and
    # completes ``op``; _fault() completes it if an action did not. An action undoes only its
    # own doing (try/finally), so that the faults in force with it go on.

    def _do_topology(
        self, spec: FaultSpec, stop: threading.Event, op: Operation, target: int | None
    ) -> None:
        """A fault of [`faults_topology`][fencedlease.lab.harness.faults_topology]."""
        assert self._topology is not None
        self._finish(
            op, **self._topology.run(spec.kind, spec.duration_s, self.env.ttl_ms / 1000, stop)
        )

    def _proxy(self, target: int | None) -> Any:
        assert target is not None
        return self.env.proxies[target]

    @contextlib.contextmanager
    def _toxics_in_force(
        self, spec: FaultSpec, target: int | None, toxics: list[dict[str, Any]]
    ) -> Iterator[None]:
        """``toxics`` on ``target``'s proxy, each named by its fault (``<name>-<spec.index>``),
        while the block runs; removed after it, whatever else is in force on the proxy."""
        proxy = self._proxy(target)
        mine = [(target or 0, f"{toxic['name']}-{spec.index}") for toxic in toxics]
        try:
            for toxic, (_, name) in zip(toxics, mine, strict=True):
                with self._lock:
                    self._toxics.add((target or 0, name))
                    proxy.add_toxic(**{**toxic, "name": name})
            yield
        finally:
            self._remove_toxics(mine)

    def _with_toxics(
        self,
        spec: FaultSpec,
        stop: threading.Event,
        op: Operation,
        target: int | None,
        toxics: list[dict[str, Any]],
    ) -> None:
        with self._toxics_in_force(spec, target, toxics):
            stop.wait(spec.duration_s)
        self._finish(op, toxics=[t["type"] for t in toxics])

    def _do_latency(
        self, spec: FaultSpec, stop: threading.Event, op: Operation, target: int | None
    ) -> None:
        # The victim's next lease is held through the slow replies (its body stretched over
        # the fault): a healthy renewer keeps it, since the larger of a heartbeat and a reply's
        # delay, plus two more delays, fit in the ttl; the checker counts its loss as
        # unexplained (mutex.could_cost_lease).
        began = time.monotonic()
        delay_ms, jitter_ms = latency_toxic_ms(self.env.ttl_ms)
        latency = {"latency": delay_ms, "jitter": jitter_ms}
        toxic = {"type": "latency", "name": "nemesis-latency", "attributes": latency}
        held = None
        with self._toxics_in_force(spec, target, [toxic]):
            if target is not None:
                held = self._stretched(target, spec.duration_s, stop)
            stop.wait(max(0.0, began + spec.duration_s - time.monotonic()))
        token, key = (None, None) if held is None else held[:2]
        self._finish(op, toxics=["latency"], key=key, token=token)

    def _do_timeout(
        self, spec: FaultSpec, stop: threading.Event, op: Operation, target: int | None
    ) -> None:
        toxics = [
            {
                "type": "timeout",
                "name": f"nemesis-timeout-{stream}",
                "stream": stream,
                "attributes": {"timeout": 0},
            }
            for stream in ("upstream", "downstream")
        ]
        self._with_toxics(spec, stop, op, target, toxics)

    def _do_reset_peer(
        self, spec: FaultSpec, stop: threading.Event, op: Operation, target: int | None
    ) -> None:
        toxic = {
            "type": "reset_peer",
            "name": "nemesis-reset-peer",
            "stream": "upstream",
            "attributes": {"timeout": 0},
        }
        self._with_toxics(spec, stop, op, target, [toxic])

    def _do_partition(
        self, spec: FaultSpec, stop: threading.Event, op: Operation, target: int | None
    ) -> None:
        assert target is not None
        self._take(self._disabled, target, self._proxy(target).disable)
        try:
            stop.wait(spec.duration_s)
        finally:
            self._enable_proxy(target)
        self._finish(op)

    def _do_pause_holder(
        self, spec: FaultSpec, stop: threading.Event, op: Operation, target: int | None
    ) -> None:
        assert target is not None
        pid = self.env.board.get(target, "pid")
        if pid <= 0:  # kill(0 or -n) would signal a whole process group, not the worker
            raise RuntimeError(f"worker {self.env.worker_names[target]} has no pid yet")
        if not self.env.alive(target):
            raise RuntimeError(f"worker {self.env.worker_names[target]} is not running")
        self._take(self._paused_pids, pid, lambda: os.kill(pid, signal.SIGSTOP))
        try:
            stop.wait(spec.duration_s)
        finally:
            self._resume_worker(pid)
        self._finish(op, pid=pid)

    def _do_redis_pause(
        self, spec: FaultSpec, stop: threading.Event, op: Operation, target: int | None
    ) -> None:
        server = self.env.redis_server
        assert server is not None
        with self._redis_lock:
            if self._redis_pauses == 0:
                server.pause()
                self._redis_paused_pid = None if server.process is None else server.process.pid
            self._redis_pauses += 1
        try:
            stop.wait(spec.duration_s)
        finally:
            ended_by_restart = self._resume_redis()
        self._finish(op, ended_by_restart=ended_by_restart)

    def _counter(self) -> int | None:
        """The highest fencing counter of the run's keys (None: none is set).

        Raises:
            redis.RedisError: Redis did not answer.
        """
        fences = [redis_keys(self.env.prefix, key).fence for key in self.env.lease_keys]
        values = [int(raw) for raw in self._admin.mget(fences) if raw is not None]
        return max(values) if values else None

    def _counter_figure(self, unread: list[str]) -> int | None:
        """`_counter`, as a figure noted on a fault that happened: None when Redis did not
        answer, the error appended to ``unread`` (recorded with the fault, never a reason to
        call it failed)."""
        try:
            return self._counter()
        except redis.RedisError as exc:
            unread.append(f"{type(exc).__name__}: {exc}")
            return None

    def _restart(self, op: Operation, *, persist: bool) -> None:
        server = self.env.redis_server
        assert server is not None
        with self._redis_lock:
            # A paused Redis answers nothing: the restart kills the stopped process (SIGKILL
            # needs no answer) and ends the pause; the pause's own end then resumes nothing.
            paused = self._redis_pauses > 0
            unread: list[str] = []
            before = None if paused else self._counter_figure(unread)
            if not persist:
                self._admin.config_set("appendonly", "no")
                server.appendonly = False
            try:
                server.kill()
                self._redis_paused_pid = None
                server.start()
            finally:
                if not persist:
                    # Later restarts persist again (the AOF is rewritten from what is there now).
                    server.appendonly = True
                    with contextlib.suppress(redis.RedisError):
                        self._admin.config_set("appendonly", "yes")
            # Read before a redis-pause waiting for the lock can stop the new process.
            after = self._counter_figure(unread)
        self._finish(
            op,
            persist=persist,
            counter_before=before,
            counter_after=after,
            during_pause=paused,
            **({"counter_unread": unread} if unread else {}),
        )

    def _do_redis_restart_aof(
        self, spec: FaultSpec, stop: threading.Event, op: Operation, target: int | None
    ) -> None:
        self._restart(op, persist=True)

    def _do_redis_restart_nopersist(
        self, spec: FaultSpec, stop: threading.Event, op: Operation, target: int | None
    ) -> None:
        self._restart(op, persist=False)

    def _connections(self, worker: int) -> list[str]:
        name = client_name(self.env.client_prefix, self.env.worker_names[worker])
        return [str(c["id"]) for c in self._admin.client_list() if c.get("name") == name]

    def _do_client_kill(
        self, spec: FaultSpec, stop: threading.Event, op: Operation, target: int | None
    ) -> None:
        assert target is not None
        board = self.env.board
        token = board.get(target, "token")
        key = self.env.held_key(target)
        before = self._connections(target)
        killed = 0
        for client_id in before:
            with contextlib.suppress(redis.RedisError):
                killed += int(self._admin.client_kill_filter(_id=client_id))
        stop.wait(spec.duration_s)  # a renewal or two falls in here
        after = self._connections(target)
        owner = self._admin.get(redis_keys(self.env.prefix, key).lease)
        token_in_redis = None if owner is None else int(str(owner).split(":", 1)[0])
        self._finish(
            op,
            killed=killed,
            reconnected=bool(set(after) - set(before)),
            token_in_redis=token_in_redis,
            still_held=bool(token)
            and board.get(target, "token") == token == token_in_redis
            and self.env.held_key(target) == key,
        )

    def _do_script_flush(
        self, spec: FaultSpec, stop: threading.Event, op: Operation, target: int | None
    ) -> None:
        self._admin.script_flush()
        for url in self.env.extra_flush_urls:
            with redis.Redis.from_url(url, socket_timeout=2.0) as other:
                other.script_flush()
        self._finish(op)

    def _do_clock(
        self, spec: FaultSpec, stop: threading.Event, op: Operation, target: int | None
    ) -> None:
        offsets = self.env.board.wall_offsets
        workers = range(self.env.board.workers)
        done = run_clock_fault(
            offsets, workers, ttl_ms=self.env.ttl_ms, duration_s=spec.duration_s, stop=stop
        )
        self._finish(op, **done)

    def _do_kill_holder(
        self, spec: FaultSpec, stop: threading.Event, op: Operation, target: int | None
    ) -> None:
        env = self.env
        assert target is not None
        assert env.restart_worker is not None
        if not env.alive(target):
            raise RuntimeError(f"worker {env.worker_names[target]} is not running")
        done = kill_and_replace(
            KillTarget(target, env.worker_names[target], env.history_paths[target]),
            env.board,
            self._admin,
            redis_keys(env.prefix, env.held_key(target)).lease,
            env.restart_worker,
            restart_after_s=spec.duration_s,
            watch_s=3 * env.ttl_ms / 1000,
            stop=stop,
        )
        self._finish(op, **done)

    def _one_way(
        self, spec: FaultSpec, stop: threading.Event, op: Operation, target: int | None
    ) -> None:
        assert target is not None
        token = self.env.board.get(target, "token") or None
        toxic = one_way_toxic(spec.kind)
        lease_key = redis_keys(self.env.prefix, self.env.held_key(target)).lease
        with self._toxics_in_force(spec, target, [toxic]):
            until = time.monotonic() + spec.duration_s
            watched = watch_lease(self._admin, lease_key, token, spec.duration_s, stop)
            # A Redis error (a pause or a restart in force with it) ends the watch, not the cut.
            stop.wait(max(0.0, until - time.monotonic()))
        self._finish(op, stream=toxic["stream"], **watched)

    _do_drop_replies = _one_way
    _do_drop_requests = _one_way

    def _kernel(
        self, spec: FaultSpec, stop: threading.Event, op: Operation, target: int | None
    ) -> None:
        assert target is not None
        link = self.env.kernel_links[target]
        table, rules = self._firewall.cut(link.host_if, KERNEL_ACTIONS[spec.kind])
        try:
            stop.wait(spec.duration_s)
        finally:
            self._firewall.heal(table)
        self._finish(op, table=table, link=link.host_if, rules=rules)

    _do_kernel_drop = _kernel
    _do_kernel_reject = _kernel

    def _stretched(self, target: int | None, stretch_s: float, stop: threading.Event) -> Any:
        """Stretch ``target``'s body by ``stretch_s``; its ``(token, key name, lease key)``, or
        None when no holder of ``target`` took the stretch in time."""
        env = self.env
        assert target is not None
        taken = take_stretch(
            env.board, target, round(stretch_s * 1000), (env.body_ms + env.ttl_ms) / 1000, stop
        )
        if taken is None:
            return None
        token, index = taken
        keys = env.lease_keys
        key = keys[index] if 0 <= index < len(keys) else keys[0]
        return token, key, redis_keys(env.prefix, key).lease

    def _steer(self, victim: int, key: str) -> str | None:
        """Have one other running worker (drawn from the nemesis' seeded source) wait for
        ``key`` in its next cycle; its name, or None when there is none."""
        env = self.env
        others = [w for w in range(env.board.workers) if w != victim and env.alive(w)]
        if not others or key not in env.lease_keys:
            return None
        waiter = env.rng.choice(others)
        env.board.set(waiter, "steer", env.lease_keys.index(key) + 1)
        return env.worker_names[waiter]

    def _do_evict(
        self, spec: FaultSpec, stop: threading.Event, op: Operation, target: int | None
    ) -> None:
        env, began = self.env, time.monotonic()
        assert target is not None
        late = evict_number(self.schedule, spec.index) % 2 == 0
        env.board.set(target, "alone", int(late))  # no lane of the victim's waits for the key
        try:
            held = self._stretched(target, spec.duration_s, stop)
        finally:
            env.board.set(target, "alone", 0)
        if held is None:
            raise RuntimeError("the victim held no lease in its body to evict")
        token, key, lease_key = held
        beat = env.heartbeat_ms / 1000
        # Odd evictions of the run: a waiter is steered to the key and takes it before the
        # holder's next renewal. Even ones: no new cycle picks the key (the board's shun) and the
        # other workers' requests are held back (a latency toxic on their proxies) from the DEL
        # until the holder's next renewal ran: that renewal meets the key missing (and must not
        # set it again). Both delete right after a renewal ran.
        # The steered waiter alone may pick the key while the fault runs (the others' new
        # cycles are shunned from it, so that none takes it and releases it before the holder's
        # next renewal), and the DEL waits (at most ttl/2) until its cycle is waiting for it.
        steered = None if late else self._steer(target, key)
        waiter = None if steered is None else env.worker_names.index(steered)
        shunned = [w for w in range(env.board.workers) if w != waiter or late]
        for worker in shunned:
            env.board.set(worker, "shun", env.lease_keys.index(key) + 1)
        held_off: list[str] = []
        try:
            if waiter is not None:
                give_up = time.monotonic() + env.ttl_ms / 2000
                while env.board.get(waiter, "steer") and time.monotonic() < give_up:
                    stop.wait(0.01)
            renewed = wait_for_renewal(self._admin, lease_key, token, beat + 0.3, stop)
            with self._held_off(spec, target, held_off) if late else contextlib.nullcontext():
                value = self._admin.get(lease_key)
                deleted = value is not None and compare_and_delete(self._admin, lease_key, token)
                deleted_mono = time.monotonic()  # a renewal sent after this ran after the DEL
                # The holder's next renewal is due within a heartbeat of the one just seen.
                until = began + spec.duration_s
                if late:
                    until = min(until, deleted_mono + beat + HOLD_SLACK_S)
                back = self._comeback(lease_key, value if deleted else None, until, stop)
            if late and back is None:  # no renewal set it again: watch on, for the next owner
                back = self._comeback(
                    lease_key, value if deleted else None, began + spec.duration_s, stop
                )
        finally:
            for worker in shunned:
                env.board.set(worker, "shun", 0)
        stop.wait(max(0.0, began + spec.duration_s - time.monotonic()))
        comeback = {} if back is None else {"recreated": back.recreated, "back_mono": back.when}
        self._finish(
            op, key=key, token=token, after_renewal=renewed, deleted=deleted,
            deleted_mono=deleted_mono if deleted else None,
            next_token=None if back is None else back.token, steered=steered,
            held_off=held_off, **comeback,
        )  # fmt: skip

    def _comeback(
        self, lease_key: str, deleted: Any, until: float, stop: threading.Event
    ) -> Comeback | None:
        """What came back to ``lease_key`` after the nemesis deleted its value ``deleted`` (None:
        nothing was deleted), watched until ``until`` (monotonic seconds)."""
        if deleted is None:
            return None
        rest = max(0.0, until - time.monotonic())
        return watch_comeback(self._admin, lease_key, deleted, rest, stop)

    @contextlib.contextmanager
    def _held_off(self, spec: FaultSpec, victim: int, names: list[str]) -> Iterator[None]:
        """Hold back the requests of every running worker but ``victim`` while the block runs:
        a ``latency`` toxic of a heartbeat plus
        [`HOLD_SLACK_S`][fencedlease.lab.harness.faults_lease.HOLD_SLACK_S] on the requests of
        its proxy (no more than the ``latency`` fault's delay), so that a request sent after the
        holder's last renewal reaches Redis after its next one; removing the toxic lets what it
        held through at once. Appends the names of the workers held back to ``names``."""
        env = self.env
        name = f"nemesis-evict-hold-{spec.index}"
        toxic: dict[str, Any] = {
            "type": "latency", "name": name, "stream": "upstream",
            "attributes": {"latency": env.heartbeat_ms + round(1000 * HOLD_SLACK_S), "jitter": 0},
        }  # fmt: skip
        mine: list[tuple[int, str]] = []
        try:
            for worker in range(env.board.workers):
                proxy = env.proxies.get(worker)
                if worker == victim or proxy is None or not env.alive(worker):
                    continue
                with self._lock:
                    self._toxics.add((worker, name))
                    mine.append((worker, name))
                    proxy.add_toxic(**toxic)
                names.append(env.worker_names[worker])
            yield
        finally:
            self._remove_toxics(mine)

    def _do_slow_cut(
        self, spec: FaultSpec, stop: threading.Event, op: Operation, target: int | None
    ) -> None:
        env, began = self.env, time.monotonic()
        assert target is not None
        ttl, beat = env.ttl_ms / 1000, env.heartbeat_ms / 1000
        held = self._stretched(target, spec.duration_s + ttl, stop)
        if held is None:
            raise RuntimeError("the victim held no lease in its body to slow down")
        token, key, lease_key = held
        delay_ms = env.ttl_ms // 3
        toxic, cut = slow_replies("nemesis-slow", delay_ms), one_way_toxic("drop-requests")
        with self._toxics_in_force(spec, target, [toxic]):
            renewed = wait_for_renewal(self._admin, lease_key, token, 2 * beat + 0.3, stop)
            # Redis just ran a renewal whose reply is on its way, late. Cut the requests now:
            # that reply still comes (late, confirming the lease), no later renewal reaches
            # Redis, and the key expires a ttl after the renewal ran.
            cut_at_ms = round((time.monotonic() - began) * 1000)
            with self._toxics_in_force(spec, target, [cut]):
                steered = self._steer(target, key)  # a waiter on the key when it expires
                stop.wait(2 * ttl)
        self._finish(
            op, key=key, token=token, delay_ms=delay_ms, renewed_late=renewed,
            cut_at_ms=cut_at_ms, steered=steered,
        )  # fmt: skip

    def _do_slow_grant(
        self, spec: FaultSpec, stop: threading.Event, op: Operation, target: int | None
    ) -> None:
        env, began = self.env, time.monotonic()
        assert target is not None
        ttl = env.ttl_ms / 1000
        delay_ms = env.ttl_ms // 3
        key = self._free_key(stop)
        if key is None:
            raise RuntimeError("no free key with nobody queued for the victim to be granted")
        lease_key = redis_keys(env.prefix, key).lease
        toxic = slow_replies("nemesis-slow-grant", delay_ms)
        cut = one_way_toxic("drop-requests")
        try:
            with self._toxics_in_force(spec, target, [toxic]):
                # The victim's next cycle takes the free key at once (its reply late), and its
                # body is to outlast the cut.
                env.board.set(target, "linger", 2 * env.ttl_ms)
                env.board.set(target, "steer", env.lease_keys.index(key) + 1)
                value = wait_for_value(
                    self._admin, lease_key, ttl + delay_ms / 1000 + env.body_ms / 1000, stop
                )
                if value is None:  # only the slow replies were in force: no cut
                    for field in ("steer", "linger"):
                        env.board.set(target, field, 0)
                    self._finish(op, key=key, delay_ms=delay_ms, granted=False)
                    return
                # Redis just ran the acquire; its reply is on its way, late. Cut the requests
                # now, before the first renewal (due at once for a grant dated from the send):
                # the key expires a ttl after the acquire ran, and a worker steered to it
                # takes it then.
                with self._toxics_in_force(spec, target, [cut]):
                    cut_mono = time.monotonic()
                    self._shun(None)
                    steered = self._steer(target, key)
                    stop.wait(max(0.0, cut_mono + 2 * ttl - time.monotonic()))
        finally:
            self._shun(None)
        self._finish(
            op, key=key, token=owner_token(value), delay_ms=delay_ms,
            cut_at_ms=round((cut_mono - began) * 1000), steered=steered, granted=True,
        )  # fmt: skip

    def _free_key(self, stop: threading.Event) -> str | None:
        """A run key that is free with nobody queued for it (tried in a seeded order), shunned
        from now on by every worker, the victim too (only a cycle the nemesis steers there takes
        it: a cycle of the victim's own choosing would take it before the fault is set up):
        still free a body's length after the shun (a cycle that had picked it before is done),
        or the next is tried. None when every key was busy (nothing is left shunned)."""
        env = self.env
        settle = min(0.1, 2 * env.body_ms / 1000 + 0.01)
        for key in env.rng.sample(env.lease_keys, len(env.lease_keys)):
            keys = redis_keys(env.prefix, key)
            if self._admin.exists(keys.lease) or self._admin.zcard(keys.waiters):
                continue
            self._shun(key)
            stop.wait(settle)
            if not (self._admin.exists(keys.lease) or self._admin.zcard(keys.waiters)):
                return key
            self._shun(None)
        return None

    def _hold_free_key(
        self, ttl_ms: int, stop: threading.Event
    ) -> tuple[LeaseManager, Lease] | None:
        """Take, with the library, a lease on a ``_free_key`` (shunned by every worker): the
        manager and the lease, or None when no key was free or it was taken first (nothing is
        left shunned)."""
        env = self.env
        key = self._free_key(stop)
        if key is None:
            return None
        manager = LeaseManager(self._admin, prefix=env.prefix, fencing=env.fencing)
        lease = manager.acquire(key, ttl_ms=ttl_ms).lease
        if lease is not None and not self._admin.zcard(redis_keys(env.prefix, key).waiters):
            return manager, lease
        if lease is not None:
            lease.release()
        self._shun(None)
        manager.close()
        return None

    def _shun(self, key: str | None) -> None:
        """Have every worker shun ``key`` in its new cycles (None: none); a steered cycle goes
        to its key all the same."""
        env = self.env
        index = 0 if key is None else env.lease_keys.index(key) + 1
        for worker in range(env.board.workers):
            env.board.set(worker, "shun", index)

    def _do_slow_handoff(
        self, spec: FaultSpec, stop: threading.Event, op: Operation, target: int | None
    ) -> None:
        env, began = self.env, time.monotonic()
        assert target is not None
        ttl = env.ttl_ms / 1000
        delay_ms = env.ttl_ms // 3
        held = self._hold_free_key(4 * env.ttl_ms, stop)
        if held is None:
            raise RuntimeError("no free key with nobody queued for the nemesis to hold")
        manager, lease = held
        key, keys = lease.key, redis_keys(env.prefix, lease.key)
        slow, cut = slow_replies("nemesis-slow-handoff", delay_ms), one_way_toxic("drop-requests")
        handed: int | None = None
        steered = None
        released_mono: float | None = None
        try:
            # The victim's next cycle waits for the key: its refused acquire queues it. Its body
            # is to outlast the key's expiry, and it polls rarely (every ttl or so): it is
            # waiting for the release's message, not in a poll, when the message comes.
            env.board.set(target, "linger", 2 * env.ttl_ms)
            env.board.set(target, "retry", env.ttl_ms)
            env.board.set(target, "steer", env.lease_keys.index(key) + 1)
            waiter = wait_for_one_waiter(self._admin, keys, ttl + env.body_ms / 1000, stop)
            if waiter is None:
                for field in ("steer", "linger", "retry"):
                    env.board.set(target, field, 0)
                self._finish(op, key=key, delay_ms=delay_ms, queued=False)
                return
            owner, direct = waiter
            with self._toxics_in_force(spec, target, [slow, cut]):
                # The release hands the key to the victim (a new token, the key's TTL
                # counted from now) and publishes the grant, which reaches the victim ttl/3
                # late; no request of the victim reaches Redis from now on, so the key
                # expires a ttl after the release. A deadline counted from the message's
                # arrival outlives it by the delay; the one counted from the victim's
                # queueing send does not.
                released_mono = time.monotonic()
                lease.release()
                value = self._admin.get(keys.lease)
                if value is not None and str(value).endswith(":" + owner):
                    handed = owner_token(value)
                self._shun(None)
                steered = self._steer(target, key)  # polls for the key when it expires
                stop.wait(max(0.0, released_mono + 2 * ttl - time.monotonic()))
        finally:
            self._shun(None)
            if released_mono is None:
                lease.release()
            manager.close()
        self._finish(
            op, key=key, delay_ms=delay_ms, queued=True, direct=direct, handed=handed is not None,
            token=handed, released_ms=round((released_mono - began) * 1000), steered=steered,
        )  # fmt: skip

    # -- healing -------------------------------------------------------------------------------

    def _take(self, counts: dict[int, int], key: int, first: Callable[[], None]) -> None:
        """One more fault holds ``key`` (a pid, a proxy): ``first()`` when it is the first."""
        with self._lock:
            if not counts.get(key):
                first()
            counts[key] = counts.get(key, 0) + 1

    def _give_back(self, counts: dict[int, int], key: int, last: Callable[[], None]) -> None:
        """One fault no longer holds ``key``: ``last()`` when it was the last."""
        with self._lock:
            left = counts.get(key, 0) - 1
            if left > 0:
                counts[key] = left
                return
            counts.pop(key, None)
            last()

    def _resume_worker(self, pid: int) -> None:
        """One pause of ``pid`` ended: SIGCONT when it was the last."""

        def resume() -> None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)

        self._give_back(self._paused_pids, pid, resume)

    def _resume_redis(self, *, all_pauses: bool = False) -> bool:
        """One pause of Redis ended (every one with ``all_pauses``): SIGCONT when it was the
        last. True when a restart had already replaced the stopped process."""
        server = self.env.redis_server
        with self._redis_lock:
            if self._redis_pauses == 0:
                return False
            self._redis_pauses = 0 if all_pauses else self._redis_pauses - 1
            replaced = self._redis_paused_pid is None
            if self._redis_pauses == 0:
                process = None if server is None else server.process
                if not replaced and process is not None and process.pid == self._redis_paused_pid:
                    assert server is not None
                    server.resume()
                self._redis_paused_pid = None
            return replaced

    def _enable_proxy(self, target: int) -> None:
        """One partition of ``target``'s proxy ended: enable it when it was the last."""
        self._give_back(self._disabled, target, self._proxy(target).enable)

    def _remove_toxics(self, toxics: Sequence[tuple[int, str]]) -> None:
        for target, name in toxics:
            with self._lock:
                if (target, name) in self._toxics:
                    with contextlib.suppress(Exception):
                        self._proxy(target).destroy_toxic(name)
                    self._toxics.discard((target, name))

    def _reset_clocks(self) -> None:
        for worker in range(self.env.board.workers):
            self.env.board.wall_offsets[worker] = 0.0

    def heal_all(self) -> None:
        """Resume paused workers and Redis, re-enable proxies, remove toxics and nftables rules,
        set the wall clocks right: whatever any fault left in force. Idempotent; every step is
        tried even if an earlier one fails."""
        with contextlib.suppress(Exception):
            self._resume_redis(all_pauses=True)
        for pid in list(self._paused_pids):
            self._paused_pids[pid] = 1
            with contextlib.suppress(Exception):
                self._resume_worker(pid)
        for target in list(self._disabled):
            self._disabled[target] = 1
            with contextlib.suppress(Exception):
                self._enable_proxy(target)
        with contextlib.suppress(Exception):
            self._remove_toxics(list(self._toxics))
        with contextlib.suppress(Exception):
            self._firewall.heal_all()
        with contextlib.suppress(Exception):
            self._reset_clocks()
        if self._topology is not None:
            self._topology.heal_all()

    def close(self) -> None:
        """Heal and close the admin connection."""
        self.heal_all()
        with contextlib.suppress(Exception):
            self._admin.close()
