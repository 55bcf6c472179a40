"""`RenewerCore`: what the renewers of both faces do alike when a lease joins the schedule. No
I/O."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable
from contextlib import AbstractContextManager

from fencedlease._core.clock import Clock
from fencedlease._core.errors import ManagerClosedError
from fencedlease._core.schedule.entry import RenewalEntry
from fencedlease._core.schedule.heaps import RenewalSchedule
from fencedlease._core.state import LeaseState

__all__ = ["RenewerCore"]


class RenewerCore(ABC):
    """What both faces' renewers do alike: `add` a lease to the schedule and wake the owner (the
    thread or the task) only when it must act earlier than it planned to.

    The owner sets ``_asleep_until`` (seconds on the monotonic clock; infinity: until woken) just
    before each sleep, under ``_guard``. A lease added with its first renewal due at or after that
    needs no wake-up: the owner looks at the schedule again when it wakes, and the new lease's
    deadline comes after its first renewal. Waking the owner on every add would cost a context
    switch per ``hold()``.
    """

    _schedule: RenewalSchedule
    _clock: Clock
    _closed: bool
    _guard: AbstractContextManager[object]
    _asleep_until: float = -math.inf

    @abstractmethod
    def _ensure_running(self) -> bool:
        """Start the owner if it is not running (under ``_guard``); whether it was started (a new
        owner reads the schedule before it first sleeps, so it needs no wake-up)."""

    @abstractmethod
    def _wake(self) -> None:
        """Make the owner look at the clock and the schedule now (under ``_guard``)."""

    @abstractmethod
    def _deadline_moved(self, entry: RenewalEntry) -> None:
        """``entry``'s lease was renewed outside the schedule (a manual ``renew``)."""

    def add(
        self,
        state: LeaseState,
        heartbeat_ms: int,
        on_renew_error: Callable[[BaseException], object] | None,
    ) -> RenewalEntry:
        """Start renewing ``state`` every ``heartbeat_ms`` milliseconds (the asyncio renewer:
        call it inside the running loop). ``on_renew_error(exc)`` is called for each failed
        round trip of its renewals.

        Raises:
            ManagerClosedError: the renewer is closed.
        """
        entry = RenewalEntry(state, heartbeat_ms, on_renew_error)
        with self._guard:
            if self._closed:
                raise ManagerClosedError()
            started = self._ensure_running()
            self._schedule.add(entry, self._clock.monotonic())
            state.deadline_moved = lambda: self._deadline_moved(entry)
            if not started and entry.next_due < self._asleep_until:
                self._wake()
        return entry
