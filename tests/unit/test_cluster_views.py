"""The cluster majority's view shared by the calls that wait for one at once, on both faces: a
call is given only a read that started after its mark, joins one in flight that did, and starts
its own otherwise; each read is made once, however many calls it serves."""

from __future__ import annotations

import asyncio
import threading

import pytest

from fencedlease._async.cluster_views import AsyncSharedViews
from fencedlease._redis.cluster_majority import ClusterView
from fencedlease._sync.cluster_views import SharedViews, _Flight

BOUND_S = 30.0  # a safety bound on waits an event ends


def test_async_calls_waiting_at_once_share_one_read_that_started_after_their_mark() -> None:
    """A call whose mark precedes the read in flight starts a read of its own; a call waiting
    meanwhile joins it; a later call whose mark the newest read follows reads nothing."""

    async def main() -> None:
        gates = [asyncio.Event(), asyncio.Event(), asyncio.Event()]
        started = [asyncio.Event(), asyncio.Event(), asyncio.Event()]
        made: list[ClusterView] = []

        async def read() -> ClusterView:
            index = len(made)
            view = ClusterView(1, [])
            made.append(view)
            started[index].set()
            await gates[index].wait()
            return view

        views = AsyncSharedViews(read, BOUND_S)
        first = asyncio.ensure_future(views.after(views.mark()))
        await started[0].wait()
        mark = views.mark()  # taken while read 1 is in flight: read 1 cannot serve it
        second = asyncio.ensure_future(views.after(mark))
        await started[1].wait()
        third = asyncio.ensure_future(views.after(mark))  # joins read 2
        await asyncio.sleep(0)
        gates[0].set()
        gates[1].set()
        assert await first is made[0]
        assert await second is made[1]
        assert await third is made[1]
        assert await views.after(mark) is made[1]  # read 2 started after the mark: no read
        assert views.reads == 2
        gates[2].set()
        assert await views.after(views.mark()) is made[2]
        assert views.reads == 3

    asyncio.run(main())


def test_async_a_failed_read_makes_the_joined_calls_read_again() -> None:
    """When the read a call joined fails, the call makes a read of its own instead of taking
    an older view or the failure."""

    async def main() -> None:
        gate, started = asyncio.Event(), asyncio.Event()
        views_made: list[ClusterView] = []

        async def read() -> ClusterView:
            if not views_made and not started.is_set():
                started.set()
                await gate.wait()
                raise RuntimeError("the read failed")
            view = ClusterView(1, [])
            views_made.append(view)
            return view

        views = AsyncSharedViews(read, BOUND_S)
        failing = asyncio.ensure_future(views.after(0))
        await started.wait()
        joined = asyncio.ensure_future(views.after(0))
        await asyncio.sleep(0)
        gate.set()
        with pytest.raises(RuntimeError, match="the read failed"):
            await failing
        assert await joined is views_made[0]
        assert views.reads == 2

    asyncio.run(main())


def test_sync_threads_waiting_at_once_share_one_read_that_started_after_their_mark() -> None:
    """On the sync face, threads waiting while a read that started after their mark is in
    flight take its view; a thread whose mark precedes it reads again."""
    gates = [threading.Event() for _ in range(2)]
    started = [threading.Event() for _ in range(2)]
    made: list[ClusterView] = []
    lock = threading.Lock()

    def read() -> ClusterView:
        with lock:
            index = len(made)
            view = ClusterView(1, [])
            made.append(view)
        started[index].set()
        assert gates[index].wait(BOUND_S)
        return view

    views = SharedViews(read, BOUND_S)
    got: dict[str, ClusterView] = {}

    def call(name: str, mark: int) -> None:
        got[name] = views.after(mark)

    first = threading.Thread(target=call, args=("first", views.mark()))
    first.start()
    assert started[0].wait(BOUND_S)
    mark = views.mark()
    second = threading.Thread(target=call, args=("second", mark))
    second.start()
    assert started[1].wait(BOUND_S)
    joiners = [threading.Thread(target=call, args=(f"j{i}", mark)) for i in range(5)]
    for thread in joiners:
        thread.start()
    gates[0].set()
    first.join(BOUND_S)
    gates[1].set()
    for thread in (second, *joiners):
        thread.join(BOUND_S)
    assert got["first"] is made[0]
    assert [got[name] for name in ("second", "j0", "j1", "j2", "j3", "j4")] == [made[1]] * 6
    assert views.reads == 2


def test_sync_a_read_that_never_ends_is_given_up_after_the_join_bound() -> None:
    """A call that joined a read whose reader is gone (a forked child's copy of a read in
    flight) makes a read of its own after the join bound, and is given its view."""
    made: list[ClusterView] = []

    def read() -> ClusterView:
        made.append(ClusterView(1, []))
        return made[-1]

    views = SharedViews(read, 0.05)
    with views._lock:  # a read in flight whose reader will never set it done
        views._started += 1
        views._flight = _Flight(views._started)
    assert views.after(0) is made[0]
    assert views.reads == 2
