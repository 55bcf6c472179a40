"""Lease events (``on_event``): the exact sequences both faces report, on a FakeClock and the
memory backend; a raising hook; the hook's validation; no secret in an event."""

from __future__ import annotations

import asyncio
import logging
import queue
from collections.abc import Sequence

import pytest

from fencedlease import (
    BackendError,
    LeaseEvent,
    LeaseLostError,
    LeaseManager,
    LeaseNotAcquiredError,
    MemoryBackend,
    ValidationError,
)
from fencedlease._core.protocol import AcquireReply
from fencedlease._core.state import LossReason
from fencedlease.aio import AsyncLeaseManager
from fencedlease.backends.memory import AsyncMemoryBackend
from fencedlease.testing import FakeClock

PATIENCE_S = 30.0  # an upper bound on waiting for the renewer thread, never a timing window


def brief(event: LeaseEvent) -> tuple[object, ...]:
    """The fields a sequence is compared by (the fingerprint is random per grant)."""
    return (
        event.kind, event.status, event.key, event.fencing_token, event.at_monotonic,
        event.sent_monotonic, event.duration_ms, event.deadline_monotonic, event.reason,
    )  # fmt: skip


class Events:
    """A hook that queues every event, and takes them in order."""

    def __init__(self) -> None:
        self.queue: queue.Queue[LeaseEvent] = queue.Queue()
        self.seen: list[LeaseEvent] = []

    def __call__(self, event: LeaseEvent) -> None:
        self.queue.put(event)

    def take(self, n: int) -> list[tuple[object, ...]]:
        got = [self.queue.get(timeout=PATIENCE_S) for _ in range(n)]
        self.seen += got
        return [brief(e) for e in got]

    def drain(self) -> list[tuple[object, ...]]:
        got = []
        while not self.queue.empty():
            got.append(self.queue.get_nowait())
        self.seen += got
        return [brief(e) for e in got]


class FailingRenewals(MemoryBackend):
    """Every renewal round trip fails (a store that does not answer)."""

    def renew_many(self, items: Sequence[tuple[str, str, int]]) -> list[int | BaseException]:
        raise BackendError("renew: connection reset")


# -- the sync face ------------------------------------------------------------------------------


def test_sync_acquire_renew_release_sequence() -> None:
    """acquire granted, a confirmed renewal moving the deadline, the release sent and its reply;
    a second acquire of the held key is not granted."""
    clock, events = FakeClock(), Events()
    with LeaseManager(MemoryBackend(clock=clock), clock=clock, on_event=events) as leases:
        with leases.hold("k", ttl_ms=1_000, heartbeat_ms=250) as lease:
            assert events.take(1) == [("acquire", "granted", "k", 1, 0.0, 0.0, 0.0, 1.0, None)]
            clock.advance(250)
            assert events.take(1) == [("renew", "confirmed", "k", 1, 0.25, 0.25, 0.0, 1.25, None)]
            assert not leases.acquire("k", ttl_ms=1_000)
            assert events.take(1) == [("acquire", "not-granted", "k", None, 0.25, 0.25, 0.0,
                                       None, None)]  # fmt: skip
            clock.advance(100)
        assert events.drain() == [
            ("release", "sent", "k", 1, 0.35, 0.35, 0.0, 1.25, None),
            ("release", "released", "k", 1, 0.35, 0.35, 0.0, 1.25, None),
        ]
        fingerprints = {e.owner_fingerprint for e in events.seen if e.fencing_token == 1}
        assert fingerprints == {lease.owner_fingerprint}
        assert all(lease.owner_token not in repr(e) for e in events.seen)


def test_sync_refused_renewal_then_loss() -> None:
    """A 0 renewal reply is reported as refused, then the loss with its reason; the hold ends in
    LeaseLostError (its owner-checked release is refused)."""
    clock, events = FakeClock(), Events()
    backend = MemoryBackend(clock=clock)
    with LeaseManager(backend, clock=clock, on_event=events) as leases:
        with pytest.raises(LeaseLostError), leases.hold("k", ttl_ms=1_000, heartbeat_ms=250):
            events.take(1)
            assert backend.force_release("k")
            clock.advance(250)
            assert events.take(2) == [
                ("renew", "refused", "k", 1, 0.25, 0.25, 0.0, 1.0, None),
                ("lost", "lost", "k", 1, 0.25, None, None, 1.0, LossReason.RENEW_REFUSED),
            ]
        assert [(e[0], e[1]) for e in events.drain()] == [
            ("release", "sent"),
            ("release", "refused"),
        ]


def test_sync_failed_renewals_then_loss_at_the_deadline() -> None:
    """A failed round trip is an error event per lease (not a loss); silence until the deadline
    is the loss, reported once."""
    clock, events = FakeClock(), Events()
    error = "BackendError: renew: connection reset"
    leases = LeaseManager(FailingRenewals(clock=clock), clock=clock, on_event=events)
    with leases, pytest.raises(LeaseLostError), leases.hold("k", ttl_ms=1_000, heartbeat_ms=400):
        events.take(1)
        clock.advance(400)
        assert events.take(1) == [("renew", "error", "k", 1, 0.4, None, None, 1.0, error)]
        clock.advance(600)
        assert events.take(1)[-1] == (
            "lost", "lost", "k", 1, 1.0, None, None, 1.0, LossReason.DEADLINE,
        )  # fmt: skip


def test_sync_acquire_error_and_raising_hook(caplog: pytest.LogCaptureFixture) -> None:
    """A store error ends the acquire with an error event; a hook that raises is logged and the
    library goes on as if it had returned."""
    clock = FakeClock()

    class Broken(MemoryBackend):
        def acquire(self, key: str, owner_token: str, ttl_ms: int) -> AcquireReply:
            raise BackendError("acquire: connection refused")

    seen: list[LeaseEvent] = []

    def hook(event: LeaseEvent) -> None:
        seen.append(event)
        raise RuntimeError("hook bug")

    leases = LeaseManager(Broken(clock=clock), clock=clock, on_event=hook)
    with leases, caplog.at_level(logging.ERROR, logger="fencedlease"), pytest.raises(BackendError):
        leases.acquire("k", ttl_ms=1_000)
    assert [brief(e) for e in seen] == [
        ("acquire", "error", "k", None, 0.0, 0.0, 0.0, None,
         "BackendError: acquire: connection refused"),
    ]  # fmt: skip
    assert [r.getMessage() for r in caplog.records] == ["on_event hook raised; ignored"]


def test_sync_close_reports_the_loss() -> None:
    """close() while a hold runs: the loss (reason: closed), then the release close sends."""
    clock, events = FakeClock(), Events()
    leases = LeaseManager(MemoryBackend(clock=clock), clock=clock, on_event=events)
    with pytest.raises(LeaseLostError), leases.hold("k", ttl_ms=1_000, heartbeat_ms=250):
        events.take(1)
        leases.close()
        assert [(e[0], e[1], e[8]) for e in events.take(3)] == [
            ("lost", "lost", LossReason.CLOSED),
            ("release", "sent", None),
            ("release", "released", None),
        ]


@pytest.mark.parametrize("bad", [3, "hook"])
def test_on_event_must_be_callable(bad: object) -> None:
    for make in (
        lambda: LeaseManager(MemoryBackend(), on_event=bad),  # type: ignore[arg-type]
        lambda: LeaseManager.from_url("memory://", on_event=bad),  # type: ignore[arg-type]
        lambda: AsyncLeaseManager(AsyncMemoryBackend(), on_event=bad),  # type: ignore[arg-type]
        lambda: AsyncLeaseManager.from_url("memory://", on_event=bad),  # type: ignore[arg-type]
    ):
        with pytest.raises(ValidationError) as info:
            make()
        assert info.value.argument == "on_event"


def test_on_event_must_not_be_a_coroutine_function() -> None:
    async def hook(event: LeaseEvent) -> None:
        pass

    with pytest.raises(ValidationError) as info:
        LeaseManager(MemoryBackend(), on_event=hook)
    assert info.value.argument == "on_event"


def test_from_url_passes_the_hook_on() -> None:
    events = Events()
    with LeaseManager.from_url("memory://", on_event=events) as leases:
        lease = leases.acquire("k", ttl_ms=1_000).lease
        assert lease is not None and lease.release()
    assert [(e[0], e[1]) for e in events.drain()] == [
        ("acquire", "granted"), ("release", "sent"), ("release", "released"),
    ]  # fmt: skip


# -- the asyncio face ---------------------------------------------------------------------------


async def settle() -> None:
    for _ in range(20):  # the renewal task runs within a few loop iterations
        await asyncio.sleep(0)


def test_asyncio_sequence_matches_the_sync_face() -> None:
    """The same steps on the asyncio face report the same events: granted, confirmed, not
    granted, refused + lost (another manager's force release), release of a second grant."""
    clock, events = FakeClock(), Events()
    backend = AsyncMemoryBackend(clock=clock)

    async def main() -> None:
        async with AsyncLeaseManager(backend, clock=clock, on_event=events) as leases:
            async with leases.hold("k", ttl_ms=1_000, heartbeat_ms=250):
                clock.advance(250)
                leases.renewer.wake()
                await settle()
                assert not await leases.acquire("k", ttl_ms=1_000)
                clock.advance(100)
            with pytest.raises(LeaseLostError):
                async with leases.hold("k", ttl_ms=1_000, heartbeat_ms=250):
                    assert await leases.force_release("k")
                    clock.advance(250)
                    leases.renewer.wake()
                    await settle()

    asyncio.run(main())
    assert events.drain() == [
        ("acquire", "granted", "k", 1, 0.0, 0.0, 0.0, 1.0, None),
        ("renew", "confirmed", "k", 1, 0.25, 0.25, 0.0, 1.25, None),
        ("acquire", "not-granted", "k", None, 0.25, 0.25, 0.0, None, None),
        ("release", "sent", "k", 1, 0.35, 0.35, 0.0, 1.25, None),
        ("release", "released", "k", 1, 0.35, 0.35, 0.0, 1.25, None),
        ("acquire", "granted", "k", 2, 0.35, 0.35, 0.0, 1.35, None),
        ("renew", "refused", "k", 2, 0.6, 0.6, 0.0, 1.35, None),
        ("lost", "lost", "k", 2, 0.6, None, None, 1.35, LossReason.RENEW_REFUSED),
        ("release", "sent", "k", 2, 0.6, 0.6, 0.0, 1.35, None),
        ("release", "refused", "k", 2, 0.6, 0.6, 0.0, 1.35, None),
    ]


def test_asyncio_acquire_not_granted_by_hold() -> None:
    clock, events = FakeClock(), Events()
    backend = AsyncMemoryBackend(clock=clock)

    async def main() -> None:
        async with (
            AsyncLeaseManager(backend, clock=clock) as other,
            AsyncLeaseManager(backend, clock=clock, on_event=events) as leases,
        ):
            assert await other.acquire("k", ttl_ms=1_000)
            with pytest.raises(LeaseNotAcquiredError):
                async with leases.hold("k", ttl_ms=1_000):
                    pass

    asyncio.run(main())
    assert events.drain() == [("acquire", "not-granted", "k", None, 0.0, 0.0, 0.0, None, None)]


def test_manual_renewals_are_reported_on_both_faces() -> None:
    """lease.renew() reports its answer as the renewer does: confirmed (the new deadline), then
    refused and the loss once the key is gone."""
    clock, events = FakeClock(), Events()
    expected = [
        ("acquire", "granted", "k", 1, 0.0, 0.0, 0.0, 1.0, None),
        ("renew", "confirmed", "k", 1, 0.1, 0.1, 0.0, 1.1, None),
        ("renew", "refused", "k", 1, 0.2, 0.2, 0.0, 1.1, None),
        ("lost", "lost", "k", 1, 0.2, None, None, 1.1, LossReason.RENEW_REFUSED),
    ]
    backend = MemoryBackend(clock=clock)
    with LeaseManager(backend, clock=clock, on_event=events) as leases:
        lease = leases.acquire("k", ttl_ms=1_000).lease
        assert lease is not None
        clock.advance(100)
        assert lease.renew()
        clock.advance(100)
        backend.force_release("k")
        assert not lease.renew()
    assert events.drain() == expected

    clock = FakeClock()
    abackend = AsyncMemoryBackend(clock=clock)

    async def main() -> None:
        async with AsyncLeaseManager(abackend, clock=clock, on_event=events) as leases:
            lease = (await leases.acquire("k", ttl_ms=1_000)).lease
            assert lease is not None
            clock.advance(100)
            assert await lease.renew()
            clock.advance(100)
            await leases.force_release("k")
            assert not await lease.renew()

    asyncio.run(main())
    assert events.drain() == expected
