"""The ``kill-holder`` fault: ``kill -9`` of a worker inside its critical section, and a fresh
worker in its place.

A process that dies holding a lease cannot release it: the key must become free when its TTL
runs out (the TTL is what a lease is for), and the next grant must carry a larger fencing token.
Jepsen's crash model (Kingsbury, "Jepsen" analyses) says what the history holds of the dead
process: every operation it had invoked and not completed ends ``info`` (it may or may not
have happened), written here on its behalf by
[`close_killed_history`][fencedlease_lab.harness.faults_process.close_killed_history]; a lease it
held ends with a ``hold`` ``info`` whose ``body_end`` is the moment of the kill (it did nothing
after). The fresh process takes the same name and index and goes on with new operation ids
([`HistoryWriter`][fencedlease_lab.harness.HistoryWriter] continues a file).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import attrs
import redis

from .faults_network import watch_lease
from .history import Event, HistoryWriter, read_history
from .workload import IDLE, Board

__all__ = [
    "KILLED",
    "KillTarget",
    "close_killed_history",
    "is_dead",
    "kill_and_replace",
    "wait_dead",
]

#: The ``outcome`` of the completions written for a killed worker.
KILLED: Final = "killed"


def is_dead(pid: int) -> bool:
    """Whether process ``pid`` has exited (gone, or a zombie waiting to be reaped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return True
    # The state follows the command name, which is in parentheses and may hold spaces.
    return stat[stat.rfind(")") + 2 :].startswith(("Z", "X"))


def wait_dead(pid: int, timeout_s: float) -> bool:
    """Wait up to ``timeout_s`` seconds for ``pid`` to exit; whether it did."""
    give_up = time.monotonic() + timeout_s
    while not is_dead(pid):
        if time.monotonic() >= give_up:
            return False
        time.sleep(0.005)
    return True


def _pending(events: list[Event]) -> tuple[list[Event], list[Event]]:
    """The invocations with no completion, and the granted acquires whose hold never ended."""
    open_ops: dict[tuple[str, int], Event] = {}
    granted: dict[int, Event] = {}
    for event in events:
        if event.id is None:
            continue
        if event.type == "invoke":
            open_ops[(event.op, event.id)] = event
            continue
        open_ops.pop((event.op, event.id), None)
        if event.op == "acquire" and event.type == "ok":
            granted[event.id] = event
        elif event.op == "hold":
            granted.pop(event.id, None)
    return list(open_ops.values()), list(granted.values())


def close_killed_history(path: str | Path, process: str, killed_mono: float) -> dict[str, Any]:
    """End the history of ``process`` (its file ``path``), killed at ``killed_mono`` (monotonic
    seconds): an ``info`` completion (outcome
    [`KILLED`][fencedlease_lab.harness.faults_process.KILLED]) for each operation it invoked and
    never completed, and a ``hold`` ``info`` (``detail.body_end`` the kill) for each lease it was
    granted and never gave up. Returns what was written: ``{"unfinished": [op names], "holds":
    [tokens]}``. Call it once the process is dead and before a new one writes there.
    """
    unfinished, holds = _pending(read_history(path))
    with HistoryWriter(path, process) as writer:
        for invoke in unfinished:
            writer.record(
                invoke.op,
                "info",
                id=invoke.id,
                grant=invoke.grant,
                key=invoke.key,
                token=invoke.token,
                value=invoke.value,
                outcome=KILLED,
                detail={"killed_at": killed_mono},
            )
        for grant in holds:
            writer.record(
                "hold",
                "info",
                id=grant.id,
                grant=grant.id,
                key=grant.key,
                token=grant.token,
                outcome=KILLED,
                detail={"body_end": killed_mono, "killed_at": killed_mono},
            )
    return {"unfinished": [e.op for e in unfinished], "holds": [g.token for g in holds]}


@attrs.frozen
class KillTarget:
    """The worker to kill: its ``index`` on the board, its ``name`` in the history, its
    history file ``history_path``."""

    index: int
    name: str
    history_path: str


def kill_and_replace(
    target: KillTarget,
    board: Board,
    admin: redis.Redis,
    lease_key: str,
    restart: Callable[[int], None],
    *,
    restart_after_s: float,
    watch_s: float,
    stop: threading.Event,
) -> dict[str, Any]:
    """SIGKILL the worker ``target`` (its pid and the token it holds read from ``board``), end
    its history
    ([`close_killed_history`][fencedlease_lab.harness.faults_process.close_killed_history]), clear
    its board fields, and ``restart`` its index ``restart_after_s`` seconds after the kill;
    meanwhile, and then up to ``watch_s`` seconds more, watch ``lease_key`` on ``admin`` (straight
    to Redis) until the dead worker's token no longer holds it.

    Returns, for the history: ``pid``, ``pttl_at_kill_ms`` (the key's PTTL read right after the
    kill, ``pttl_read_after_ms`` after it), ``owned_after_kill_ms`` (the last moment the dead
    worker's token was seen holding the key, after the kill; None: never),
    ``restarted_after_ms`` and what was closed (``unfinished``, ``holds``). Raises
    ``RuntimeError`` if the worker has no pid or does not die within 10 s.
    """
    pid, token = board.get(target.index, "pid"), board.get(target.index, "token")
    if pid <= 0:  # kill(0 or -n) would signal a whole process group, not the worker
        raise RuntimeError(f"worker {target.name} has no pid yet")
    os.kill(pid, signal.SIGKILL)
    killed = time.monotonic()
    pttl = int(admin.pttl(lease_key))
    pttl_read = time.monotonic()
    if not wait_dead(pid, 10.0):
        raise RuntimeError(f"worker {target.name} (pid {pid}) did not die of SIGKILL in 10 s")
    closed = close_killed_history(target.history_path, target.name, killed)
    for field in ("pid", "token"):
        board.set(target.index, field, 0)
    board.set_phase(target.index, IDLE)
    # The dead worker's lease goes when its TTL runs out: watch for that, restarting the
    # worker meanwhile (the lease outlives the restart).
    first = watch_lease(admin, lease_key, token or None, restart_after_s, stop, began=killed)
    restart(target.index)
    restarted = round((time.monotonic() - killed) * 1000)
    then = watch_lease(
        admin, lease_key, token or None, watch_s, stop, began=killed, until_free=True
    )
    seen = [w["owned_for_ms"] for w in (first, then) if w["owned_for_ms"] is not None]
    return {
        "pid": pid,
        "pttl_at_kill_ms": pttl,
        "pttl_read_after_ms": round((pttl_read - killed) * 1000),
        "owned_after_kill_ms": max(seen, default=None),
        "restarted_after_ms": restarted,
        **closed,
    }
