"""Stale writers on purpose: a stale cycle's write, made late by the worker's late writer,
is refused once a newer holder used the key and accepted when nobody did, its hold ended
either way; and the checker counts the writes of holders that had lost their lease."""

from __future__ import annotations

import multiprocessing
import random
import time
from pathlib import Path
from typing import Any

import attrs
import pytest

from fencedlease import LeaseManager, MemoryBackend, StaleTokenError
from fencedlease_lab.harness.checker import check_history
from fencedlease_lab.harness.history import Event, HistoryWriter, read_history
from fencedlease_lab.harness.recorder import Recorder
from fencedlease_lab.harness.resources import ResourceSpec, open_store
from fencedlease_lab.harness.resources_memory import start_memory_resource
from fencedlease_lab.harness.workload import IDLE, Board, Cycle, WorkerConfig
from fencedlease_lab.harness.workload.stale import LateWrites
from fencedlease_lab.harness.workload.sync_worker import _stale_cycle


class FencedCounter:
    """A counter fenced as the resources are: an access with a token below the last one seen
    is refused, any other moves the fence."""

    def __init__(self) -> None:
        self.value, self.fence = 0, 0

    def _fence(self, lease: Any) -> None:
        token = lease.fencing_token
        if token < self.fence:
            raise StaleTokenError("counter", token, self.fence)
        self.fence = token

    def read(self, lease: Any, fenced: bool) -> int:
        self._fence(lease)
        return self.value

    def write(self, value: int, lease: Any, fenced: bool) -> None:
        self._fence(lease)
        self.value = value

    def close(self) -> None:
        pass


def config() -> WorkerConfig:
    return WorkerConfig(
        index=1, name="w1", redis_url="redis://unused", prefix="p", keys=("k",), mode="fenced",
        resource=ResourceSpec("sqlite", "unused"), history_path="unused", ttl_ms=1000,
        heartbeat_ms=250, body_ms=10, wait_ms=100, socket_timeout_ms=500, duration_s=1.0,
        seed=3, stale_share=0.5,
    )  # fmt: skip


def put_off_and_lost(
    leases: LeaseManager,
    backend: MemoryBackend,
    recorder: Recorder,
    board: Board,
    store: Any,
    late: LateWrites,
) -> None:
    """A stale cycle on ``k``: granted, read from ``store``, its write put off in ``late``, its
    lease lost (force-released)."""
    cycle = Cycle(config(), board, recorder, random.Random(1), stale=True)
    lease = leases.acquire("k", ttl_ms=60_000).lease
    assert lease is not None
    cycle.granted(lease.fencing_token)
    late.put_off(cycle, lease, cycle.read(store, lease), time.monotonic())
    assert late.wanted() == "k"
    backend.force_release("k")


def late_write(tmp_path: Path, rival: bool) -> tuple[list[Event], Board, LateWrites]:
    """A stale cycle on ``k``: granted, read, its write put off, its lease lost
    (force-released); with ``rival`` a newer holder's read of the counter; then the writes put
    off on ``k`` made, as the newer holder's cycle makes them right after its read."""
    board = Board(multiprocessing.get_context("spawn"), 2)
    backend, counter = MemoryBackend(), FencedCounter()
    path = tmp_path / "h.jsonl"
    late = LateWrites(config())
    with HistoryWriter(path, "w1") as writer, LeaseManager(backend) as leases:
        put_off_and_lost(leases, backend, Recorder(writer), board, counter, late)
        if rival:
            newer = leases.acquire("k", ttl_ms=60_000).lease
            counter.read(newer, fenced=True)
        late.write(counter, "k")
    return read_history(path), board, late


@pytest.mark.parametrize(
    ("rival", "write", "hold"),
    [
        (True, ("fail", "stale"), ("fail", "stale")),
        (False, ("ok", "accepted"), ("fail", "expired")),
    ],
)
def test_a_late_write_is_refused_after_a_newer_holder_and_accepted_without_one(
    tmp_path: Path, rival: bool, write: tuple[str, str], hold: tuple[str, str]
) -> None:
    """The write put off is refused once a newer holder used the key, accepted when nobody did;
    the hold ends ``stale`` or ``expired``; the cycle failed fast and never showed on the
    board."""
    events, board, late = late_write(tmp_path, rival)
    ends = {e.op: (e.type, e.outcome) for e in events if e.type != "invoke"}
    assert ends["write"] == write
    assert ends["hold"] == hold
    acquire = next(e for e in events if e.op == "acquire")
    assert acquire.detail == {"wait_ms": 0, "stale_writer": True}
    assert board.get(1, "phase") == IDLE
    assert late.wanted() is None


def test_a_write_put_off_waits_until_due_and_drain_makes_it(tmp_path: Path) -> None:
    """A write put off is not made before it is due (the stale lease's ttl and a tenth of the
    run's ttl at least after the grant); draining makes it once due."""
    counter = FencedCounter()
    board = Board(multiprocessing.get_context("spawn"), 2)
    late = LateWrites(config())
    with HistoryWriter(tmp_path / "h.jsonl", "w1") as writer, LeaseManager(MemoryBackend()) as m:
        cycle = Cycle(config(), board, Recorder(writer), random.Random(1), stale=True)
        lease = m.acquire("k", ttl_ms=60_000).lease
        assert lease is not None
        cycle.granted(lease.fencing_token)
        granted = time.monotonic()
        late.put_off(cycle, lease, 4, granted)
        late.write(counter)  # not due yet: 200 ms + 100 ms at least
        assert counter.value == 0
        late.drain(counter)
        assert counter.value == 5
        assert time.monotonic() - granted >= 0.3


def history(write_at: float, write: str, *, rival_at: float = 0.5, rollback: bool) -> list[Event]:
    """w0 granted ``k`` (token 1) at 0.1 s, w1 (token 2) at ``rival_at``; w0's write invoked at
    ``write_at`` completes ``write``; with ``rollback``, a restart without persistence at
    0.05 s."""
    events: list[Event] = []

    def put(process: str, op: str, kind: str, at: float, **fields: Any) -> None:
        events.append(Event(process, op, kind, 1000 + at, at, **fields))  # type: ignore[arg-type]

    put("run", "start", "info", 0.0, detail={"ttl_ms": 1000, "heartbeat_ms": 250})
    if rollback:
        put("nemesis", "fault", "invoke", 0.05, id=0, detail={"fault": "redis-restart-nopersist"})
        put("nemesis", "fault", "ok", 0.06, id=0, detail={"fault": "redis-restart-nopersist"})
    for process, token, at in (("w0", 1, 0.1), ("w1", 2, rival_at)):
        put(process, "acquire", "invoke", at - 0.01, id=0, key="k")
        put(process, "acquire", "ok", at, id=0, key="k", token=token, outcome="granted")
    outcome = {"ok": "accepted", "fail": "stale"}[write]
    put("w0", "write", "invoke", write_at, id=1, grant=0, key="k", token=1, value=1)
    put("w0", "write", write, write_at + 0.01, id=1, grant=0, key="k", token=1, value=1,
        outcome=outcome)  # fmt: skip
    put("run", "stop", "info", 2.0)
    return sorted(events, key=lambda e: e.mono)


@pytest.mark.parametrize(
    ("write_at", "write", "rollback", "counted"),
    [
        (0.8, "fail", False, {"refused": 1, "accepted": 0}),
        (0.8, "ok", False, {"refused": 0, "accepted": 1}),
        (0.3, "ok", False, {"refused": 0, "accepted": 0}),  # before the newer grant: still held
        (0.8, "fail", True, {"refused": 0, "accepted": 0}),  # the rollback's, not a stale holder's
    ],
)
def test_the_stale_holders_writes_are_counted(
    write_at: float, write: str, rollback: bool, counted: dict[str, int]
) -> None:
    """A write invoked after another lease of its key with a larger token was granted is a
    stale holder's, counted refused or accepted; none once a restart without persistence has
    begun."""
    stats = check_history(history(write_at, write, rollback=rollback)).stats
    assert {k: stats[f"stale_writes_{k}"] for k in counted} == counted


def test_the_cycle_after_a_stale_one_waits_for_its_key(tmp_path: Path) -> None:
    """A cycle told the key of a write put off, stale or not, takes that key and waits for it
    (a ttl/2), so that it follows the stale lease and its read comes before the late write."""
    board = Board(multiprocessing.get_context("spawn"), 2)
    two = attrs.evolve(config(), keys=("a", "b"), wait_share=0.0)
    with HistoryWriter(tmp_path / "h.jsonl", "w1") as writer:
        recorder = Recorder(writer)
        picked = [Cycle(two, board, recorder, random.Random(n)) for n in range(8)]
        told = Cycle(two, board, recorder, random.Random(1), prefer="b")
        stale = Cycle(two, board, recorder, random.Random(1), stale=True, prefer="b")
    assert {(c.key, c.wait_ms) for c in picked} == {("a", 0), ("b", 0)}
    assert (told.key, told.wait_ms) == ("b", 500)
    assert (stale.key, stale.wait_ms) == ("b", 500)


def test_a_stale_cycle_told_a_key_waits_for_the_lease_there_to_run_out(tmp_path: Path) -> None:
    """A stale cycle that follows another on the same key is granted once the earlier stale
    lease ran out, instead of failing fast (and spinning) while it lasts."""
    board = Board(multiprocessing.get_context("spawn"), 2)
    late = LateWrites(config())
    with HistoryWriter(tmp_path / "h.jsonl", "w1") as writer, LeaseManager(MemoryBackend()) as m:
        recorder = Recorder(writer)
        m.acquire("k", ttl_ms=150)  # the earlier stale lease, never released
        cycle = Cycle(config(), board, recorder, random.Random(1), stale=True, prefer="k")
        _stale_cycle(cycle, m, FencedCounter(), late)
    acquires = [e for e in read_history(tmp_path / "h.jsonl") if e.op == "acquire"]
    assert [(e.type, e.outcome) for e in acquires] == [("invoke", None), ("ok", "granted")]
    assert late.wanted() == "k"


@pytest.mark.parametrize(("stale", "violations"), [(False, 1), (True, 0)])
def test_a_stale_writer_cut_off_need_not_be_told(stale: bool, violations: int) -> None:
    """A holder cut off by a partition whose body runs on past ttl + one heartbeat must be told
    (property c); a stale writer's lease, which nothing renews, is not judged so."""
    events: list[Event] = []

    def put(process: str, op: str, kind: str, at: float, **fields: Any) -> None:
        events.append(Event(process, op, kind, 1000 + at, at, **fields))  # type: ignore[arg-type]

    put("run", "start", "info", 0.0, detail={"ttl_ms": 1000, "heartbeat_ms": 250})
    detail = {"wait_ms": 0, "stale_writer": True} if stale else {"wait_ms": 0}
    put("w0", "acquire", "invoke", 0.09, id=0, key="k", detail=detail)
    put("w0", "acquire", "ok", 0.1, id=0, key="k", token=1, outcome="granted")
    put("nemesis", "fault", "invoke", 0.2, id=0, detail={"fault": "partition", "target": "w0"})
    put("nemesis", "fault", "ok", 2.2, id=0, detail={"fault": "partition", "target": "w0"})
    put("w0", "hold", "fail", 3.0, id=0, grant=0, key="k", token=1, outcome="expired",
        detail={"body_end": 1003.0})  # fmt: skip
    put("run", "stop", "info", 4.0)
    report = check_history(sorted(events, key=lambda e: e.mono))
    found = report.property("loss-reported").violations
    assert len(found) == violations, report.explain()


def test_a_late_write_races_the_newer_holders_read_on_the_memory_resource(tmp_path: Path) -> None:
    """On the memory resource the write put off races the newer holder's read, held inside its
    accept until the read passed: it is refused with the newer token and nothing is written."""
    ctx = multiprocessing.get_context("spawn")
    spec, manager = start_memory_resource(ctx, "memory", "c")
    store, board, backend = open_store(spec), Board(ctx, 2), MemoryBackend()
    path = tmp_path / "h.jsonl"
    late = LateWrites(config())
    try:
        with HistoryWriter(path, "w1") as writer, LeaseManager(backend) as leases:
            recorder = Recorder(writer)
            put_off_and_lost(leases, backend, recorder, board, store, late)
            cycle = Cycle(config(), board, recorder, random.Random(2), prefer="k")
            newer = leases.acquire("k", ttl_ms=60_000).lease
            assert newer is not None
            cycle.granted(newer.fencing_token)
            assert late.read(store, cycle, newer) == 0
            cycle.finish()
        assert store.finals() == {}
    finally:
        store.close()
        manager.shutdown()
    events = read_history(path)
    write = next(e for e in events if e.op == "write" and e.type != "invoke")
    assert (write.type, write.outcome, write.detail["last"]) == ("fail", "stale", 2)
    assert late.wanted() is None
