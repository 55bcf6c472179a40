"""The primitives each face waits with (``_sync/primitives.py``, ``_async/primitives.py``) keep
the same contract, which the code generated for both faces relies on."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from fencedlease._async import primitives as aio
from fencedlease._sync import primitives as sync


def test_sync_event_wait_says_whether_it_was_set() -> None:
    """``wait(timeout_s)`` returns False when the bound passes unset, True when another thread
    sets it during the wait, and True at once when already set; ``clear`` unsets it."""
    event = sync.Event()
    assert event.wait(0) is False
    waiting = threading.Event()
    result: list[bool] = []

    def waiter() -> None:
        waiting.set()
        result.append(event.wait(None))

    thread = threading.Thread(target=waiter)
    thread.start()
    waiting.wait()
    event.set()
    thread.join()
    assert result == [True]
    assert event.wait(0) is True
    event.clear()
    assert event.is_set() is False


def test_asyncio_event_wait_says_whether_it_was_set() -> None:
    """The asyncio face's `Event` answers as the sync face's: False when the bound passes unset,
    True when another task sets it during the wait, True at once when already set."""

    async def main() -> list[bool]:
        event = aio.Event()
        answers = [await event.wait(0)]
        waiter = asyncio.ensure_future(event.wait(None))
        await asyncio.sleep(0)  # the waiter is now blocked on the event
        assert not waiter.done()
        event.set()
        answers.append(await waiter)
        answers.append(await event.wait(0))
        event.clear()
        answers.append(event.is_set())
        return answers

    assert asyncio.run(main()) == [False, True, True, False]


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_sync_runner_logs_a_death_and_can_start_again() -> None:
    """A run that raises calls ``died`` and is no longer running; `start` then runs anew, and
    `stop` wakes the run and joins it."""
    runner = sync.Runner("test-runner")
    deaths: list[str] = []
    assert (runner.started, runner.running) == (False, False)

    def fail() -> None:
        raise RuntimeError("boom")

    runner.start(fail, lambda: deaths.append("d"))
    assert runner._thread is not None
    runner._thread.join()
    assert (runner.started, runner.running, deaths) == (True, False, ["d"])
    go = threading.Event()

    def until_woken() -> None:
        go.wait()

    runner.start(until_woken, lambda: deaths.append("d"))
    assert runner.running
    runner.stop(None, go.set)
    assert (runner.running, deaths) == (False, ["d"])


def test_asyncio_runner_is_cancelled_by_stop_without_a_death() -> None:
    """The asyncio face's `Runner` answers as the sync one: a run that raises calls ``died``; a
    run still going is cancelled by `stop` (its cancellation is no death) and ends."""

    async def main() -> tuple[bool, bool, list[str]]:
        runner = aio.Runner("test-runner")
        deaths: list[str] = []

        async def fail() -> None:
            raise RuntimeError("boom")

        runner.start(fail, lambda: deaths.append("d"))
        assert runner._task is not None
        await asyncio.wait({runner._task})
        forever = asyncio.Event()

        async def until_cancelled() -> None:
            await forever.wait()

        runner.start(until_cancelled, lambda: deaths.append("d"))
        await asyncio.sleep(0)
        running = runner.running
        await runner.stop(None, lambda: None)
        return running, runner.running, deaths

    assert asyncio.run(main()) == (True, False, ["d"])


def test_sync_call_still_queued_is_withdrawn_unsent() -> None:
    """A call still in the pool's queue (every thread busy) is withdrawn and counts as unsent; a
    call that ran says its result and whether it failed."""
    chores = sync.Chores("test-chores")
    gate = threading.Event()
    busy = [chores.submit(gate.wait) for _ in range(sync.CHORE_THREADS)]
    queued = chores.submit(lambda: True)
    assert queued.wait(0.01) is False
    assert (queued.withdraw(), queued.unsent(), queued.failed()) == (True, True, True)
    gate.set()
    assert all(call.wait(30.0) for call in busy)
    ran = chores.submit(lambda: 7)
    assert ran.wait(30.0) is True
    assert (ran.withdraw(), ran.unsent(), ran.failed(), ran.result()) == (False, False, False, 7)
    chores.close(None)


def test_asyncio_call_is_never_withdrawn_and_close_cancels_it() -> None:
    """A task's call cannot be known unsent, so it is never withdrawn; `close` cancels a call
    still running, which then counts as failed but not unsent."""

    async def main() -> tuple[bool, bool, bool, bool, bool]:
        chores = aio.Chores("test-chores")
        call = chores.submit(asyncio.Event().wait)
        answered = await call.wait(0.01)
        withdrawn = call.withdraw()
        await chores.close(None)
        return answered, withdrawn, call.cancelled(), call.failed(), call.unsent()

    assert asyncio.run(main()) == (False, False, True, True, False)


def test_shield_runs_the_step_on_both_faces() -> None:
    """`shield(step)` returns what ``step()`` returns, on both faces."""
    assert sync.shield(lambda: 3) == 3

    async def three() -> int:
        return 3

    assert asyncio.run(aio.shield(three)) == 3


def test_sync_abandon_withdraws_a_queued_call_and_leaves_a_running_one() -> None:
    """`abandon` withdraws a call still queued (its pool's ``workers`` threads busy) and leaves
    one already running to its end; `close` counts the thread a hung call still holds."""
    chores = sync.Chores("test-abandon", 1)
    started, gate = threading.Event(), threading.Event()

    def hung() -> bool:
        started.set()
        return gate.wait()

    running = chores.submit(hung)
    queued = chores.submit(lambda: True)
    assert started.wait(30.0)
    sync.abandon(queued)
    sync.abandon(running)
    left = chores.close(time.monotonic())  # the one thread is blocked on the gate
    gate.set()
    assert running.wait(30.0) is True
    assert (queued.cancelled(), running.cancelled(), running.result(), left) == (
        True,
        False,
        True,
        1,
    )


def test_asyncio_abandon_cancels_a_running_call() -> None:
    """`abandon` cancels a task's call even once it has started; `close` then has none left."""

    async def main() -> tuple[bool, bool, int]:
        chores = aio.Chores("test-abandon", 1)
        call = chores.submit(asyncio.Event().wait)
        await asyncio.sleep(0)  # the task has started: waiting on the event
        aio.abandon(call)
        ended = await call.wait(30.0)
        return ended, call.cancelled(), await chores.close(None)

    assert asyncio.run(main()) == (True, True, 0)


def test_is_cancellation_is_a_tasks_cancellation_only() -> None:
    """`is_cancellation` is true of `asyncio.CancelledError` on the asyncio face only: a thread is
    never cancelled."""
    errors = (asyncio.CancelledError(), RuntimeError("x"), KeyboardInterrupt())
    assert [aio.is_cancellation(e) for e in errors] == [True, False, False]
    assert [sync.is_cancellation(e) for e in errors] == [False, False, False]
