"""Stale writers on purpose: cycles whose holder writes after it has lost its lease.

A share of each lane's cycles (``stale_share`` of
[`WorkerConfig`][fencedlease_lab.harness.workload.WorkerConfig]) takes its lease with
``acquire`` (not renewed: nothing keeps it past its ttl of
[`STALE_TTL_DIVISOR`][fencedlease_lab.harness.workload.stale.STALE_TTL_DIVISOR]-th of the run's
ttl, less than two heartbeats), reads the counter, checks the lease (still held: the check
passes) and puts its write off: the delay between a lease check and the write that spans a loss
(Kleppmann, "How to do distributed locking", 2016: a GC pause, a queue that fell behind, a write
retried after a timeout). The lane keeps the write in its
[`LateWrites`][fencedlease_lab.harness.workload.stale.LateWrites] and goes on: its next cycle
(stale or not) waits for the same key, which the stale lease holds until it runs out, and makes
the late write right after its own read, inside its critical section, as a paused holder that
resumes would;
a write not made so is made once due (the stale lease's ttl and a tenth to a half of the run's
ttl after the grant), between cycles or in a body, and the last ones when the lane ends. The
lane's own store makes it (an SQLite connection belongs to its thread).

The fence decides: the newer holder's fenced read moved it, and the late write is refused
(``StaleTokenError``, the hold ends ``fail`` ``stale``); with a plain read (``write-fenced``,
``unfenced``) it lands between the newer holder's read and write, a lost update. A late write
nobody came before is the holder's own increment, accepted (the hold ends ``fail`` ``expired``:
the lease had run out; the holder did not ask the library, so there is no loss notice). These
cycles are never shown on the board: no nemesis aims at a holder that is not renewing, and none
is steered.

Where the store lets two accesses race (the memory resource), a write put off races the newer
holder's read instead ([`LateWrites.read`][fencedlease_lab.harness.workload.stale.LateWrites.read]):
it is sent first and held inside its ``accept`` until the read has passed its own, so a resource
whose check and record are split shows it on every such race.
"""

from __future__ import annotations

import random
import threading
import time
from typing import Any, Final

import attrs

from ..resources_memory import racing
from .config import WorkerConfig
from .cycle import Cycle

__all__ = ["STALE_TTL_DIVISOR", "LateWrites", "stale_ttl_ms", "stale_turn"]

#: A stale cycle's lease lasts the run's ttl divided by this: under two heartbeats (ttl/4
#: each), so nothing would renew it in time anyway, and its key is soon free for another holder.
STALE_TTL_DIVISOR: Final = 5


def stale_ttl_ms(config: WorkerConfig) -> int:
    """The ttl of a stale cycle's lease, in milliseconds (at least 100)."""
    return max(100, config.ttl_ms // STALE_TTL_DIVISOR)


def stale_turn(config: WorkerConfig, rng: random.Random) -> bool:
    """Whether the lane's next cycle is a stale one (drawn from the lane's seeded random
    source, ``stale_share`` of the cycles)."""
    return config.stale_share > 0 and rng.random() < config.stale_share


@attrs.frozen
class _Late:
    due: float
    cycle: Cycle
    lease: Any
    value: int


class LateWrites:
    """The writes a lane's stale cycles put off, made by the lane itself on its own store."""

    def __init__(self, config: WorkerConfig) -> None:
        self.config = config
        self._pending: list[_Late] = []

    def put_off(self, cycle: Cycle, lease: Any, value: int, granted_at: float) -> None:
        """After a stale ``cycle``'s read of ``value``: check the lease (still held, so the
        check passes; a read that outlasted it raises ``LeaseLostError``) and put off the write
        of ``value`` + 1, due the stale lease's ttl and a tenth to a half of the run's ttl after
        ``granted_at`` (monotonic seconds)."""
        lease.check()
        delay_ms = stale_ttl_ms(self.config) + cycle.rng.uniform(0.1, 0.5) * self.config.ttl_ms
        self._pending.append(_Late(granted_at + delay_ms / 1000, cycle, lease, value + 1))

    def wanted(self) -> str | None:
        """The key of the oldest write put off (the lane's next cycle waits for it), or None."""
        return self._pending[0].cycle.key if self._pending else None

    def read(self, store: Any, cycle: Cycle, lease: Any) -> int:
        """The read of a newer holder's ``cycle`` (``lease``) of its key. When a write put off
        of that key is pending and ``store`` lets the two race, that write races the read: sent
        from a thread of its own, held inside its ``accept`` until the read has passed its own
        (``racing``); the fence must refuse it."""
        late = next((p for p in self._pending if p.cycle.key == cycle.key), None)
        if late is None or not getattr(store, "races", lambda _: False)(cycle.key):
            return cycle.read(store, lease)
        self._pending.remove(late)

        def held() -> None:
            with racing("held"):
                write_late(store, late.cycle, late.lease, late.value)

        thread = threading.Thread(target=held, name="late-write", daemon=True)
        thread.start()
        try:
            with racing("after"):
                return cycle.read(store, lease)
        finally:
            thread.join()

    def write(self, store: Any, key: str | None = None) -> None:
        """Make the writes put off that are due, and with ``key`` every one of that key (its
        stale lease is gone: the caller was just granted the key and read it)."""
        now = time.monotonic()
        keep: list[_Late] = []
        ready: list[_Late] = []
        for pending in self._pending:
            (ready if pending.due <= now or pending.cycle.key == key else keep).append(pending)
        self._pending = keep
        for late in ready:
            write_late(store, late.cycle, late.lease, late.value)

    def drain(self, store: Any) -> None:
        """Make every write put off, each once due (the lane is ending)."""
        while self._pending:
            time.sleep(max(0.0, min(p.due for p in self._pending) - time.monotonic()))
            self.write(store)


def write_late(store: Any, cycle: Cycle, lease: Any, value: int) -> None:
    """The late write of a stale cycle, and the end of its hold."""
    try:
        try:
            cycle.write_only(store, lease, value)
        finally:
            cycle.body_end = time.monotonic()
        cycle.expired()
    except Exception as exc:
        cycle.failed(exc)
    finally:
        cycle.finish()
