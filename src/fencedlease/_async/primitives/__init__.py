"""What a face does with its own means where the other face does otherwise (tasks on asyncio,
threads on sync): the one hand-written pair of the I/O. This package's modules are written by hand
on both faces; this file, like every other module of ``_sync``, is generated from its ``_async``
source. A generated module imports ``.primitives`` and gets its face's.

- `waiting`: how it waits (events, locks, background runners, pools of calls, bounded calls,
  per-node workers, shielded steps, sleeps);
- `sockets`: a redis-py connection's bytes written and read, bounded by its socket timeout;
- `callers`: what a lease manager's caller is (its thread or task, the calls run off its path,
  the bounded release that ends a hold, how a body is cancelled on loss).
"""

from __future__ import annotations

from .callers import (
    CALLER,
    FORK_INERT,
    BodyCanceller,
    Detached,
    FinalReleases,
    Slots,
    Spawns,
    call_body,
    check_lease_backend,
    close_waiter,
    current_caller,
    drop_unused,
    waiter_after_fork,
)
from .sockets import read_bytes, redis_clock_s, send_bytes
from .waiting import (
    LOG_NAME,
    Background,
    Call,
    Chores,
    Event,
    Lock,
    LostSignal,
    NodeWorkers,
    Runner,
    abandon,
    bounded,
    is_cancellation,
    shield,
    sleep,
)

__all__ = [
    "CALLER",
    "FORK_INERT",
    "LOG_NAME",
    "Background",
    "BodyCanceller",
    "Call",
    "Chores",
    "Detached",
    "Event",
    "FinalReleases",
    "Lock",
    "LostSignal",
    "NodeWorkers",
    "Runner",
    "Slots",
    "Spawns",
    "abandon",
    "bounded",
    "call_body",
    "check_lease_backend",
    "close_waiter",
    "current_caller",
    "drop_unused",
    "is_cancellation",
    "read_bytes",
    "redis_clock_s",
    "send_bytes",
    "shield",
    "sleep",
    "waiter_after_fork",
]
