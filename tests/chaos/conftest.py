"""Chaos-only fixtures: short harness runs, one nemesis each, and helpers to read their history.

A run starts its own redis-server (AOF on) and Toxiproxy (real if available, else embedded);
every process it starts is stopped before it returns, even when it fails.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from fencedlease_lab.harness.checker import Extracted, Fault, Grant
from fencedlease_lab.harness.run import CheckConfig, CheckResult, Progress, run_check
from fencedlease_lab.servers.redis import RedisUnavailable, find_redis_binary

TTL_MS = 1000


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A harness run is real processes, real faults and a 1 s TTL on two shared cores: one in
    a few dozen runs lands a fault a scheduling hiccup away from where the test needs it. Such a
    run is tried once more (pytest-rerunfailures); a behaviour that is really broken fails twice.
    The history of a failed run is printed by the assertion that failed."""
    for item in items:
        if item.path.name.startswith("test_check_"):
            item.add_marker(pytest.mark.flaky(reruns=1))


@pytest.fixture
def check_run(tmp_path: Path) -> Callable[..., CheckResult]:
    """``check_run(*faults, mode="fenced", duration_s=10.0, on_progress=None, **config)`` -> a
    finished run (``on_progress`` as [`run_check`][fencedlease_lab.harness.run.run_check]'s).

    10 s: a fault's victim is a worker index drawn from the seed, and the fault waits (up to
    2 x (body + ttl)) for that worker to be in its critical section before it begins."""
    if find_redis_binary() is None:
        if os.environ.get("FENCEDLEASE_REQUIRE_SERVERS") == "1":
            pytest.fail("required server unavailable: no redis-server for the harness")
        pytest.skip("no redis-server binary for the harness")

    def run(
        *faults: str,
        mode: str = "fenced",
        duration_s: float = 10.0,
        on_progress: Callable[[Progress], None] | None = None,
        **config: Any,
    ) -> CheckResult:
        try:
            return run_check(
                CheckConfig(
                    workers=config.pop("workers", 3),
                    duration_s=duration_s,
                    faults=faults,
                    mode=mode,  # type: ignore[arg-type]
                    seed=config.pop("seed", 4),
                    # One kind of resource and of worker, as each test's scenario assumes: the
                    # check's defaults deal the keys to every resource kind (mixed) and the
                    # workers to every kind (sync, threads, asyncio), which the tests of those
                    # ask for by name.
                    resource=config.pop("resource", "sqlite"),
                    workers_kind=config.pop("workers_kind", "sync"),
                    # No stale writers unless asked for: each scenario reads its own history.
                    stale_share=config.pop("stale_share", 0.0),
                    out_dir=tmp_path / "out",
                    ttl_ms=TTL_MS,
                    **config,
                ),
                on_progress,
            )
        except RedisUnavailable as exc:
            pytest.skip(str(exc))

    return run


def the_fault(result: CheckResult, kind: str) -> tuple[Extracted, Fault]:
    """A valid run's history (``fencedlease check`` exits 0) and its one fault, of ``kind``,
    that completed ``ok``."""
    assert result.report.valid, result.report.explain()
    assert result.exit_code == 0, result.inconclusive
    data = result.history()
    (fault,) = data.faults
    assert fault.kind == kind
    assert fault.type == "ok", fault.detail
    return data, fault


def victim_of(data: Extracted, fault: Fault) -> Grant:
    """The grant the fault's target held when the fault began."""
    return next(
        g for g in data.grants
        if g.process == fault.target and g.granted < fault.start < (g.end or 0.0)
    )  # fmt: skip


def assert_told_in_time(result: CheckResult, fault: Fault, victim: Grant) -> None:
    """The cut-off ``victim`` was told of its loss within ttl + one heartbeat of the cut, its
    critical section ended in that error, and the next holder had a larger token."""
    assert victim.lost is not None, "the cut-off holder was never told"
    assert victim.lost - fault.start <= (result.config.ttl_ms + result.config.heartbeat) / 1000
    assert victim.end_type == "fail"
    assert victim.end_outcome in ("stale", "lease-lost")
    rival = next(
        g for g in result.history().grants
        if g.process != victim.process and g.granted > fault.start
    )  # fmt: skip
    assert rival.token > victim.token
