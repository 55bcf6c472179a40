"""Fork safety: what a child made by `os.fork` does with what it inherits.

The rule: **a lease belongs to the process that acquired it** (or restored it). A child made by
``os.fork`` (``multiprocessing`` with the fork start method, gunicorn and Celery prefork workers)
inherits copies of the parent's managers and leases, but none of the parent's threads, and it
shares the parent's sockets. So, in the child:

- every lease made before the fork is lost, reason `FORKED`,
  without any I/O: ``renew()`` and ``release()`` send nothing and return False, ``hold`` ends in
  [`LeaseLostError`][fencedlease.LeaseLostError] (or the body's own exception) without releasing,
  and the manager's ``close()`` leaves the parent's keys alone. The parent keeps renewing them;
- a sync [`LeaseManager`][fencedlease.LeaseManager] is usable: its renewer, release and hand-off
  threads and their locks are replaced, and new leases are renewed by fresh threads (redis-py's sync
  ``ConnectionPool`` drops the parent's connections itself when it sees a new pid);
- an asyncio [`AsyncLeaseManager`][fencedlease.aio.AsyncLeaseManager] is inert: an event loop and
  the ``redis.asyncio`` connections bound to it do not survive fork (redis-py's asyncio pool does
  not reset itself by pid), so the inherited manager raises ``RuntimeError`` on use, its ``close()``
  does no I/O and leaves the inherited client alone. Make a new manager in the child, inside the
  child's own event loop (``asyncio.run``). A child forked from *inside* a running loop must not
  go on running that loop (it shares the parent's selector and sockets): leave it with
  ``os._exit``, as ``multiprocessing`` does.

How: one set of `os.register_at_fork` hooks per process (registered when this module is
imported), a process *generation* that a lease compares with the one it was made in, and weak
references to the live managers, whose ``_after_fork_in_child`` replaces their locks, threads and
executors. The parent's locks are not held across the fork: the child never uses them (it replaces
them), so no lock of ours can be inherited held, and no lock-ordering against other libraries'
fork hooks arises. The registry's own lock is held across the fork, so the set of managers is never
seen half-updated.
"""

from __future__ import annotations

import logging
import os
import threading
import weakref
from typing import Protocol

__all__ = ["ForkAware", "generation", "register"]

log = logging.getLogger("fencedlease")


class ForkAware(Protocol):
    """What registers: an object that resets itself in a forked child (no I/O there)."""

    def _after_fork_in_child(self) -> None: ...


generation = 0
"""How many forks separate this process from the one that imported the library first; a lease
made under another generation is the parent's."""

_lock = threading.Lock()
_live: weakref.WeakSet[ForkAware] = weakref.WeakSet()


def register(obj: ForkAware) -> None:
    """Reset ``obj`` in every child forked while it is alive (a weak reference: no leak)."""
    with _lock:
        _live.add(obj)


def _before() -> None:
    _lock.acquire()


def _after_in_parent() -> None:
    _lock.release()


def _after_in_child() -> None:
    global generation, _lock
    generation += 1
    _lock = threading.Lock()  # the inherited one is held (by _before)
    for obj in list(_live):
        try:
            obj._after_fork_in_child()
        except Exception:  # one object must not leave the others un-reset
            log.exception("fencedlease: resetting %r after fork failed", obj)


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(
        before=_before, after_in_parent=_after_in_parent, after_in_child=_after_in_child
    )
