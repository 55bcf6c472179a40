"""The primitives each face waits with (``_sync/primitives/``, ``_async/primitives/``) keep
the same contract, which the code generated for both faces relies on."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from fencedlease import BackendError
from fencedlease._async.primitives import callers as aio_callers
from fencedlease._async.primitives import waiting as aio
from fencedlease._sync.primitives import callers as sync_callers
from fencedlease._sync.primitives import waiting as sync


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


# --- manager ---


def test_asyncio_body_canceller_takes_back_only_its_own_cancellation() -> None:
    """A loss cancels the task that made the canceller at its next wait, and `taken_back` says
    that CancelledError was the canceller's own; with no loss it says False."""

    async def body(lose: bool) -> tuple[bool, str | None]:
        canceller = aio_callers.BodyCanceller("lost")
        if lose:
            canceller.on_lost(None)  # type: ignore[arg-type]
        try:
            await asyncio.sleep(0)
            await asyncio.sleep(0)
        except asyncio.CancelledError as exc:
            return canceller.taken_back(exc), str(exc)
        return canceller.taken_back(None), None

    assert asyncio.run(body(True)) == (True, "lost")
    assert asyncio.run(body(False)) == (False, None)


def test_sync_body_canceller_never_interrupts() -> None:
    """The sync face's canceller sends nothing on a loss, and no outcome is its own."""
    canceller = sync_callers.BodyCanceller("lost")
    canceller.on_lost(None)  # type: ignore[arg-type]
    assert canceller.taken_back(KeyboardInterrupt()) is False


def test_asyncio_spawns_shielded_runs_on_when_the_caller_is_cancelled() -> None:
    """A shielded call goes on to its end when its caller is cancelled, and `finish` finds it
    done before its bound, with nothing late."""

    async def main() -> tuple[bool, list[str], int, int]:
        spawns = aio_callers.Spawns("test-spawns", 4)
        gate, ran = asyncio.Event(), []

        async def step() -> None:
            await gate.wait()
            ran.append("done")

        caller = asyncio.ensure_future(spawns.shielded("t", "step", step))
        await asyncio.sleep(0)
        caller.cancel()
        with pytest.raises(asyncio.CancelledError):
            await caller
        gate.set()
        late, cancelled = await spawns.finish(time.monotonic() + 30, ())
        return bool(spawns), ran, len(late), cancelled

    assert asyncio.run(main()) == (False, ["done"], 0, 0)


def test_asyncio_spawns_shielded_stopped_by_finish_is_a_backend_error() -> None:
    """A shielded call still running at `finish`'s bound is cancelled, and its caller gets a
    BackendError naming it (the lease lapses at its ttl); it is late, and not a clean-up."""

    async def main() -> tuple[str, int, int]:
        spawns = aio_callers.Spawns("test-spawns", 4)
        caller = asyncio.ensure_future(spawns.shielded("t", "release 'k'", asyncio.Event().wait))
        await asyncio.sleep(0)
        late, cleanups = await spawns.finish(time.monotonic(), ())
        with pytest.raises(BackendError) as raised:
            await caller
        return str(raised.value), len(late), cleanups

    assert asyncio.run(main()) == (
        "release 'k': stopped by close(); the lease lapses at its ttl",
        1,
        1,
    )


def test_sync_spawns_finish_reports_a_late_call_and_its_thread() -> None:
    """A call still running at `finish`'s bound is late and its thread still runs (a thread is
    not cancelled); a shielded call runs on the caller's thread."""
    spawns = sync_callers.Spawns("test-spawns", 2)
    gate = threading.Event()
    call = spawns.spawn("t", gate.wait, 30)
    assert spawns.shielded("t", "step", threading.get_ident) == threading.get_ident()
    late, running = spawns.finish(time.monotonic(), (call,))
    assert (late, running, bool(spawns)) == ({call}, 1, True)
    gate.set()
    assert call.wait(30) is True


def test_detached_runs_the_step_to_its_end_on_both_faces() -> None:
    """The sync face's `Detached` has run its step when made and raises its error from
    `result`; the asyncio face's runs it in a task that cancelling its awaiter does not stop."""

    def fails() -> int:
        raise KeyError("step")

    done = sync_callers.Detached("t", fails)
    assert done.done() is True
    with pytest.raises(KeyError, match="step"):
        done.result()

    async def main() -> tuple[list[str], bool]:
        gate, ran = asyncio.Event(), []

        async def step() -> None:
            await gate.wait()
            ran.append("done")

        detached = aio_callers.Detached("t", step)
        awaiter = asyncio.ensure_future(detached.result())
        await asyncio.sleep(0)
        awaiter.cancel()
        gate.set()
        await detached.wait()
        return ran, detached.done()

    assert asyncio.run(main()) == (["done"], True)


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


def test_sync_node_workers_end_once_enough_answered() -> None:
    """``run_until`` returns as soon as ``enough`` holds for the results so far: a node whose
    call has not answered then counts as not done, however long its bound."""
    workers = sync.NodeWorkers()
    release = threading.Event()
    try:
        calls = {"a": lambda: 1, "b": lambda: 1, "stalled": lambda: int(release.wait(30))}
        results = workers.run_until(calls, 30.0, lambda done: len(done) >= 2)
        assert results == {"a": 1, "b": 1, "stalled": None}
    finally:
        release.set()
        workers.close()


def test_asyncio_node_workers_end_once_enough_answered_and_cancel_the_rest() -> None:
    """On the asyncio face the call still running when ``enough`` holds is cancelled."""

    async def main() -> tuple[dict[str, int | None], bool]:
        stalled = asyncio.Event()
        cancelled = []

        async def answer() -> int:
            return 1

        async def stall() -> int:
            try:
                await stalled.wait()
            except asyncio.CancelledError:
                cancelled.append(True)
                raise
            return 2

        calls = {"a": answer, "b": answer, "stalled": stall}
        results = await aio.NodeWorkers().run_until(calls, 30.0, lambda done: len(done) >= 2)
        await asyncio.sleep(0)  # the cancellation reaches the stalled task
        return results, cancelled == [True]

    assert asyncio.run(main()) == ({"a": 1, "b": 1, "stalled": None}, True)
