"""What ``replica_acks`` costs: the median and p99 latency of an acquire and of a renewal with
``replica_acks=0`` and ``=1`` (and ``fencing="clock"``), on a primary and one replica of our own
on loopback (`fencedlease_lab.servers.redis.RedisServer`).

    PYTHONPATH=src python scripts/bench_replica_acks.py [--rounds 3000]

The numbers for docs/deployment.md come from here.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

from fencedlease import Lease, LeaseManager
from fencedlease_lab.servers.redis import RedisServer


def _timed(fn: Callable[[int], object], rounds: int) -> tuple[float, float]:
    samples = []
    for i in range(rounds):
        start = time.perf_counter()
        fn(i)
        samples.append((time.perf_counter() - start) * 1000)
    samples.sort()
    return statistics.median(samples), samples[int(len(samples) * 0.99)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3000)
    rounds = parser.parse_args().rounds
    with (
        RedisServer() as primary,
        RedisServer(extra_args=["--replicaof", "127.0.0.1", str(primary.port)]),
    ):
        with primary.client() as client:
            while client.info("replication").get("slave0", {}).get("state") != "online":
                time.sleep(0.05)  # the first sync (diskless, after repl-diskless-sync-delay)
        cases: tuple[tuple[str, dict[str, Any]], ...] = (
            ("replica_acks=0", {}),
            ("replica_acks=1", {"replica_acks": 1}),
            ("fencing=clock", {"fencing": "clock"}),
            ("replica_acks=1, fencing=clock", {"replica_acks": 1, "fencing": "clock"}),
        )
        for index, (label, options) in enumerate(cases):
            with LeaseManager.from_url(primary.url, prefix=f"bench{index}", **options) as m:
                acquire, renew = _measure(m, rounds)
            print(
                f"{label:32} acquire median {acquire[0]:.3f} ms p99 {acquire[1]:.3f} ms;"
                f" renew median {renew[0]:.3f} ms p99 {renew[1]:.3f} ms"
            )


def _measure(manager: LeaseManager, rounds: int) -> tuple[tuple[float, float], tuple[float, float]]:
    for i in range(200):  # warm up: connections, script cache
        manager.acquire(f"warm{i}", ttl_ms=60_000)
    leases: list[Lease] = []

    def acquire(i: int) -> None:
        lease = manager.acquire(f"k{i}", ttl_ms=60_000).lease
        assert lease is not None
        leases.append(lease)

    acquired = _timed(acquire, rounds)
    return acquired, _timed(lambda i: leases[i].renew(), rounds)


if __name__ == "__main__":
    main()
