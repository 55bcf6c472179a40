"""The harness's resources without servers: SQLite files and the memory resource's process.

Each kind is driven by two real leases of one key (an old holder whose lease expired on a fake
clock, and the new holder) and shows what the workload records: the value a read returns, a
write's acceptance, a refusal's last accepted token, one counter per key. The list-append store
records its transactions. PostgreSQL and Redis: tests/live/test_resources_live.py.
"""

from __future__ import annotations

import json
import multiprocessing
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
from test_fencing_model import FakeLease

from fencedlease import Lease, LeaseManager, MemoryBackend, StaleTokenError
from fencedlease.testing import FakeClock
from fencedlease_lab.harness.history import HistoryWriter, read_history
from fencedlease_lab.harness.resource_spec import MIXED_KINDS
from fencedlease_lab.harness.resources import (
    RESOURCES,
    ResourceSpec,
    open_store,
    prepare_resource,
    read_final_counter,
    read_final_counters,
)
from fencedlease_lab.harness.resources_memory import (
    LeaseView,
    MemoryCounters,
    start_memory_resource,
)

LOCAL = ("sqlite", "sqlite-rows", "sqlite-strict", "sqlite-append", "memory", "memory-strict")


def test_every_kind_is_offered() -> None:
    assert RESOURCES == (
        "mixed", "sqlite", "redis", "postgres", "sqlite-rows", "postgres-rows", "sqlite-strict",
        "redis-strict", "sqlite-append", "postgres-append", "memory", "memory-strict",
    )  # fmt: skip


class Leases:
    """Two holders of ``key`` in turn: ``old`` (expired) and ``new``; ``other`` holds ``k2``."""

    def __init__(self) -> None:
        self.clock = FakeClock()
        self.manager = LeaseManager(MemoryBackend(clock=self.clock), clock=self.clock)
        self.old: Lease = self.manager.acquire("k", ttl_ms=1_000).lease  # type: ignore[assignment]
        self.clock.advance(2_000)
        self.new: Lease = self.manager.acquire("k", ttl_ms=60_000).lease  # type: ignore[assignment]
        self.other: Lease = self.manager.acquire("k2", ttl_ms=60_000).lease  # type: ignore[assignment]


@pytest.fixture
def leases() -> Iterator[Leases]:
    held = Leases()
    yield held
    held.manager.close()


@pytest.fixture
def spec_of(tmp_path: Path) -> Iterator[Any]:
    managers: list[Any] = []

    def make(kind: str) -> ResourceSpec:
        if kind.startswith("memory"):
            spec, manager = start_memory_resource(
                multiprocessing.get_context("spawn"), kind, "check-counter"
            )
            managers.append(manager)
            return spec
        return ResourceSpec(kind, str(tmp_path / f"{kind}.sqlite3"))  # type: ignore[arg-type]

    yield make
    for manager in managers:
        manager.shutdown()


@pytest.mark.parametrize("kind", LOCAL)
def test_a_stale_holder_is_refused_and_each_key_has_its_counter(
    kind: str, spec_of: Any, leases: Leases
) -> None:
    spec = spec_of(kind)
    prepare_resource(spec)
    store = open_store(spec)
    try:
        assert leases.old.fencing_token == 1
        assert leases.new.fencing_token == 2
        assert store.read(leases.old, fenced=True) == 0
        store.write(1, leases.old, fenced=True)
        assert store.read(leases.new, fenced=True) == 1
        with pytest.raises(StaleTokenError) as refused:
            store.write(7, leases.old, fenced=True)
        assert refused.value.token == 1
        assert refused.value.last_token == 2
        with pytest.raises(StaleTokenError) as refused_read:
            store.read(leases.old, fenced=True)
        assert refused_read.value.last_token == 2
        store.write(2, leases.new, fenced=True)
        assert store.read(leases.other, fenced=True) == 0  # another key, another counter
        store.write(5, leases.other, fenced=True, key="k2")
        assert store.finals() == {"k": 2, "k2": 5}
    finally:
        store.close()
    assert read_final_counters(spec) == {"k": 2, "k2": 5}
    assert read_final_counter(spec) == 7


@pytest.mark.parametrize("kind", LOCAL)
def test_a_duplicate_grant_is_refused(kind: str, spec_of: Any) -> None:
    """After a rollback of the lease counter two leases can hold the same token: the second
    one's first access is refused, while the first lease's own write after its read lands."""
    spec = spec_of(kind)
    prepare_resource(spec)
    store = open_store(spec)
    first, twin = FakeLease("k", "owner-one", 13), FakeLease("k", "owner-two", 13)
    try:
        assert store.read(first, fenced=True) == 0
        with pytest.raises(StaleTokenError) as refused:
            store.read(twin, fenced=True)
        assert refused.value.last_token == 13
        with pytest.raises(StaleTokenError):
            store.write(5, twin, fenced=True)
        store.write(1, first, fenced=True)
        assert store.finals() == {"k": 1}
    finally:
        store.close()


@pytest.mark.parametrize("kind", LOCAL)
def test_plain_accesses_check_nothing(kind: str, spec_of: Any, leases: Leases) -> None:
    """The control: unfenced, the stale holder's write lands after the new holder's read."""
    spec = spec_of(kind)
    prepare_resource(spec)
    store = open_store(spec)
    try:
        assert store.read(leases.new, fenced=True) == 0
        assert store.read(leases.old, fenced=False) == 0
        store.write(9, leases.old, fenced=False)
        assert store.read(leases.new, fenced=False) == 9
    finally:
        store.close()


@pytest.mark.parametrize("kind", ["memory", "memory-strict"])
def test_write_fenced_makes_the_write_the_first_access(kind: str, leases: Leases) -> None:
    """In ``write-fenced`` mode the write is the grant's one fenced access (strict or not)."""
    counters = MemoryCounters("c", strict=kind == "memory-strict")
    new, old = LeaseView.of(leases.new), LeaseView.of(leases.old)
    assert counters.read("k", old, False) == ("ok", 0)
    assert counters.write("k", 1, new, True) == ("ok", None)
    refused = counters.write("k", 2, old, True)
    assert refused[:2] == ("stale", 2)
    assert counters.finals() == {"k": 1}


def test_the_strict_resource_accepts_a_token_once() -> None:
    """Strict: a second lease with the same token is refused as strict, the holder's own write
    after its fenced read lands (its fence), a bare equal token is refused."""
    counters = MemoryCounters("c", strict=True)
    one = LeaseView(5, "a" * 16, "k", "p:{k}:fence")
    twin = LeaseView(5, "b" * 16, "k", "p:{k}:fence")
    assert counters.read("k", one, True) == ("ok", 0)
    assert counters.write("k", 3, one, True) == ("ok", None)
    reply = counters.write("k", 4, twin, True)
    assert reply[:2] == ("stale", 5)
    assert "fences strictly" in reply[2]
    assert counters.finals() == {"k": 3}


def test_the_memory_resource_is_shared_by_the_threads_of_its_process(
    spec_of: Any, leases: Leases
) -> None:
    """Two workers (here two threads, each with its own connection, as two processes have) are
    served by two threads of the resource process, on the same FencedResource: one holder's
    read fences the other's write."""
    spec = spec_of("memory")
    first = open_store(spec)
    got: dict[str, Any] = {}

    def other_worker() -> None:
        second = open_store(spec)
        got["thread"] = second.served_by()
        try:
            second.write(1, leases.old, fenced=True)
        except StaleTokenError as exc:
            got["refused"] = exc.last_token
        second.close()

    try:
        assert first.read(leases.new, fenced=True) == 0
        worker = threading.Thread(target=other_worker)
        worker.start()
        worker.join(timeout=30)
        assert got["refused"] == 2
        assert got["thread"] != first.served_by()
        assert first.served_by() == first.served_by()
    finally:
        first.close()


def test_the_lease_view_carries_no_owner_token(leases: Leases) -> None:
    view = LeaseView.of(leases.new)
    assert view.owner_token != leases.new.owner_token
    assert leases.new.owner_token not in repr(view)
    assert view.fencing_token == 2
    assert view.fencing_scope == leases.new.fencing_scope


def test_the_append_store_records_its_transactions(
    tmp_path: Path, spec_of: Any, leases: Leases
) -> None:
    spec = spec_of("sqlite-append")
    prepare_resource(spec)
    store = open_store(spec)
    path = tmp_path / "w0.jsonl"
    with HistoryWriter(path, "w0") as writer:
        store.attach_history(writer)
        assert store.read(leases.old, fenced=True) == 0
        store.write(1, leases.old, fenced=True)
        assert store.read(leases.new, fenced=True) == 1
        assert store.read(leases.old, fenced=False) == 1  # the new holder's txn: abandoned
        with pytest.raises(StaleTokenError):
            store.write(2, leases.old, fenced=True)
        lists = store.lists()
        store.close()
    events = [e for e in read_history(path) if e.op == "txn"]
    summary = [(e.id, e.type, e.outcome, e.token) for e in events]
    assert summary == [
        (0, "invoke", None, 1),
        (0, "ok", "committed", 1),
        (1, "invoke", None, 2),
        (1, "fail", "abandoned", 2),
        (2, "invoke", None, 1),
        (2, "fail", "stale", 1),
    ]
    first = events[1].detail["txn"]
    assert [op[0] for op in first] == ["r"] * (len(first) - len(lists)) + ["append"] * len(lists)
    assert all(op[2] == [] for op in first if op[0] == "r")
    # every list holds exactly the first transaction's appends; the refused one left nothing
    assert lists == {op[1]: [op[2]] for op in first if op[0] == "append"}
    assert events[5].detail["last"] == 2
    assert json.dumps(events[5].detail)  # JSON all the way


def test_a_memory_resource_takes_no_url(tmp_path: Path) -> None:
    """The memory resources live in a process of the run's own: a --resource-url is refused
    before anything is written."""
    from fencedlease_lab.harness.run import CheckConfig, run_check

    out = tmp_path / "out"
    config = CheckConfig(resource="memory-strict", resource_url="127.0.0.1:1", out_dir=out)
    with pytest.raises(ValueError, match=r"^--resource memory-strict runs in a process of the"):
        run_check(config)
    assert not out.exists()


def test_mixed_deals_the_keys_to_its_kinds_in_turn() -> None:
    keys = tuple(f"k{i}" for i in range(16))
    assert MIXED_KINDS == (
        "sqlite", "memory", "redis", "sqlite-rows", "memory-strict", "sqlite-strict",
        "redis-strict",
    )  # fmt: skip
    assert ResourceSpec.dealt(keys, "sqlite") == ("k0", "k7", "k14")
    assert ResourceSpec.dealt(keys, "memory") == ("k1", "k8", "k15")
    assert ResourceSpec.dealt(keys, "redis") == ("k2", "k9")
    assert ResourceSpec.dealt(keys, "sqlite-rows") == ("k3", "k10")
    assert ResourceSpec.dealt(keys, "memory-strict") == ("k4", "k11")
    assert ResourceSpec.dealt(keys, "sqlite-strict") == ("k5", "k12")
    assert ResourceSpec.dealt(keys, "redis-strict") == ("k6", "k13")
    parts = tuple(ResourceSpec(kind, f"t-{kind}") for kind in MIXED_KINDS)
    spec = ResourceSpec("mixed", "", keys=keys, parts=parts)
    assert spec.family == "mixed"
    assert [spec.part(key).kind for key in keys[:8]] == [*MIXED_KINDS, "sqlite"]
    assert spec.part("not-a-run-key").kind == "sqlite"
    alone = ResourceSpec("sqlite", "t")
    assert alone.part("k0") is alone


@pytest.mark.parametrize("kind", ["sqlite", "sqlite-strict"])
def test_the_strict_guard_refuses_a_recheck(kind: str, spec_of: Any, leases: Leases) -> None:
    """``sqlite-strict``: the lease's first access is strict, its own write after its read
    lands, and a recheck (its token once more, strict) is refused and changes nothing; a second
    lease with the same token is refused. ``sqlite`` is not strict and answers no recheck."""
    spec = spec_of(kind)
    prepare_resource(spec)
    store = open_store(spec)
    try:
        assert store.strict_key("k") is (kind == "sqlite-strict")
        assert store.read(leases.new, fenced=True) == 0
        if kind == "sqlite":
            return
        shows_strict_rechecks(store, leases.new)
    finally:
        store.close()


def shows_strict_rechecks(store: Any, holder: Lease) -> None:
    """On a strict store whose fenced read ``holder`` (token 2, key ``k``) has made: a recheck
    is refused before and after its own write (which lands), and a second lease with token 2 is
    refused as strict."""
    assert holder.fencing_token == 2
    assert store.recheck(holder) is False
    assert store.recheck(holder, key="k") is False
    store.write(3, holder, fenced=True)
    assert store.recheck(holder) is False
    with pytest.raises(StaleTokenError) as refused:
        store.read(FakeLease("k", "owner-two", 2), fenced=True)
    assert (refused.value.token, refused.value.last_token) == (2, 2)
    assert store.finals() == {"k": 3}


def test_a_mixed_store_sends_each_key_to_its_kind(
    spec_of: Any, leases: Leases, tmp_path: Path
) -> None:
    """Two keys, one on the SQL guard and one on the memory resource: each access goes to the
    store of its key (the other store never sees it), each refuses the stale holder, and the
    final counters are each part's own."""
    memory = spec_of("memory")
    sql = ResourceSpec("sqlite", str(tmp_path / "mixed.sqlite3"))
    parts = (attrs.evolve(sql, keys=("k",)), attrs.evolve(memory, keys=("k2",)))
    spec = ResourceSpec("mixed", "", keys=("k", "k2"), parts=parts)
    prepare_resource(spec)
    store = open_store(spec)
    try:
        assert store.read(leases.new, fenced=True) == 0
        store.write(4, leases.new, fenced=True)
        with pytest.raises(StaleTokenError) as refused:
            store.write(9, leases.old, fenced=True)
        assert refused.value.last_token == 2
        assert store.read(leases.other, fenced=True) == 0
        store.write(6, leases.other, fenced=True)
    finally:
        store.close()
    assert read_final_counters(spec) == {"k": 4, "k2": 6}
    sql_store, memory_store = open_store(parts[0]), open_store(parts[1])
    try:
        assert sql_store.finals() == {"k": 4}  # k2 never reached the SQL guard
        assert memory_store.finals() == {"k2": 6}  # nor k the memory resource
    finally:
        sql_store.close()
        memory_store.close()
