"""Two processes contend for one lease on an embedded Redis and print their fencing tokens.

    python scripts/contend.py [--rounds N]

Each process takes the lease (waiting up to 5 s), prints the fencing token it was granted, holds it
for a moment, and releases it. The tokens printed across both processes are all different and
increase in the order the grants happened: the property downstream storage relies on.
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import time

from fencedlease import LeaseManager
from fencedlease_lab.servers.redis import redis_endpoint


def worker(
    name: str, url: str, rounds: int, out: multiprocessing.Queue[tuple[float, str, int]]
) -> None:
    with LeaseManager.from_url(url, prefix="contend") as leases:
        for _ in range(rounds):
            with leases.hold(
                "report:daily", ttl_ms=2_000, wait_ms=5_000, retry_delay_ms=10
            ) as lease:
                assert lease.fencing_token is not None
                out.put((time.monotonic(), name, lease.fencing_token))
                print(
                    f"{name} holds the lease with fencing token {lease.fencing_token}", flush=True
                )
                time.sleep(0.02)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with redis_endpoint() as endpoint:
        print(f"Redis ({endpoint.kind}) at {endpoint.display_url}")
        ctx = multiprocessing.get_context("spawn")
        grants: multiprocessing.Queue[tuple[float, str, int]] = ctx.Queue()
        procs = [
            ctx.Process(target=worker, args=(name, endpoint.url, args.rounds, grants))
            for name in ("worker-a", "worker-b")
        ]
        for proc in procs:
            proc.start()
        for proc in procs:
            proc.join(60)
        seen = sorted(grants.get(timeout=5) for _ in range(2 * args.rounds))
    tokens = [token for _, _, token in seen]
    ok = tokens == sorted(set(tokens)) and all(p.exitcode == 0 for p in procs)
    print(f"tokens in grant order: {tokens} -> {'strictly increasing' if ok else 'VIOLATION'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
