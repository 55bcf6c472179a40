"""Lease events on a real Redis, both faces: granted, confirmed renewals whose deadline is the
send plus the TTL, a refused renewal and the loss, the release sent and its reply."""

from __future__ import annotations

import asyncio
import queue

import pytest
import redis
import redis.asyncio

from fencedlease import LeaseEvent, LeaseLostError, LeaseManager
from fencedlease._core.state import LossReason
from fencedlease.aio import AsyncLeaseManager

pytestmark = pytest.mark.live

PATIENCE_S = 30.0  # an upper bound on waiting for an event, never a timing window


def take(events: queue.Queue[LeaseEvent], kind: str) -> LeaseEvent:
    """The next event of ``kind`` (renewals may come in between)."""
    while True:
        event = events.get(timeout=PATIENCE_S)
        if event.kind == kind:
            return event


def check_sequence(seen: list[LeaseEvent], token: int, next_token: int) -> None:
    """The events of one run of :func:`test_events_sync_live`'s steps, either face."""
    first = [e for e in seen if e.fencing_token == token]
    assert [(e.kind, e.status) for e in first if e.kind != "renew"] == [
        ("acquire", "granted"), ("release", "sent"), ("release", "released"),
    ]  # fmt: skip
    renewals = [e for e in first if e.kind == "renew"]
    assert renewals and {e.status for e in renewals} == {"confirmed"}
    for e in renewals:
        assert e.sent_monotonic is not None and e.deadline_monotonic is not None
        assert e.deadline_monotonic == pytest.approx(e.sent_monotonic + 0.6, abs=1e-6)
        assert e.duration_ms is not None and e.duration_ms >= 0
    second = [(e.kind, e.status, e.reason) for e in seen if e.fencing_token == next_token]
    assert second[0] == ("acquire", "granted", None)
    refused = second.index(("renew", "refused", None))
    assert second[refused + 1] == ("lost", "lost", LossReason.RENEW_REFUSED)
    assert ("renew", "confirmed", None) not in second[refused:]


def test_events_sync_live(redis_client: redis.Redis) -> None:
    events: queue.Queue[LeaseEvent] = queue.Queue()
    seen: list[LeaseEvent] = []

    def hook(event: LeaseEvent) -> None:
        seen.append(event)
        events.put(event)

    with LeaseManager(redis_client, prefix="ev", on_event=hook) as leases:
        with leases.hold("k", ttl_ms=600, heartbeat_ms=100) as lease:
            token = lease.fencing_token
            take(events, "renew")
            take(events, "renew")
        with pytest.raises(LeaseLostError), leases.hold("k", ttl_ms=600, heartbeat_ms=100) as b:
            assert leases.force_release("k")
            take(events, "lost")
        assert token is not None and b.fencing_token == token + 1
        assert all(lease.owner_token not in repr(e) for e in seen)
    check_sequence(seen, token, token + 1)


def test_events_asyncio_live(redis_url: str) -> None:
    seen: list[LeaseEvent] = []

    async def main() -> int:
        client = redis.asyncio.Redis.from_url(redis_url)
        await client.flushdb()
        lost, renewed_twice = asyncio.Event(), asyncio.Event()
        renewed: list[LeaseEvent] = []

        def hook(event: LeaseEvent) -> None:
            seen.append(event)
            if event.kind == "renew":
                renewed.append(event)
                if len(renewed) == 2:
                    renewed_twice.set()
            if event.kind == "lost":
                lost.set()

        async with AsyncLeaseManager(client, prefix="ev", on_event=hook) as leases:
            async with leases.hold("k", ttl_ms=600, heartbeat_ms=100) as lease:
                await asyncio.wait_for(renewed_twice.wait(), PATIENCE_S)
            with pytest.raises(LeaseLostError):
                async with leases.hold("k", ttl_ms=600, heartbeat_ms=100):
                    assert await leases.force_release("k")
                    await asyncio.wait_for(lost.wait(), PATIENCE_S)
        await client.aclose()
        assert lease.fencing_token is not None
        return lease.fencing_token

    token = asyncio.run(main())
    check_sequence(seen, token, token + 1)
