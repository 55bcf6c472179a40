"""The state every fault family shares: the admin connection to Redis and the counts of what is
in force (paused pids, disabled proxies, toxics, Redis pauses, nftables tables), and its undoing.

Faults in force together compose: each undoes only its own doing, and a proxy, a worker or Redis
stopped twice comes back when the last of the two ends (`_take` and `_give_back`);
[`heal_all`][fencedlease_lab.harness.nemesis.core.NemesisCore.heal_all] undoes whatever is left."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import redis

from fencedlease import redis_keys

from ...servers.netns import KernelFirewall
from ..faults_lease import take_stretch
from ..faults_topology import TopologyFaults
from ..history import Operation
from .env import FaultSpec, NemesisEnv

if TYPE_CHECKING:
    from ..schedule import Schedule


class NemesisCore:
    """The shared state of a [`Nemesis`][fencedlease_lab.harness.nemesis.Nemesis] and its
    undoing; each fault family (network, process, redis, clock, kernel, lease, topology) is a
    subclass adding its ``_do_<kind>`` actions.

    Each ``_do_<kind>(spec, stop, op, target)`` acts, waits out the fault (stop-aware), heals, and
    completes ``op``; the driver completes it if an action did not. An action undoes only its own
    doing (try/finally), so that the faults in force with it go on."""

    def __init__(self, env: NemesisEnv, schedule: Schedule) -> None:
        self.env = env
        self.schedule = schedule
        self.skipped: list[tuple[str, str]] = []
        self.done: list[str] = []
        self.error: BaseException | None = None
        self._admin = redis.Redis.from_url(
            env.admin_url, socket_timeout=2.0, socket_connect_timeout=2.0, decode_responses=True
        )
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()  # the counts below, signals to workers, proxy toggles
        self._redis_lock = threading.Lock()  # pausing, resuming and restarting redis-server
        self._in_force: dict[int, str] = {}
        self._paused_pids: dict[int, int] = {}
        self._redis_pauses = 0
        self._redis_paused_pid: int | None = None
        self._disabled: dict[int, int] = {}
        # (worker, toxic name) -> the proxy it is on (a worker's lease link or resource link)
        self._toxics: dict[tuple[int, str], Any] = {}
        self._firewall = KernelFirewall(env.run_id)
        self._topology: TopologyFaults | None = None
        if env.deployment is not None:
            first = redis_keys(env.prefix, env.lease_keys[0]).fence
            self._topology = TopologyFaults(env.deployment, first)

    @property
    def current(self) -> str | None:
        """The kinds in force now, comma-separated, or None."""
        kinds = list(self._in_force.values())
        return ", ".join(kinds) if kinds else None

    @staticmethod
    def _finish(op: Operation, **extra: Any) -> None:
        op.ok(detail={**op.fields.get("detail", {}), **extra})

    def _proxy(self, target: int | None) -> Any:
        assert target is not None
        return self.env.proxies[target]

    @contextlib.contextmanager
    def _toxics_in_force(
        self,
        spec: FaultSpec,
        target: int | None,
        toxics: list[dict[str, Any]],
        proxies: Sequence[Any] | None = None,
    ) -> Iterator[None]:
        """``toxics`` on ``target``'s proxy (or on each of ``proxies``, all ``target``'s), each
        named by its fault (``<name>-<spec.index>``, and the proxy's place in ``proxies``),
        while the block runs; removed after it, whatever else is in force on the proxy."""
        on = [self._proxy(target)] if proxies is None else list(proxies)
        mine: list[tuple[int, str]] = []
        try:
            for place, proxy in enumerate(on):
                for toxic in toxics:
                    name = f"{toxic['name']}-{spec.index}" + (
                        "" if proxies is None else f"-{place}"
                    )
                    with self._lock:
                        self._toxics[(target or 0, name)] = proxy
                        mine.append((target or 0, name))
                        proxy.add_toxic(**{**toxic, "name": name})
            yield
        finally:
            self._remove_toxics(mine)

    def _stretched(self, target: int | None, stretch_s: float, stop: threading.Event) -> Any:
        """Stretch ``target``'s body by ``stretch_s``; its ``(token, key name, lease key)``, or
        None when no holder of ``target`` took the stretch in time."""
        env = self.env
        assert target is not None
        taken = take_stretch(
            env.board, target, round(stretch_s * 1000), (env.body_ms + env.ttl_ms) / 1000, stop
        )
        if taken is None:
            return None
        token, index = taken
        keys = env.lease_keys
        key = keys[index] if 0 <= index < len(keys) else keys[0]
        return token, key, redis_keys(env.prefix, key).lease

    # -- healing -------------------------------------------------------------------------------

    def _take(self, counts: dict[int, int], key: int, first: Callable[[], None]) -> None:
        """One more fault holds ``key`` (a pid, a proxy): ``first()`` when it is the first."""
        with self._lock:
            if not counts.get(key):
                first()
            counts[key] = counts.get(key, 0) + 1

    def _give_back(self, counts: dict[int, int], key: int, last: Callable[[], None]) -> None:
        """One fault no longer holds ``key``: ``last()`` when it was the last."""
        with self._lock:
            left = counts.get(key, 0) - 1
            if left > 0:
                counts[key] = left
                return
            counts.pop(key, None)
            last()

    def _resume_worker(self, pid: int) -> None:
        """One pause of ``pid`` ended: SIGCONT when it was the last."""

        def resume() -> None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)

        self._give_back(self._paused_pids, pid, resume)

    def _resume_redis(self, *, all_pauses: bool = False) -> bool:
        """One pause of Redis ended (every one with ``all_pauses``): SIGCONT when it was the
        last. True when a restart had already replaced the stopped process."""
        server = self.env.redis_server
        with self._redis_lock:
            if self._redis_pauses == 0:
                return False
            self._redis_pauses = 0 if all_pauses else self._redis_pauses - 1
            replaced = self._redis_paused_pid is None
            if self._redis_pauses == 0:
                process = None if server is None else server.process
                if not replaced and process is not None and process.pid == self._redis_paused_pid:
                    assert server is not None
                    server.resume()
                self._redis_paused_pid = None
            return replaced

    def _enable_proxy(self, target: int) -> None:
        """One partition of ``target``'s proxy ended: enable it when it was the last."""
        self._give_back(self._disabled, target, self._proxy(target).enable)

    def _remove_toxics(self, toxics: Sequence[tuple[int, str]]) -> None:
        for target, name in toxics:
            with self._lock:
                proxy = self._toxics.pop((target, name), None)
                if proxy is not None:
                    with contextlib.suppress(Exception):
                        proxy.destroy_toxic(name)

    def _reset_clocks(self) -> None:
        if self.env.wall_clock is not None:
            self.env.wall_clock.set(0.0)

    def heal_all(self) -> None:
        """Resume paused workers and Redis, re-enable proxies, remove toxics and nftables rules,
        set the wall clocks right: whatever any fault left in force. Idempotent; every step is
        tried even if an earlier one fails."""
        with contextlib.suppress(Exception):
            self._resume_redis(all_pauses=True)
        for pid in list(self._paused_pids):
            self._paused_pids[pid] = 1
            with contextlib.suppress(Exception):
                self._resume_worker(pid)
        for target in list(self._disabled):
            self._disabled[target] = 1
            with contextlib.suppress(Exception):
                self._enable_proxy(target)
        with contextlib.suppress(Exception):
            self._remove_toxics(list(self._toxics))
        with contextlib.suppress(Exception):
            self._firewall.heal_all()
        with contextlib.suppress(Exception):
            self._reset_clocks()
        if self._topology is not None:
            self._topology.heal_all()

    def close(self) -> None:
        """Heal and close the admin connection."""
        self.heal_all()
        with contextlib.suppress(Exception):
            self._admin.close()
