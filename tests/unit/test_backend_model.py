"""The model-based contract check (``contract.harness``) over MemoryBackend and SqliteBackend on a
fake clock: 200 examples each."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from contract.harness import (
    Store,
    Timing,
    fake_timing,
    machine_class,
    memory_store,
    run_machine,
    sqlite_store,
    unique_prefix,
)

# Round numbers make exact expiry boundaries common; the odd ones land between them.
TTL_MS = st.sampled_from([1, 2, 10, 50, 100])
ADVANCE_MS = st.sampled_from([0, 1, 2, 9, 10, 49, 50, 99, 100, 150])

MODEL_SETTINGS = settings(
    max_examples=200,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def counted(make: Callable[[], Store], runs: list[None]) -> Callable[[], tuple[Store, Timing]]:
    """``make`` with a fake-clock timing, counting the runs (each run opens one store)."""

    def open_store() -> tuple[Store, Timing]:
        runs.append(None)
        store = make()
        return store, fake_timing(store)

    return open_store


def test_memory_backend_follows_the_model() -> None:
    """MemoryBackend on a fake clock never departs from the lease model in 200 random runs."""
    runs: list[None] = []
    machine = machine_class("MemoryMachine", counted(memory_store, runs), TTL_MS, ADVANCE_MS)
    run_machine(machine, MODEL_SETTINGS)
    assert len(runs) >= 200


def test_sqlite_backend_follows_the_model(tmp_path: Path) -> None:
    """SqliteBackend on a fake clock never departs from the lease model in 200 random runs."""
    path = tmp_path / "leases.db"
    runs: list[None] = []
    machine = machine_class(
        "SqliteMachine",
        counted(lambda: sqlite_store(path, unique_prefix()), runs),
        TTL_MS,
        ADVANCE_MS,
    )
    run_machine(machine, MODEL_SETTINGS)
    assert len(runs) >= 200
