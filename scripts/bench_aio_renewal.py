"""Benchmark: many leases held at once in one event loop, renewed by one task per manager.

    python scripts/bench_aio_renewal.py          # 10,000 leases, ttl 30 s, 3 heartbeats (~30 s)
    python scripts/bench_aio_renewal.py --ttl-ms 4000 --heartbeat-ms 1000 --ticks 5   # quicker

What it does: starts a Redis of its own (or uses ``--url``), holds ``--leases`` leases on as many
keys through ``AsyncLeaseManager.hold`` (each in its own task, all idle), lets ``--ticks``
heartbeats pass, and reports:

- renewal round trips per heartbeat (the bound: at most ``ceil(leases / batch size)``),
  counted by the renewer and checked against the batches actually sent;
- the renewer's CPU, as a share of one core: the process's CPU time over the measured window
  (``time.process_time``), minus an idle baseline of the same length measured before any lease
  was taken; nothing but the renewal task runs in the window, and Redis is another process;
- how many leases were lost (must be 0), and that every release at the end returned True.

Exit status 1 if a bound is broken. Bind: 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import sys
import time
from collections.abc import Sequence
from contextlib import AsyncExitStack

import redis.asyncio

from fencedlease.aio import AsyncLease, AsyncLeaseManager
from fencedlease_lab.servers.redis import redis_endpoint


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--leases", type=int, default=10_000)
    parser.add_argument("--ttl-ms", type=int, default=30_000)
    parser.add_argument("--heartbeat-ms", type=int, default=None, help="default ttl_ms // 4")
    parser.add_argument("--ticks", type=int, default=3, help="heartbeats to measure")
    parser.add_argument("--batch-size", type=int, default=500)
    parser.add_argument("--connections", type=int, default=32, help="client pool size")
    parser.add_argument("--url", default=None, help="a Redis to use instead of our own")
    return parser.parse_args(argv)


async def _bench(url: str, args: argparse.Namespace) -> int:
    heartbeat_ms = args.heartbeat_ms or max(1, args.ttl_ms // 4)
    heartbeat_s = heartbeat_ms / 1000
    window_s = args.ticks * heartbeat_s
    bound = math.ceil(args.leases / args.batch_size)

    pool = redis.asyncio.BlockingConnectionPool.from_url(url, max_connections=args.connections)
    client = redis.asyncio.Redis(connection_pool=pool)
    await client.flushdb()

    # Idle baseline: the same loop, the same length of time, nothing to do.
    cpu0 = time.process_time()
    await asyncio.sleep(min(window_s, 5.0))
    baseline_per_s = (time.process_time() - cpu0) / min(window_s, 5.0)

    batches: list[tuple[float, int]] = []
    async with AsyncExitStack() as stack:
        leases = await stack.enter_async_context(
            AsyncLeaseManager(client, prefix="bench", renew_batch_size=args.batch_size)
        )
        backend = leases.backend
        renew_many = backend.renew_many

        async def counted(items: Sequence[tuple[str, str, int]]) -> list[int | BaseException]:
            batches.append((time.monotonic(), len(items)))
            return await renew_many(items)

        backend.renew_many = counted  # type: ignore[method-assign]

        held: list[AsyncLease] = []
        all_held, stop = asyncio.Event(), asyncio.Event()
        errors: list[BaseException] = []
        released: list[bool] = []

        # Acquire with bounded concurrency: 10,000 acquires queued on the pool at once would
        # also queue the renewer's pipeline behind them (see docs/asyncio.md, "Connections").
        entering = asyncio.Semaphore(max(1, args.connections - 2))

        async def holder(i: int) -> None:
            hold = leases.hold(
                f"k{i}", ttl_ms=args.ttl_ms, heartbeat_ms=heartbeat_ms, on_renew_error=errors.append
            )
            async with entering:
                lease = await hold.__aenter__()
            try:
                held.append(lease)
                if len(held) == args.leases:
                    all_held.set()
                await stop.wait()
            finally:
                await hold.__aexit__(None, None, None)
            released.append(lease._state.released)

        started = time.monotonic()
        tasks = [asyncio.create_task(holder(i)) for i in range(args.leases)]
        await all_held.wait()
        acquired_s = time.monotonic() - started

        # Let one heartbeat pass so every lease has been renewed once, then measure.
        await asyncio.sleep(heartbeat_s * 1.5)
        trips0, cpu0, wall0 = leases.renewer.round_trips, time.process_time(), time.monotonic()
        first_batch = len(batches)
        await asyncio.sleep(window_s)
        trips1, cpu1, wall1 = leases.renewer.round_trips, time.process_time(), time.monotonic()
        window = batches[first_batch:]

        lost = sum(1 for lease in held if lease.lost)
        stop.set()
        results = await asyncio.gather(*tasks, return_exceptions=True)
    await client.aclose()

    failures = [r for r in results if isinstance(r, BaseException)]
    wall = wall1 - wall0
    trips = trips1 - trips0
    ticks = wall / heartbeat_s
    cpu_s = (cpu1 - cpu0) - baseline_per_s * wall
    renewed = sum(size for _, size in window)
    per_tick = trips / ticks
    sizes = [size for _, size in window]
    rows = [
        ("leases held at once", f"{len(held):,} on {len(held):,} keys"),
        ("ttl / heartbeat", f"{args.ttl_ms} ms / {heartbeat_ms} ms, batch size {args.batch_size}"),
        ("acquired in", f"{acquired_s:.2f} s ({args.connections} connections)"),
        ("measured window", f"{wall:.2f} s = {ticks:.2f} heartbeats"),
        ("renewal round trips", f"{trips} ({per_tick:.2f} per heartbeat; bound {bound})"),
        ("renewals sent", f"{renewed:,} ({renewed / ticks:,.0f} per heartbeat)"),
        ("batch sizes", f"min {min(sizes)} max {max(sizes)}"),
        ("renewer CPU", f"{cpu_s:.3f} s = {100 * cpu_s / wall:.2f}% of one core"),
        (
            "  per heartbeat",
            f"{1000 * cpu_s / ticks:.1f} ms = {1e6 * cpu_s / ticks / max(1, len(held)):.1f} us"
            " per lease",
        ),
        ("  idle baseline", f"{100 * baseline_per_s:.3f}% of one core (subtracted)"),
        ("leases lost", f"{lost}"),
        ("failed renewal round trips", f"{len(errors)}"),
        ("released at the end", f"{sum(released):,} of {len(held):,}"),
    ]
    for label, value in rows:
        print(f"{label:<28}{value}")
    ok = (
        math.floor(per_tick) <= bound
        and lost == 0
        and not failures
        and sum(released) == len(held) == args.leases
    )
    print("OK" if ok else "BOUND BROKEN")
    return 0 if ok else 1


async def _main(args: argparse.Namespace) -> int:
    if args.url:
        return await _bench(args.url, args)
    with redis_endpoint() as endpoint:
        return await _bench(endpoint.url, args)


if __name__ == "__main__":
    sys.exit(asyncio.run(_main(_parse(None))))
