"""A jump of the wall clock neither shortens nor lengthens a lease, on both faces, on a real Redis.

The clock is the harness's :class:`~fencedlease_lab.harness.faults_clock.OffsetClock` (the
``clock`` fault's jumps, given to one manager as ``clock=``) over a
:class:`~fencedlease.testing.FakeClock`: monotonic time moves only when the test advances it,
and wall time is that plus an offset the test jumps. Redis keeps its own time and its TTL is
long compared with the real milliseconds the test takes, so every verdict here is the
library's deadline alone.
"""

from __future__ import annotations

import asyncio
import secrets
from datetime import datetime, timedelta, timezone

import pytest
import redis
import redis.asyncio

from fencedlease import Lease, LeaseManager, redis_keys
from fencedlease.aio import AsyncLease, AsyncLeaseManager
from fencedlease.testing import FakeClock
from fencedlease_lab.harness.faults_clock import OffsetClock

pytestmark = pytest.mark.live

TTL_MS = 60_000
JUMP_S = 10 * TTL_MS / 1000


def _clock() -> tuple[list[float], FakeClock, OffsetClock]:
    offsets = [0.0]
    fake = FakeClock()
    return offsets, fake, OffsetClock(offsets, 0, base=fake)


def _wall(fake: FakeClock, offset_s: float) -> datetime:
    return datetime.fromtimestamp(fake.time() + offset_s, timezone.utc)


def _jump_forwards(lease: Lease | AsyncLease, offsets: list[float], fake: FakeClock) -> None:
    """Ten TTLs forwards: the lease must not end early."""
    assert lease.expires_at == _wall(fake, 0) + timedelta(milliseconds=TTL_MS)
    offsets[0] = JUMP_S
    assert not lease.lost
    fake.advance(TTL_MS - 1)
    assert not lease.lost


def _jump_backwards(lease: Lease | AsyncLease, offsets: list[float], fake: FakeClock) -> None:
    """After a renewal under the jumped clock (the wall estimate follows it, nothing else does),
    ten TTLs backwards: the lease must not last longer."""
    assert lease.expires_at == _wall(fake, JUMP_S) + timedelta(milliseconds=TTL_MS)
    offsets[0] = -JUMP_S
    fake.advance(TTL_MS - 1)
    assert not lease.lost
    fake.advance(1)
    assert lease.lost
    assert lease.lost_reason is not None
    assert "ttl_ms passed" in lease.lost_reason


def test_sync_lease_deadline_ignores_wall_clock_jumps(redis_url: str) -> None:
    offsets, fake, clock = _clock()
    client = redis.Redis.from_url(redis_url)
    prefix = f"clockjump-{secrets.token_hex(4)}"
    manager = LeaseManager(client, prefix=prefix, clock=clock)
    try:
        lease = manager.acquire("k", ttl_ms=TTL_MS).lease
        assert lease is not None
        _jump_forwards(lease, offsets, fake)
        assert lease.renew() is True
        _jump_backwards(lease, offsets, fake)
        assert client.pttl(redis_keys(prefix, "k").lease) > 0  # Redis holds it: not its verdict
    finally:
        manager.close()
        client.close()


def test_async_lease_deadline_ignores_wall_clock_jumps(redis_url: str) -> None:
    asyncio.run(_async_case(redis_url))


async def _async_case(redis_url: str) -> None:
    offsets, fake, clock = _clock()
    client = redis.asyncio.Redis.from_url(redis_url)
    prefix = f"clockjump-{secrets.token_hex(4)}"
    manager = AsyncLeaseManager(client, prefix=prefix, clock=clock)
    try:
        lease = (await manager.acquire("k", ttl_ms=TTL_MS)).lease
        assert lease is not None
        _jump_forwards(lease, offsets, fake)
        assert await lease.renew() is True
        _jump_backwards(lease, offsets, fake)
        assert await client.pttl(redis_keys(prefix, "k").lease) > 0
    finally:
        await manager.close()
        await client.aclose()
