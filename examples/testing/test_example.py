"""An example test suite for code that uses fencedlease, on the fixtures of its pytest plugin.

Run it from a clone: ``python -m pytest examples/testing`` (the plugin is loaded by its entry point
once fencedlease is installed; ``-p fencedlease.pytest_plugin`` loads it by hand).
"""

from __future__ import annotations

import asyncio

import pytest

from fencedlease import LeaseManager, LeaseNotAcquiredError
from fencedlease.aio import AsyncLeaseManager
from fencedlease.testing import FakeClock


def drain_outbox(leases: LeaseManager, sent: list[int | None]) -> bool:
    """The code under test: one drainer at a time; False when another holds the lease."""
    outcome = leases.with_lease("outbox:drain", lambda lease: sent.append(lease.fencing_token))
    return not outcome.skipped


def test_a_held_key_is_refused(lease_manager: LeaseManager) -> None:
    other = lease_manager.acquire("outbox:drain", ttl_ms=10_000)  # another drainer's lease
    assert other.lease is not None
    with pytest.raises(LeaseNotAcquiredError), lease_manager.hold("outbox:drain", ttl_ms=1):
        pass
    assert drain_outbox(lease_manager, []) is False
    other.lease.release()


@pytest.mark.fencedlease_backends("memory", "sqlite")
def test_expiry_is_a_step_of_the_test(lease_manager: LeaseManager, fake_clock: FakeClock) -> None:
    first = lease_manager.acquire("report", ttl_ms=60_000).lease
    assert first is not None
    assert not lease_manager.acquire("report", ttl_ms=60_000)
    fake_clock.advance(60_000)  # no sleep: the first lease has expired now
    second = lease_manager.acquire("report", ttl_ms=60_000).lease
    assert second is not None
    assert (first.fencing_token, second.fencing_token) == (1, 2)


@pytest.mark.fencedlease_backends("memory", "sqlite", "redis")
def test_every_run_gets_a_larger_token(lease_manager: LeaseManager) -> None:
    sent: list[int | None] = []
    assert drain_outbox(lease_manager, sent) is True
    assert drain_outbox(lease_manager, sent) is True
    assert sent == [1, 2]


@pytest.mark.parametrize("fencedlease_backend", ["memory", "redis"])
def test_the_asyncio_face(async_lease_manager: AsyncLeaseManager) -> None:
    async def main() -> list[int | None]:
        async with async_lease_manager as leases:
            tokens: list[int | None] = []
            for _ in range(2):
                async with leases.hold("outbox:drain", ttl_ms=10_000) as lease:
                    tokens.append(lease.fencing_token)
            return tokens

    assert asyncio.run(main()) == [1, 2]
