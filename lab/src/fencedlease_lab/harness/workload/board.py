"""The board: what the workers publish in shared memory for the nemesis and the progress display
(the phase each is in, the token it holds, running totals), and the fields the nemesis writes
to steer them."""

from __future__ import annotations

import time
from typing import Any, Final

#: Where a worker is, as published on the :class:`Board` (the nemesis picks its victim by it).
IDLE, ACQUIRING, HOLDING, BODY, WRITING, RELEASING = range(6)
PHASES: Final = ("idle", "acquiring", "holding", "body", "writing", "releasing")

_FIELDS: Final = (
    "pid", "phase", "since", "token", "key", "grants", "acked", "refused", "lost", "errors",
    "stretch", "steer", "shun", "alone", "linger", "retry",
)  # fmt: skip


class Board:
    """Per-worker counters in shared memory: ``pid``, ``phase`` (an index into
    [`PHASES`][fencedlease_lab.harness.workload.PHASES]), ``since`` (when the phase began:
    `time.monotonic` in milliseconds), ``token`` (held now, 0 when none), ``key`` (the index of
    the key held in the worker's ``keys``), and running totals ``grants``, ``acked``
    (acknowledged writes), ``refused`` (accesses refused as stale), ``lost`` (leases lost),
    ``errors``. A worker of several lanes shows one of its cycles at a time
    ([`Cycle`][fencedlease_lab.harness.workload.Cycle]): the one holding a lease, if any.
    ``stretch`` is the one field the nemesis writes: milliseconds by which the body of the cycle
    shown next (or now) is to outlast ``body_ms`` (a slow critical section, so that the holder
    renews during a fault); the cycle sets it back to 0 when it takes it. ``steer``, also the
    nemesis': 1 + the index of a key the worker's next cycle is to wait for (the key a fault is
    about to take from its holder, so that a waiter is there when Redis frees it), 0: none.
    ``shun``, the nemesis' too: 1 + the index of a key the worker's new cycles are not to pick
    (they take the next key instead) while it is set, so that a key the nemesis deleted is still
    missing when its holder's renewal comes; 0: none. ``alone``, the nemesis' too: 1 while the
    stretch is only to be taken by a cycle no other lane of the worker is acquiring or holding
    the key of (so that no lane of the holder's own waits for a key the nemesis deletes).
    ``linger`` and ``retry``, the nemesis' too, set before ``steer`` and taken with it:
    milliseconds the body of the steered cycle lasts at least (0: two heartbeats), and its
    ``retry_delay_ms`` (0: the default 50), so that a waiter the nemesis hands a key to waits
    for the release's message between rare polls, and claims the key past its expiry whatever
    lane it runs in.

    Made in the parent with a multiprocessing context and handed to the workers; reads are
    unlocked snapshots (good enough to pick a victim or draw progress).
    """

    def __init__(self, ctx: Any, workers: int) -> None:
        self.workers = workers
        self._array = ctx.Array("q", workers * len(_FIELDS), lock=False)

    def _index(self, worker: int, field: str) -> int:
        return worker * len(_FIELDS) + _FIELDS.index(field)

    def get(self, worker: int, field: str) -> int:
        """One field of one worker."""
        return int(self._array[self._index(worker, field)])

    def set(self, worker: int, field: str, value: int) -> None:
        """Set one field (only worker ``worker`` writes its own fields)."""
        self._array[self._index(worker, field)] = value

    def set_phase(self, worker: int, phase: int) -> None:
        """Enter ``phase`` now."""
        self._array[self._index(worker, "since")] = int(time.monotonic() * 1000)
        self._array[self._index(worker, "phase")] = phase

    def bump(self, worker: int, field: str) -> None:
        """Add one to a running total."""
        self._array[self._index(worker, field)] += 1

    def snapshot(self) -> list[dict[str, int]]:
        """Every worker's fields, as dicts."""
        return [{f: self.get(w, f) for f in _FIELDS} for w in range(self.workers)]
