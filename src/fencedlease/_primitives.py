"""What the sync face waits with, where the asyncio face uses its event loop: the primitives the
code generated for both faces calls by the same names (the asyncio ones are in
`fencedlease.aio._primitives`). A generated module imports ``._primitives`` and gets its
face's.
"""

from __future__ import annotations

import threading

from ._state import LeaseState

__all__ = ["LostSignal"]


class LostSignal:
    """Set once ``state`` is marked lost, from whichever thread marks it; waited on by any
    thread."""

    __slots__ = ("_event",)

    def __init__(self, state: LeaseState) -> None:
        event = self._event = threading.Event()
        state.add_listener(lambda _: event.set())

    def wait(self, timeout_s: float | None) -> None:
        """Block until set or ``timeout_s`` seconds have passed (None: no bound)."""
        self._event.wait(timeout_s)
