"""What the Sentinel checks cost: the median and p99 latency of a grant (an acquire and its
release) and of one renewal batch (``renew_many``, as the renewer sends it) of 1 and of 100
leases, over a ``redis+sentinel://`` URL with its default fencing (epoch tokens: the grant and
the batch, then ``SENTINEL MASTER`` on every sentinel at once) and over a ``redis://`` URL of the
same primary (no check), on a Sentinel deployment of our own on loopback
(`fencedlease_lab.servers.sentinel.SentinelDeployment`).

    PYTHONPATH=src python scripts/bench_sentinel_check.py [--rounds 2000]

Run with another checkout's ``src`` on ``PYTHONPATH`` to compare (the script uses only calls
every version has).

The numbers for docs/deployment.md come from here.
"""

from __future__ import annotations

import argparse
import statistics
import time

from fencedlease import LeaseManager
from fencedlease_lab.servers.sentinel import SentinelDeployment


def _batch_ms(manager: LeaseManager, size: int, rounds: int) -> tuple[float, float]:
    leases = [manager.acquire(f"b{size}:{i}", ttl_ms=600_000).lease for i in range(size)]
    items = [(lease.key, lease._state.owner_token, 600_000) for lease in leases if lease]
    assert len(items) == size
    backend = manager._backend
    for _ in range(50):  # warm up: connections, script cache
        backend.renew_many(items)
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        replies = backend.renew_many(items)
        samples.append((time.perf_counter() - start) * 1000)
        assert all(isinstance(reply, int) and reply > 0 for reply in replies), replies
    samples.sort()
    return statistics.median(samples), samples[int(len(samples) * 0.99)]


def _grant_ms(manager: LeaseManager, rounds: int) -> tuple[float, float]:
    for _ in range(50):  # warm up: connections, script cache
        lease = manager.acquire("grant", ttl_ms=600_000).lease
        assert lease is not None
        lease.release()
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        lease = manager.acquire("grant", ttl_ms=600_000).lease
        assert lease is not None
        lease.release()
        samples.append((time.perf_counter() - start) * 1000)
    samples.sort()
    return statistics.median(samples), samples[int(len(samples) * 0.99)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=2000)
    rounds = parser.parse_args().rounds
    with SentinelDeployment() as deployment:
        for index, (label, url) in enumerate(
            (
                ("redis:// (no check)", deployment.primary.url),
                ("redis+sentinel:// (checked)", deployment.url),
            )
        ):
            with LeaseManager.from_url(url, prefix=f"bench{index}") as manager:
                median, p99 = _grant_ms(manager, rounds)
                print(f"{label:28} grant + release: median {median:.3f} ms p99 {p99:.3f} ms")
                for size in (1, 100):
                    median, p99 = _batch_ms(manager, size, rounds)
                    print(f"{label:28} batch of {size:3}: median {median:.3f} ms p99 {p99:.3f} ms")


if __name__ == "__main__":
    main()
