"""Each way a worker runs (one thread, threads sharing a LeaseManager, tasks sharing an
AsyncLeaseManager) on several keys: a clean run whose lock-level check is judged in full, with
the leases of one worker process held at once on different keys where it has several lanes."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from fencedlease_lab.harness.history import read_history
from fencedlease_lab.harness.run import CheckResult

pytestmark = pytest.mark.chaos

RunCheck = Callable[..., CheckResult]


def overlapping_holds(result: CheckResult) -> int:
    """How many grants began while another grant of the same worker process was still held."""
    held: dict[str, set[int]] = {}
    overlaps = 0
    for event in read_history(result.history_path):
        if not event.process.startswith("w"):
            continue
        mine = held.setdefault(event.process, set())
        if event.op == "acquire" and event.type == "ok" and event.id is not None:
            overlaps += bool(mine)
            mine.add(event.id)
        elif event.op == "hold" and event.type != "invoke" and event.id is not None:
            mine.discard(event.id)
    return overlaps


@pytest.mark.parametrize("kind", ["sync", "threads", "asyncio"])
def test_each_worker_kind_runs_clean_and_judged(check_run: RunCheck, kind: str) -> None:
    # bodies longer than a heartbeat, so leases are renewed
    result = check_run(workers_kind=kind, keys=8, body_ms=400, duration_s=5.0, workers=2)
    report = result.report
    assert report.valid, report.explain()
    assert report.stats["grants"] >= 10
    mutex = report.property("mutual-exclusion")
    assert mutex.note is not None and "not judged" not in mutex.note, mutex.note
    start = next(e for e in read_history(result.history_path) if e.op == "start")
    assert start.detail["worker_kinds"] == [kind, kind]
    assert len(start.detail["keys"]) == 8
    if kind == "sync":
        assert overlapping_holds(result) == 0
    else:
        assert overlapping_holds(result) >= 1
