"""A holder left with a deposed primary, without ``replica_acks``: after a planned failover
(``SENTINEL FAILOVER``: the old primary stays a writable master for seconds) a holder that heard
no ``+switch-master`` goes on renewing on the old primary; those renewals must not count. Its
sentinels are behind proxies the test cuts: while no sentinel answers, the lease ends at its
deadline; once they answer again they name the new primary, and the holder is told at once."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from fencedlease import LeaseEvent, LeaseLostError, LeaseManager
from fencedlease._core.state import LossReason
from fencedlease.aio import AsyncLeaseManager
from fencedlease_lab.servers.redis import free_port
from fencedlease_lab.servers.sentinel import SentinelDeployment
from fencedlease_lab.servers.toxiproxy import toxiproxy_endpoint

pytestmark = [
    pytest.mark.live,
    pytest.mark.sentinel,
    pytest.mark.failover,
    pytest.mark.timeout(300),  # a failover takes seconds; more with both cores busy
]

NO_SENTINEL = "not confirmed: no sentinel named the primary of 'fencedlease'"
BOUND_S = 120.0  # a safety bound on waits that an event ends


@contextlib.contextmanager
def _proxied_sentinels(deployment: SentinelDeployment) -> Iterator[tuple[str, list[Any]]]:
    """A ``redis+sentinel://`` URL whose sentinels are reached through proxies, and the proxies
    (``disable()`` cuts the holder off from every sentinel, ``enable()`` lets it in again)."""
    with toxiproxy_endpoint(sources=("embedded",)) as endpoint:
        client = endpoint.client()
        proxies = []
        try:
            for index, port in enumerate(deployment.sentinel_ports):
                listen = f"127.0.0.1:{free_port()}"
                proxies.append(
                    client.create(upstream=f"127.0.0.1:{port}", name=f"s{index}", listen=listen)
                )
            hosts = ",".join(proxy.listen for proxy in proxies)
            yield f"redis+sentinel://{hosts}/{deployment.service}", proxies
        finally:
            for proxy in proxies:
                proxy.destroy()


class _Renewals:
    """The lease's renew events, split at `failover_started`; `unconfirmed` is set by the first
    renewal no sentinel confirmed."""

    def __init__(self) -> None:
        self.unconfirmed = threading.Event()
        self.failing_over = False
        self.after: list[LeaseEvent] = []

    def __call__(self, event: LeaseEvent) -> None:
        if event.kind != "renew":
            return
        if event.status == "error" and NO_SENTINEL in (event.reason or ""):
            self.unconfirmed.set()
        if self.failing_over:
            self.after.append(event)

    def confirmed_after(self) -> list[LeaseEvent]:
        return [event for event in self.after if event.status == "confirmed"]


def _take_over_on_new_primary(deployment: SentinelDeployment, new_port: int, token: int) -> int:
    """An operator frees ``k`` on the new primary and another holder takes it there; the
    other holder's token."""
    with deployment.server_on(new_port).client() as new_primary:
        stored = new_primary.get("fencedlease:{k}")
        assert stored is not None and stored.startswith(f"{token}:".encode())  # replicated
    with LeaseManager.from_url(deployment.url) as other:
        assert other.force_release("k")
        lease = other.acquire("k", ttl_ms=120_000).lease
        assert lease is not None and lease.fencing_token == token + 1
        return token + 1


def _cut_off_and_fail_over(
    deployment: SentinelDeployment, proxies: list[Any], renewals: _Renewals
) -> int:
    """Cut the holder off from the sentinels, wait until a renewal went unconfirmed (every
    renewal from then on ran after the cut), and fail the primary over: the new primary's port.
    The grant has reached every replica first (WAIT): under load it could still be in flight
    when the failover promoted one, and the new primary would not hold it."""
    with deployment.server_on(deployment.primary_port()).client() as primary:
        replicas = len(deployment.replicas)
        assert primary.execute_command("WAIT", replicas, 60_000) == replicas
    for proxy in proxies:
        proxy.disable()
    assert renewals.unconfirmed.wait(BOUND_S)
    renewals.failing_over = True
    with deployment.watch_switch() as watch:
        deployment.failover()
        new = watch.wait()
    assert new != deployment.primary.port
    return new


def _rejoin(proxies: list[Any]) -> None:
    """Reconnect the holder to the sentinels once the +switch-master is over: it missed it."""
    for proxy in proxies:
        proxy.enable()


def test_a_holder_cut_off_from_the_sentinels_is_lost_at_its_deadline(
    sentinel_deployment: SentinelDeployment,
) -> None:
    deployment = sentinel_deployment
    renewals = _Renewals()
    with (
        _proxied_sentinels(deployment) as (url, proxies),
        LeaseManager.from_url(url, on_event=renewals) as manager,
        pytest.raises(LeaseLostError),
        manager.hold("k", ttl_ms=3_000) as lease,
    ):
        _cut_off_and_fail_over(deployment, proxies, renewals)
        assert lease.wait_lost(int(BOUND_S * 1000))
        assert lease.lost_reason == LossReason.DEADLINE
    assert renewals.confirmed_after() == []
    assert {event.status for event in renewals.after} <= {"error"}


def test_a_holder_that_missed_the_switch_is_told_by_the_sentinels(
    sentinel_deployment: SentinelDeployment, caplog: pytest.LogCaptureFixture
) -> None:
    deployment = sentinel_deployment
    old = deployment.primary.port
    renewals = _Renewals()
    with (
        _proxied_sentinels(deployment) as (url, proxies),
        LeaseManager.from_url(url, on_event=renewals) as manager,
        pytest.raises(LeaseLostError),
        # a ttl far longer than the test: the loss is the new primary's answer, not a deadline
        manager.hold("k", ttl_ms=300_000, heartbeat_ms=200) as lease,
    ):
        assert lease.fencing_token == 1
        new = _cut_off_and_fail_over(deployment, proxies, renewals)
        _take_over_on_new_primary(deployment, new, 1)
        with caplog.at_level(logging.WARNING, logger="fencedlease"):
            _rejoin(proxies)
            assert lease.wait_lost(int(BOUND_S * 1000))
        assert lease.lost_reason == LossReason.RENEW_REFUSED
    assert renewals.confirmed_after() == []
    assert f"a renewal ran on 127.0.0.1:{old}, the sentinels name 127.0.0.1:{new}" in caplog.text


def test_an_asyncio_holder_cut_off_from_the_sentinels_is_lost_at_its_deadline(
    sentinel_deployment: SentinelDeployment,
) -> None:
    deployment = sentinel_deployment
    renewals = _Renewals()

    async def main(url: str, proxies: list[Any]) -> str | None:
        loop = asyncio.get_running_loop()
        async with AsyncLeaseManager.from_url(url, on_event=renewals) as manager:
            with pytest.raises(LeaseLostError):
                async with manager.hold("k", ttl_ms=3_000) as lease:
                    await loop.run_in_executor(
                        None, _cut_off_and_fail_over, deployment, proxies, renewals
                    )
                    assert await lease.wait_lost(int(BOUND_S * 1000))
            return lease.lost_reason

    with _proxied_sentinels(deployment) as (url, proxies):
        assert asyncio.run(main(url, proxies)) == LossReason.DEADLINE
    assert renewals.confirmed_after() == []
    assert {event.status for event in renewals.after} <= {"error"}


def test_an_asyncio_holder_that_missed_the_switch_is_told_by_the_sentinels(
    sentinel_deployment: SentinelDeployment, caplog: pytest.LogCaptureFixture
) -> None:
    deployment = sentinel_deployment
    old = deployment.primary.port
    renewals = _Renewals()
    ports: list[int] = []

    async def main(url: str, proxies: list[Any]) -> str | None:
        loop = asyncio.get_running_loop()
        async with AsyncLeaseManager.from_url(url, on_event=renewals) as manager:
            with pytest.raises(LeaseLostError):
                async with manager.hold("k", ttl_ms=300_000, heartbeat_ms=200) as lease:
                    assert lease.fencing_token == 1
                    new = await loop.run_in_executor(
                        None, _cut_off_and_fail_over, deployment, proxies, renewals
                    )
                    ports.append(new)
                    await loop.run_in_executor(None, _take_over_on_new_primary, deployment, new, 1)
                    await loop.run_in_executor(None, _rejoin, proxies)
                    assert await lease.wait_lost(int(BOUND_S * 1000))
            return lease.lost_reason

    with (
        _proxied_sentinels(deployment) as (url, proxies),
        caplog.at_level(logging.WARNING, logger="fencedlease.aio"),
    ):
        assert asyncio.run(main(url, proxies)) == LossReason.RENEW_REFUSED
    assert renewals.confirmed_after() == []
    assert (
        f"a renewal ran on 127.0.0.1:{old}, the sentinels name 127.0.0.1:{ports[0]}" in caplog.text
    )
