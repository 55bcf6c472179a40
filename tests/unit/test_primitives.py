"""The primitives each face waits with (``_sync/primitives.py``, ``_async/primitives.py``) keep
the same contract, which the code generated for both faces relies on."""

from __future__ import annotations

import asyncio
import threading

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
