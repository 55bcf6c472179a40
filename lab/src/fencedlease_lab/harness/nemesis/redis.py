"""The faults on the Redis server itself: ``redis-pause``, ``redis-restart-aof``,
``redis-restart-nopersist``, ``client-kill`` and ``script-flush``."""

from __future__ import annotations

import contextlib
import threading

import redis

from fencedlease import redis_keys

from ..history import Operation
from ..workload import client_name
from .core import NemesisCore
from .env import FaultSpec


class RedisActions(NemesisCore):
    """The actions of the faults on the Redis server: pauses, restarts, killed clients and
    flushed scripts."""

    def _do_redis_pause(
        self, spec: FaultSpec, stop: threading.Event, op: Operation, target: int | None
    ) -> None:
        server = self.env.redis_server
        assert server is not None
        with self._redis_lock:
            if self._redis_pauses == 0:
                server.pause()
                self._redis_paused_pid = None if server.process is None else server.process.pid
            self._redis_pauses += 1
        try:
            stop.wait(spec.duration_s)
        finally:
            ended_by_restart = self._resume_redis()
        self._finish(op, ended_by_restart=ended_by_restart)

    def _counter(self) -> int | None:
        """The highest fencing counter of the run's keys (None: none is set).

        Raises:
            redis.RedisError: Redis did not answer.
        """
        fences = [redis_keys(self.env.prefix, key).fence for key in self.env.lease_keys]
        values = [int(raw) for raw in self._admin.mget(fences) if raw is not None]
        return max(values) if values else None

    def _counter_figure(self, unread: list[str]) -> int | None:
        """`_counter`, as a figure noted on a fault that happened: None when Redis did not
        answer, the error appended to ``unread`` (recorded with the fault, never a reason to
        call it failed)."""
        try:
            return self._counter()
        except redis.RedisError as exc:
            unread.append(f"{type(exc).__name__}: {exc}")
            return None

    def _restart(self, op: Operation, *, persist: bool) -> None:
        server = self.env.redis_server
        assert server is not None
        with self._redis_lock:
            # A paused Redis answers nothing: the restart kills the stopped process (SIGKILL
            # needs no answer) and ends the pause; the pause's own end then resumes nothing.
            paused = self._redis_pauses > 0
            unread: list[str] = []
            before = None if paused else self._counter_figure(unread)
            if not persist:
                self._admin.config_set("appendonly", "no")
                server.appendonly = False
            try:
                server.kill()
                self._redis_paused_pid = None
                server.start()
            finally:
                if not persist:
                    # Later restarts persist again (the AOF is rewritten from what is there now).
                    server.appendonly = True
                    with contextlib.suppress(redis.RedisError):
                        self._admin.config_set("appendonly", "yes")
            # Read before a redis-pause waiting for the lock can stop the new process.
            after = self._counter_figure(unread)
        self._finish(
            op,
            persist=persist,
            counter_before=before,
            counter_after=after,
            during_pause=paused,
            **({"counter_unread": unread} if unread else {}),
        )

    def _do_redis_restart_aof(
        self, spec: FaultSpec, stop: threading.Event, op: Operation, target: int | None
    ) -> None:
        self._restart(op, persist=True)

    def _do_redis_restart_nopersist(
        self, spec: FaultSpec, stop: threading.Event, op: Operation, target: int | None
    ) -> None:
        self._restart(op, persist=False)

    def _connections(self, worker: int) -> list[str]:
        name = client_name(self.env.client_prefix, self.env.worker_names[worker])
        return [str(c["id"]) for c in self._admin.client_list() if c.get("name") == name]

    def _do_client_kill(
        self, spec: FaultSpec, stop: threading.Event, op: Operation, target: int | None
    ) -> None:
        assert target is not None
        board = self.env.board
        token = board.get(target, "token")
        key = self.env.held_key(target)
        before = self._connections(target)
        killed = 0
        for client_id in before:
            with contextlib.suppress(redis.RedisError):
                killed += int(self._admin.client_kill_filter(_id=client_id))
        stop.wait(spec.duration_s)  # a renewal or two falls in here
        after = self._connections(target)
        owner = self._admin.get(redis_keys(self.env.prefix, key).lease)
        token_in_redis = None if owner is None else int(str(owner).split(":", 1)[0])
        self._finish(
            op,
            killed=killed,
            reconnected=bool(set(after) - set(before)),
            token_in_redis=token_in_redis,
            still_held=bool(token)
            and board.get(target, "token") == token == token_in_redis
            and self.env.held_key(target) == key,
        )

    def _do_script_flush(
        self, spec: FaultSpec, stop: threading.Event, op: Operation, target: int | None
    ) -> None:
        self._admin.script_flush()
        for url in self.env.extra_flush_urls:
            with redis.Redis.from_url(url, socket_timeout=2.0) as other:
                other.script_flush()
        self._finish(op)
