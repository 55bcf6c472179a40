"""Regression, the shape of a reliability probe: 32 threads on one sync manager contend on 4 keys
(``wait_ms=50``, ``ttl_ms=30 s``) through a link with 10 ms round trips. Waiters that gave up
were handed keys (their queue entries outlived them) and kept them for their whole ttl, so within
a fraction of a second no key was granted any more: every key must be granted, no owner token
may hold one for long, and none may be left held once the callers are gone. The same
with 32 tasks on one asyncio manager."""

from __future__ import annotations

import asyncio
import collections
import socket
import threading
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest
import redis

from conftest import wait_until
from fencedlease import LeaseManager
from fencedlease._redis.keys import lease_key, lease_keys
from fencedlease._redis.scripts import ACQUIRE, ENQUEUE, RELEASE, RENEW_MANY
from fencedlease.aio import AsyncLeaseManager
from fencedlease_lab.servers.redis import RedisEndpoint
from fencedlease_lab.servers.toxiproxy import toxiproxy_endpoint

pytestmark = pytest.mark.live

TTL_MS = 30_000
# How soon, once the callers have stopped, every key is free and its queue empty.
IDLE_BOUND_S = 5.0

CALLERS, KEYS = 32, 4
MIN_GRANTS = 5
RUN_S = 8.0
# No owner token holds a key for the whole run: before the fix a lease handed to a waiter that
# had gone was kept for its 30 s ttl, past the run's end. A bound on shorter ghost holds is not
# kept under load: with three test processes on two cores a round trip through the proxy (in
# this process) is many times the 50 ms wait, and one hold of 7.66 s of the 8 s run was seen
# (a give-up's release behind the others); the idle check after the run is the sharp one.
HOLD_S = RUN_S


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def slow_url(redis_ep: RedisEndpoint, redis_client: redis.Redis) -> Iterator[str]:
    """A URL to the test Redis through a Toxiproxy proxy whose replies are held 10 ms (a 10 ms
    round trip). The scripts are loaded beforehand (a NOSCRIPT is a second round trip)."""
    for script in (ACQUIRE, RELEASE, ENQUEUE, RENEW_MANY):
        redis_client.script_load(script.source)
    parts = urlsplit(redis_ep.url)
    with toxiproxy_endpoint(sources=("embedded",)) as endpoint:
        port = _free_port()
        proxy = endpoint.client().create(
            upstream=f"{parts.hostname}:{parts.port or 6379}",
            name="gone",
            listen=f"127.0.0.1:{port}",
        )
        proxy.add_toxic(type="latency", name="rtt", attributes={"latency": 10, "jitter": 0})
        try:
            yield f"redis://127.0.0.1:{port}/{parts.path.lstrip('/') or 0}"
        finally:
            proxy.destroy()


class _Probe:
    """What a run saw: the grants of each key (as the callers got them), and who held each key
    when (read straight from Redis every 10 ms by a thread of its own until `stop`)."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self.grants: dict[str, list[float]] = collections.defaultdict(list)
        self.holds: dict[tuple[str, bytes], list[float]] = {}  # (key, value) -> first, last seen
        self.stopped = threading.Event()
        self._watcher = threading.Thread(target=self._watch)

    def begin(self) -> None:
        self._watcher.start()

    def stop(self) -> None:
        self.stopped.set()
        self._watcher.join(60)

    def _watch(self) -> None:
        names = [lease_key("probe", f"k{i}") for i in range(KEYS)]
        while not self.stopped.is_set():
            now = time.monotonic()
            for name, value in zip(names, self.client.mget(names), strict=True):
                if isinstance(value, bytes):
                    self.holds.setdefault((name, value), [now, now])[1] = now
            self.stopped.wait(0.01)

    def check(self) -> None:
        """Once the callers have stopped: no owner token held a key for `HOLD_S`, every key is
        idle within `IDLE_BOUND_S`, and was granted at least `MIN_GRANTS` times."""
        holds = {key: round(last - first, 2) for key, (first, last) in self.holds.items()}
        assert max(holds.values()) < HOLD_S, sorted(holds.values())[-5:]
        wait_until(
            lambda: all(_probe_key_idle(self.client, i) for i in range(KEYS)),
            "every key free and its queue empty",
            timeout_s=IDLE_BOUND_S,
        )
        keys = [f"k{i}" for i in range(KEYS)]
        counts = {key: len(self.grants[key]) for key in keys}
        assert min(counts.values()) >= MIN_GRANTS, counts


def test_thirty_two_threads_on_four_keys_over_a_slow_link_keep_every_key_granted(
    slow_url: str, redis_client: redis.Redis
) -> None:
    """32 threads on one manager contend on 4 keys (acquire with ``wait_ms=50``, ``ttl_ms=30 s``,
    release at once) through a 10 ms link for 8 s: every key is granted at least 5 times, no
    owner token holds a key for the whole run (as read straight from Redis), and once the
    threads have stopped no key is held or queued."""
    probe = _Probe(redis_client)
    with LeaseManager.from_url(slow_url, prefix="probe") as leases:

        def contend(i: int) -> None:
            key = f"k{i % KEYS}"
            while not probe.stopped.is_set():
                lease = leases.acquire(key, ttl_ms=TTL_MS, wait_ms=50).lease
                if lease is not None:
                    probe.grants[key].append(time.monotonic())
                    lease.release()

        threads = [threading.Thread(target=contend, args=(i,)) for i in range(CALLERS)]
        probe.begin()
        for thread in threads:
            thread.start()
        probe.stopped.wait(RUN_S)
        probe.stop()
        for thread in threads:
            thread.join(60)
        probe.check()


def test_thirty_two_tasks_on_four_keys_over_a_slow_link_keep_every_key_granted(
    slow_url: str, redis_client: redis.Redis
) -> None:
    """The asyncio twin: 32 tasks on one manager, the same link, keys and bounds."""
    probe = _Probe(redis_client)

    async def scenario() -> None:
        async with AsyncLeaseManager.from_url(slow_url, prefix="probe") as leases:

            async def contend(i: int) -> None:
                key = f"k{i % KEYS}"
                while not probe.stopped.is_set():
                    lease = (await leases.acquire(key, ttl_ms=TTL_MS, wait_ms=50)).lease
                    if lease is not None:
                        probe.grants[key].append(time.monotonic())
                        await lease.release()

            probe.begin()
            tasks = [asyncio.create_task(contend(i)) for i in range(CALLERS)]
            await asyncio.sleep(RUN_S)
            await asyncio.to_thread(probe.stop)
            await asyncio.gather(*tasks)
            await asyncio.to_thread(probe.check)

    asyncio.run(scenario())


def _probe_key_idle(client: redis.Redis, i: int) -> bool:
    key = lease_keys("probe", f"k{i}")
    return client.exists(key[0]) == 0 and client.zcard(key[2]) == 0
