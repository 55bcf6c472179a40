"""What epoch tokens cost on Redis Cluster: the median and p99 latency of a grant (an acquire and
its release) and of one renewal batch (``renew_many``, as the renewer sends it) of 1 and of 100
leases across slots, over a ``redis+cluster://`` URL with its default fencing (epoch tokens: each
grant and each batch confirmed by one read of every primary's ``CLUSTER NODES``, shared by the
calls waiting at once) and with ``fencing="counter"`` (no read), on a cluster of our own of three
primaries on loopback (`fencedlease_lab.servers.cluster.RedisClusterServers`). The last column
counts the majority's reads per call.

    PYTHONPATH=src:lab/src python scripts/bench_cluster_epoch.py [--rounds 1000]

The numbers for docs/deployment.md come from here.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from contextlib import ExitStack

from fencedlease import LeaseManager
from fencedlease._redis.replication import Fencing
from fencedlease_lab.servers.cluster import RedisClusterServers


def _reads(manager: LeaseManager) -> int:
    views = getattr(manager._backend, "_views", None)
    return 0 if views is None else int(views.reads)


def _timed(
    managers: dict[Fencing, LeaseManager], calls: dict[Fencing, Callable[[], object]], rounds: int
) -> dict[Fencing, str]:
    """Each mode's figures; the modes' calls alternate, so a load that comes and goes on the
    machine weighs on both alike."""
    samples: dict[Fencing, list[float]] = {mode: [] for mode in calls}
    before = {mode: _reads(managers[mode]) for mode in calls}
    for round_ in range(rounds + 50):  # the first 50 warm up: connections, script cache
        for mode, call in calls.items():
            start = time.perf_counter()
            call()
            if round_ >= 50:
                samples[mode].append((time.perf_counter() - start) * 1000)
    figures = {}
    for mode, taken in samples.items():
        taken.sort()
        median, p99 = statistics.median(taken), taken[int(len(taken) * 0.99)]
        per_call = (_reads(managers[mode]) - before[mode]) / (rounds + 50)
        figures[mode] = f"median {median:.3f} ms p99 {p99:.3f} ms reads/call {per_call:.2f}"
    return figures


def _grant(manager: LeaseManager) -> Callable[[], object]:
    def grant() -> None:
        lease = manager.acquire("grant", ttl_ms=600_000).lease
        assert lease is not None
        lease.release()

    return grant


def _batch(manager: LeaseManager, size: int) -> Callable[[], object]:
    leases = [manager.acquire(f"b{size}:{i}", ttl_ms=600_000).lease for i in range(size)]
    items = [(lease.key, lease._state.owner_token, 600_000) for lease in leases if lease]
    assert len(items) == size

    def renew() -> None:
        replies = manager._backend.renew_many(items)
        assert all(isinstance(reply, int) and reply > 0 for reply in replies), replies

    return renew


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=1000)
    rounds = parser.parse_args().rounds
    modes: tuple[Fencing, ...] = ("counter", "epoch")
    with RedisClusterServers(3) as cluster, ExitStack() as stack:
        managers = {
            mode: stack.enter_context(
                LeaseManager.from_url(cluster.url, prefix=f"bench-{mode}", fencing=mode)
            )
            for mode in modes
        }
        rows = {
            "grant + release": _timed(managers, {m: _grant(managers[m]) for m in modes}, rounds)
        }
        for size in (1, 100):
            calls = {m: _batch(managers[m], size) for m in modes}
            rows[f"batch of {size:3}"] = _timed(managers, calls, rounds)
        for what, figures in rows.items():
            for mode, figure in figures.items():
                print(f"fencing={mode!r:10} {what:16} {figure}")


if __name__ == "__main__":
    main()
