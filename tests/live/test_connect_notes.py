"""A worker's client notes every connection it starts, the first and each one made again after a
drop: the history's ``connect`` events, which the checker reads under a ``latency`` fault."""

from __future__ import annotations

import asyncio
import contextlib

import pytest
import redis

from fencedlease_lab.harness.topology import async_lease_client, lease_client

pytestmark = pytest.mark.live

NAME = "fencedlease-test:connect-notes"


def _kill_named(admin: redis.Redis) -> int:
    """Kill every connection named ``NAME``; how many there were."""
    ids = [c["id"] for c in admin.client_list() if c.get("name") == NAME]
    for client_id in ids:
        admin.client_kill_filter(_id=client_id)
    return len(ids)


def test_the_sync_client_notes_each_connection_it_makes(
    redis_url: str, redis_client: redis.Redis
) -> None:
    notes: list[int] = []
    client = lease_client(redis_url, 5.0, NAME, lambda: notes.append(1))
    assert isinstance(client, redis.Redis)
    try:
        assert client.ping() is True
        assert client.ping() is True  # the same pooled connection: no new note
        assert len(notes) == 1
        assert _kill_named(redis_client) == 1
        assert client.ping() is True  # the dead connection is made again
        assert len(notes) == 2
    finally:
        client.close()


def test_the_asyncio_client_notes_each_connection_it_makes(
    redis_url: str, redis_client: redis.Redis
) -> None:
    notes: list[int] = []

    async def main() -> list[int]:
        client = async_lease_client(redis_url, 5.0, NAME, lambda: notes.append(1))
        assert isinstance(client, redis.asyncio.Redis)
        try:
            await client.ping()
            await client.ping()
            counts = [len(notes)]
            counts.append(await asyncio.to_thread(_kill_named, redis_client))
            # redis-py makes the dead connection again on this command; an older one (5.0.1)
            # reports it broken once, and the next command makes it again
            with contextlib.suppress(redis.ConnectionError):
                await client.ping()
            await client.ping()
            counts.append(len(notes))
            return counts
        finally:
            await client.aclose()

    assert asyncio.run(main()) == [1, 1, 2]
