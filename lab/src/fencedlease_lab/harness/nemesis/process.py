"""The faults on a worker's process: ``pause-holder`` (SIGSTOP, then SIGCONT) and ``kill-holder``
(SIGKILL, then a fresh worker)."""

from __future__ import annotations

import os
import signal
import threading

from fencedlease import redis_keys

from ..faults_process import KillTarget, kill_and_replace
from ..history import Operation
from .core import NemesisCore
from .env import FaultSpec


class ProcessActions(NemesisCore):
    """The actions of the faults on a worker's process (SIGSTOP, SIGKILL)."""

    def _do_pause_holder(
        self, spec: FaultSpec, stop: threading.Event, op: Operation, target: int | None
    ) -> None:
        assert target is not None
        pid = self.env.board.get(target, "pid")
        if pid <= 0:  # kill(0 or -n) would signal a whole process group, not the worker
            raise RuntimeError(f"worker {self.env.worker_names[target]} has no pid yet")
        if not self.env.alive(target):
            raise RuntimeError(f"worker {self.env.worker_names[target]} is not running")
        self._take(self._paused_pids, pid, lambda: os.kill(pid, signal.SIGSTOP))
        try:
            stop.wait(spec.duration_s)
        finally:
            self._resume_worker(pid)
        self._finish(op, pid=pid)

    def _do_kill_holder(
        self, spec: FaultSpec, stop: threading.Event, op: Operation, target: int | None
    ) -> None:
        env = self.env
        assert target is not None
        assert env.restart_worker is not None
        if not env.alive(target):
            raise RuntimeError(f"worker {env.worker_names[target]} is not running")
        done = kill_and_replace(
            KillTarget(target, env.worker_names[target], env.history_paths[target]),
            env.board,
            self._admin,
            redis_keys(env.prefix, env.held_key(target)).lease,
            env.restart_worker,
            restart_after_s=spec.duration_s,
            watch_s=3 * env.ttl_ms / 1000,
            stop=stop,
        )
        self._finish(op, **done)
