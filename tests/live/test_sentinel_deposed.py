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
from collections.abc import Callable, Iterator
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

NO_SENTINEL = "not confirmed: the sentinels of 'fencedlease' name no primary: no majority"
ONE_ANSWER = (
    "BackendError: renew 'k': not confirmed: the sentinels of 'fencedlease' name no primary:"
    " no majority: 1 of 3 configured voters agree on the primary and its epoch, 2 needed"
)
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
    other holder's token: the floor of epoch 1, the first failover's (epoch tokens, the
    default of a ``redis+sentinel://`` URL)."""
    with deployment.server_on(new_port).client() as new_primary:
        stored = new_primary.get("fencedlease:{k}")
        assert stored is not None and stored.startswith(f"{token}:".encode())  # replicated
    with LeaseManager.from_url(deployment.url) as other:
        assert other.force_release("k")
        lease = other.acquire("k", ttl_ms=120_000).lease
        assert lease is not None and lease.fencing_token == 2**40 > token
        return lease.fencing_token


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


def _asyncio_lost_at_deadline(
    deployment: SentinelDeployment, cut: Callable[[list[Any]], object], renewals: _Renewals
) -> None:
    """An asyncio holder of ``k`` (``ttl_ms`` 3 s) over proxied sentinels; ``cut(proxies)`` run
    off the loop; the lease must end at its deadline."""

    async def main(url: str, proxies: list[Any]) -> str | None:
        loop = asyncio.get_running_loop()
        async with AsyncLeaseManager.from_url(url, on_event=renewals) as manager:
            with pytest.raises(LeaseLostError):
                async with manager.hold("k", ttl_ms=3_000) as lease:
                    await loop.run_in_executor(None, cut, proxies)
                    assert await lease.wait_lost(int(BOUND_S * 1000))
            return lease.lost_reason

    with _proxied_sentinels(deployment) as (url, proxies):
        assert asyncio.run(main(url, proxies)) == LossReason.DEADLINE


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
    _asyncio_lost_at_deadline(
        deployment, lambda proxies: _cut_off_and_fail_over(deployment, proxies, renewals), renewals
    )
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


def _only_one_sentinel(proxies: list[Any], renewals: _Renewals) -> None:
    """Cut the holder off from two of the three sentinels (the one left names the primary the
    holder renews on, as before), and wait until a renewal went unconfirmed."""
    for proxy in proxies[1:]:
        proxy.disable()
    renewals.failing_over = True
    assert renewals.unconfirmed.wait(BOUND_S)


def test_a_minority_sentinel_confirms_no_renewal(sentinel_deployment: SentinelDeployment) -> None:
    """A holder that reaches one sentinel of three is told its lease is lost within ``ttl_ms``
    (at its deadline), though that sentinel names the very primary the renewals run on."""
    deployment = sentinel_deployment
    renewals = _Renewals()
    with (
        _proxied_sentinels(deployment) as (url, proxies),
        LeaseManager.from_url(url, on_event=renewals) as manager,
        pytest.raises(LeaseLostError),
        manager.hold("k", ttl_ms=3_000) as lease,
    ):
        assert lease.fencing_token == 1
        _only_one_sentinel(proxies, renewals)
        assert lease.wait_lost(int(BOUND_S * 1000))
        assert lease.lost_reason == LossReason.DEADLINE
    assert deployment.primary_port() == deployment.primary.port  # no failover: only the cut
    assert renewals.confirmed_after() == []
    assert {event.reason for event in renewals.after if event.status == "error"} == {ONE_ANSWER}


def test_an_asyncio_holder_with_a_minority_sentinel_is_lost_at_its_deadline(
    sentinel_deployment: SentinelDeployment,
) -> None:
    """The asyncio face: one sentinel of three confirms no renewal; the lease ends at its
    deadline."""
    renewals = _Renewals()
    _asyncio_lost_at_deadline(
        sentinel_deployment, lambda proxies: _only_one_sentinel(proxies, renewals), renewals
    )
    assert renewals.confirmed_after() == []
    assert {event.reason for event in renewals.after if event.status == "error"} == {ONE_ANSWER}
