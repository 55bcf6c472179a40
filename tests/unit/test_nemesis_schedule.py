"""The nemesis runs a schedule: overlapping faults on one proxy compose (one disable, one enable
when the last partition heals; each toxic named by its fault and removed by it), every fault is
recorded with its place in the schedule, and a dead victim is a recorded failure, not a crash.

Proxies are recording fakes and the board is set by hand, so no Redis or Toxiproxy is needed;
no fault here signals a process."""

from __future__ import annotations

import json
import multiprocessing
import threading
import time
import types
from pathlib import Path
from typing import Any

import pytest

from fencedlease_lab.harness.history import HistoryWriter
from fencedlease_lab.harness.nemesis import Nemesis, NemesisEnv
from fencedlease_lab.harness.schedule import PlannedFault, Schedule
from fencedlease_lab.harness.workload import BODY, Board


class FakeProxy:
    """Records what the nemesis asks of a Toxiproxy proxy, in order."""

    def __init__(self, calls: list[tuple[str, str]], name: str) -> None:
        self.calls, self.name = calls, name

    def disable(self) -> None:
        self.calls.append((self.name, "disable"))

    def enable(self) -> None:
        self.calls.append((self.name, "enable"))

    def add_toxic(self, **toxic: Any) -> None:
        self.calls.append((self.name, f"add {toxic['name']}"))

    def destroy_toxic(self, name: str) -> None:
        self.calls.append((self.name, f"destroy {name}"))


def run(
    tmp_path: Path,
    faults: list[PlannedFault],
    alive: bool = True,
    stopped: bool = False,
    **more: Any,
) -> tuple[list[Any], ...]:
    board = Board(multiprocessing.get_context("spawn"), 2)
    for worker in range(2):
        board.set(worker, "pid", 999_999_999)  # never signalled: no pause-holder on a live one
        board.set(worker, "token", 5 + worker)
        board.set_phase(worker, BODY)
    calls: list[tuple[str, str]] = []
    path = tmp_path / "nemesis.jsonl"
    with HistoryWriter(path, "nemesis") as writer:
        env = NemesisEnv(
            writer=writer, board=board, worker_names=["w0", "w1"],
            admin_url="redis://127.0.0.1:1/0", prefix="p", key="k", ttl_ms=1000,
            heartbeat_ms=250, body_ms=100_000,
            proxies={0: FakeProxy(calls, "p0"), 1: FakeProxy(calls, "p1")},
            alive=lambda worker: alive, **more,
        )  # fmt: skip
        schedule = Schedule(0, 2, 1000, 250, 100_000, 0, 0, 1000, tuple(faults))
        nemesis = Nemesis(env, schedule)
        stop = threading.Event()
        if stopped:
            stop.set()  # the run ended before the schedule began
        nemesis.start(time.monotonic(), time.monotonic() + 60, stop)
        nemesis.join(timeout_s=30)
        nemesis.close()
    events = [json.loads(line) for line in path.read_text("utf-8").splitlines()]
    return calls, events, nemesis.done, [nemesis.error], nemesis.skipped


def test_overlapping_faults_on_one_proxy_compose(tmp_path: Path) -> None:
    faults = [
        PlannedFault(0, "partition", 0, 0, 0, 800, 0, True),
        PlannedFault(1, "reset-peer", 0, 0, 100, 200, 100, False),
        PlannedFault(2, "partition", 0, 0, 300, 900, 300, False),
        PlannedFault(3, "timeout", 1, 0, 400, 100, 400, False),
    ]
    calls, events, done, (error,), _ = run(tmp_path, faults)
    assert error is None
    p0 = [what for proxy, what in calls if proxy == "p0"]
    assert p0 == ["disable", "add nemesis-reset-peer-1", "destroy nemesis-reset-peer-1", "enable"]
    p1 = sorted(what for proxy, what in calls if proxy == "p1")
    assert p1 == sorted(
        f"{verb} nemesis-timeout-{stream}-3"
        for verb in ("add", "destroy")
        for stream in ("upstream", "downstream")
    )
    assert sorted(done) == ["partition", "partition", "reset-peer", "timeout"]
    invokes = {e["detail"]["index"]: e for e in events if e["type"] == "invoke"}
    oks = {e["detail"]["index"]: e for e in events if e["type"] == "ok"}
    assert sorted(invokes) == sorted(oks) == [0, 1, 2, 3]
    assert [invokes[i]["detail"]["target"] for i in range(4)] == ["w0", "w0", "w0", "w1"]
    assert invokes[0]["detail"]["aimed"] is True  # the lead found its victim in its body
    assert invokes[0]["token"] == 5
    assert "aimed" not in invokes[1]["detail"]
    # the second partition began while the first was in force, and the proxy stayed disabled
    assert invokes[2]["mono"] < oks[0]["mono"] < oks[2]["mono"]


def test_a_dead_victim_is_a_recorded_failure(tmp_path: Path) -> None:
    """A victim whose process is gone: the lead does not wait for it, a pause of it fails with
    a reason (no signal is sent), a partition of its proxy still runs; the nemesis goes on."""
    faults = [
        PlannedFault(0, "partition", 0, 0, 0, 300, 0, True),
        PlannedFault(1, "pause-holder", 1, 0, 100, 300, 100, False),
    ]
    calls, events, done, (error,), _ = run(tmp_path, faults, alive=False)
    assert error is None
    assert [what for _, what in calls] == ["disable", "enable"]
    pause = next(e for e in events if e["detail"].get("index") == 1 and e["type"] != "invoke")
    assert pause["type"] == "fail"
    assert pause["detail"]["error"] == "RuntimeError: worker w1 is not running"
    assert pause["detail"]["alive"] is False
    lead = next(e for e in events if e["detail"].get("index") == 0 and e["type"] == "invoke")
    assert lead["detail"]["aimed"] is False
    assert lead["detail"]["aim_ms"] < 1000
    assert sorted(done) == ["partition", "pause-holder"]


def test_one_way_cuts_compose_with_the_other_toxics_of_their_proxy(tmp_path: Path) -> None:
    """drop-replies and drop-requests name their toxic by their fault, remove only it, and last
    their whole duration though the watch of the key in Redis ends at once (no Redis here)."""
    faults = [
        PlannedFault(0, "drop-replies", 0, 0, 0, 400, 0, True),
        PlannedFault(1, "timeout", 0, 0, 100, 100, 100, False),
        PlannedFault(2, "drop-requests", 1, 0, 150, 100, 150, False),
    ]
    calls, events, done, (error,), _ = run(tmp_path, faults)
    assert error is None
    p0 = [what for proxy, what in calls if proxy == "p0"]
    # each toxic is added, then destroyed, by its own fault alone; how the two faults' calls
    # interleave is the threads' timing, not the property (a busy machine delays either)
    toxics = [
        "nemesis-drop-replies-0",
        "nemesis-timeout-upstream-1",
        "nemesis-timeout-downstream-1",
    ]
    assert sorted(p0) == sorted(f"{verb} {name}" for verb in ("add", "destroy") for name in toxics)
    for name in toxics:
        assert p0.index(f"add {name}") < p0.index(f"destroy {name}")
    p1 = [what for proxy, what in calls if proxy == "p1"]
    assert p1 == ["add nemesis-drop-requests-2", "destroy nemesis-drop-requests-2"]
    assert sorted(done) == ["drop-replies", "drop-requests", "timeout"]
    invokes = {e["detail"]["index"]: e for e in events if e["type"] == "invoke"}
    oks = {e["detail"]["index"]: e for e in events if e["type"] == "ok"}
    assert oks[0]["detail"]["stream"] == "downstream"
    assert oks[2]["detail"]["stream"] == "upstream"
    assert oks[0]["detail"]["owned_for_ms"] is None  # the watch saw nothing: no Redis
    assert oks[0]["mono"] - invokes[0]["mono"] >= 0.4


def test_resource_link_faults_every_data_link_in_three_phases(tmp_path: Path) -> None:
    """resource-link puts late replies, then a cut, then resets on the proxies to the resource
    servers, one phase after the other, and leaves the lease proxies alone."""
    calls: list[tuple[str, str]] = []
    links = [FakeProxy(calls, "d0"), FakeProxy(calls, "d1")]
    faults = [PlannedFault(0, "resource-link", None, 0, 0, 300, 0, False)]
    lease_calls, events, done, (error,), _ = run(tmp_path, faults, resource_proxies=links)
    assert (error, lease_calls, done) == (None, [], ["resource-link"])
    phases = ["nemesis-data-late-0", "nemesis-data-cut-0", "nemesis-data-reset-0"]
    for proxy, place in (("d0", 0), ("d1", 1)):
        assert [what for name, what in calls if name == proxy] == [
            f"{verb} {phase}-{place}" for phase in phases for verb in ("add", "destroy")
        ]
    (ok,) = [e for e in events if e["type"] == "ok"]
    assert ok["detail"]["toxics"] == ["latency", "timeout", "reset_peer"]


def test_a_kill_of_a_dead_victim_is_a_recorded_failure(tmp_path: Path) -> None:
    """kill-holder of a worker whose process is gone fails with the reason: no signal, no
    restart."""
    restarted: list[int] = []
    faults = [
        PlannedFault(0, "partition", 0, 0, 0, 300, 0, True),
        PlannedFault(1, "kill-holder", 1, 0, 100, 100, 100, False),
    ]
    calls, events, done, (error,), _ = run(
        tmp_path, faults, alive=False, restart_worker=restarted.append,
        history_paths=[str(tmp_path / "h0"), str(tmp_path / "h1")],
    )  # fmt: skip
    assert error is None
    kill = next(e for e in events if e["detail"].get("index") == 1 and e["type"] != "invoke")
    assert kill["type"] == "fail"
    assert kill["detail"]["error"] == "RuntimeError: worker w1 is not running"
    assert restarted == []
    assert calls == [("p0", "disable"), ("p0", "enable")]
    assert sorted(done) == ["kill-holder", "partition"]


def test_every_fault_the_run_ended_before_is_named_skipped(tmp_path: Path) -> None:
    """Not only the first episode that did not fit: each fault of every later episode too."""
    faults = [
        PlannedFault(0, "partition", 0, 0, 0, 800, 0, True),
        PlannedFault(1, "latency", 1, 0, 100, 200, 100, False),
        PlannedFault(2, "timeout", 1, 1, 0, 800, 5_000, True),
        PlannedFault(3, "clock", None, 2, 0, 800, 9_000, True),
    ]
    calls, _events, done, (error,), skipped = run(tmp_path, faults, stopped=True)
    assert error is None
    assert (calls, done) == ([], [])
    assert skipped == [
        ("partition", "the run ended first"),
        ("latency", "the run ended first"),
        ("timeout", "the run ended first"),
        ("clock", "the run ended first"),
    ]


class FakeRedisServer:
    """A redis-server the nemesis can kill, start, pause and resume; it records the calls. Its
    ``start`` waits until another fault is blocked on the nemesis' Redis lock (the race where a
    pause begins while a restart is under way)."""

    def __init__(self, calls: list[str], contended: threading.Event) -> None:
        self.calls, self.contended = calls, contended
        self.process = types.SimpleNamespace(pid=4242)  # never signalled: the fake is called
        self.appendonly = True
        self.paused = False

    def kill(self) -> None:
        self.calls.append("kill")

    def start(self) -> None:
        assert self.contended.wait(10), "the redis-pause never waited for the restart's lock"
        self.calls.append("start")

    def pause(self) -> None:
        self.paused = True
        self.calls.append("pause")

    def resume(self) -> None:
        self.paused = False
        self.calls.append("resume")


class NotingLock:
    """A lock that sets ``contended`` when a thread finds it held and waits."""

    def __init__(self, contended: threading.Event) -> None:
        self.lock, self.contended = threading.Lock(), contended

    def __enter__(self) -> None:
        if not self.lock.acquire(blocking=False):
            self.contended.set()
            self.lock.acquire()

    def __exit__(self, *exc: object) -> None:
        self.lock.release()


def test_a_restart_is_recorded_done_when_a_pause_stops_redis_right_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A redis-pause that begins while a restart holds the Redis lock stops the new process as
    soon as the restart lets go: the restart reads the fencing counter before that (a read
    after would time out on the stopped server and record a restart that happened as failed),
    and an unanswered read is a missing figure, never a failed fault."""
    calls: list[str] = []
    contended = threading.Event()
    server = FakeRedisServer(calls, contended)
    reads: list[tuple[bool, bool]] = []

    def counter(self: Nemesis) -> int | None:
        reads.append((self._redis_lock.lock.locked(), server.paused))  # type: ignore[attr-defined]
        return 7

    monkeypatch.setattr(Nemesis, "_counter", counter)
    original = Nemesis.__init__

    def init(self: Nemesis, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        self._redis_lock = NotingLock(contended)  # type: ignore[assignment]

    monkeypatch.setattr(Nemesis, "__init__", init)
    faults = [
        PlannedFault(0, "redis-restart-aof", None, 0, 0, 0, 0, False),
        PlannedFault(1, "redis-pause", None, 0, 20, 300, 20, False),
    ]
    _, events, done, (error,), _ = run(tmp_path, faults, redis_server=server)
    assert error is None
    assert calls == ["kill", "start", "pause", "resume"]
    # Before the kill and after the start, under the lock, so the pause waits: never paused.
    assert reads == [(True, False), (True, False)]
    restart = next(e for e in events if e["detail"].get("index") == 0 and e["type"] != "invoke")
    assert restart["type"] == "ok"
    assert (restart["detail"]["counter_before"], restart["detail"]["counter_after"]) == (7, 7)
    assert "counter_unread" not in restart["detail"]
    assert sorted(done) == ["redis-pause", "redis-restart-aof"]


def test_an_unanswered_counter_read_is_a_missing_figure(tmp_path: Path) -> None:
    """The admin connection answers nothing (port 1): the restart still happened and is
    recorded done, with no counter figures and the errors that kept them."""
    calls: list[str] = []
    contended = threading.Event()
    contended.set()
    server = FakeRedisServer(calls, contended)
    faults = [PlannedFault(0, "redis-restart-aof", None, 0, 0, 0, 0, False)]
    _, events, done, (error,), _ = run(tmp_path, faults, redis_server=server)
    assert error is None
    assert calls == ["kill", "start"]
    restart = next(e for e in events if e["type"] != "invoke" and e["op"] == "fault")
    assert restart["type"] == "ok"
    assert (restart["detail"]["counter_before"], restart["detail"]["counter_after"]) == (None, None)
    unread = restart["detail"]["counter_unread"]
    assert len(unread) == 2
    assert all(error.startswith("ConnectionError: ") for error in unread), unread
    assert done == ["redis-restart-aof"]
