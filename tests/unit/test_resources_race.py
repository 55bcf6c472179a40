"""The memory resource lets two holders' accesses of one key race inside its FencedResource: a
held access stops inside its ``accept`` until the access sent after it has passed its own, and
the data step lands only while the fence is still the access's own."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from fencedlease_lab.harness.resources_memory import LeaseView, MemoryCounters

OLD = LeaseView(1, "a" * 16, "k", "p:{k}:fence")
NEW = LeaseView(2, "b" * 16, "k", "p:{k}:fence")


def _race(counters: MemoryCounters, first: Any, then: Any) -> tuple[Any, Any]:
    """Run ``first()`` held in a thread and ``then()`` after it; both replies."""
    got: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: got.setdefault("held", first()))
    thread.start()
    after = then()
    thread.join(timeout=30)
    return got["held"], after


@pytest.mark.parametrize("strict", [False, True])
def test_a_held_stale_write_that_read_the_fence_first_is_refused(strict: bool) -> None:
    """A stale holder's write held inside its accept while the newer holder's read passes is
    refused with the newer token, and the read's value stands."""
    counters = MemoryCounters("c", strict=strict)
    assert counters.read("k", OLD, True) == ("ok", 0)
    held, after = _race(
        counters,
        lambda: counters.write("k", 7, OLD, True, "held"),
        lambda: counters.read("k", NEW, True, "after"),
    )
    assert after == ("ok", 0)
    assert held[:2] == ("stale", 2)
    assert counters.finals() == {}


def test_the_data_step_refuses_an_access_whose_fence_moved_after_its_accept() -> None:
    """A newer lease accepted between an access's accept and its data step refuses the access:
    nothing is written and the reply names the newer token."""
    counters = MemoryCounters("c", strict=False)
    entry = counters._key("k")
    lock = entry.lock

    class Overtaken:
        def __enter__(self) -> None:
            entry.resource.accept(NEW)  # the newer holder's accept lands first
            lock.acquire()

        def __exit__(self, *exc: object) -> None:
            lock.release()

    entry.lock = Overtaken()  # type: ignore[assignment]
    reply = counters.write("k", 5, OLD, True)
    assert reply[:2] == ("stale", 2)
    assert counters.finals() == {}


@pytest.mark.parametrize("strict", [False, True])
def test_a_twin_lease_with_the_accepted_token_is_refused(strict: bool) -> None:
    """The recheck presents an accepted token as another lease would (a duplicate grant): the
    resource refuses it, strict or not, and the holder's own write still lands."""
    counters = MemoryCounters("c", strict=strict)
    assert counters.read("k", NEW, True) == ("ok", 0)
    assert counters.recheck("k", NEW) is False
    assert counters.write("k", 1, NEW, True) == ("ok", None)
    assert counters.finals() == {"k": 1}
