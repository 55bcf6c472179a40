"""Telemetry: the ``"wait"`` events of an acquire (both faces, on a FakeClock), the
``"fencedlease"`` logger (loss and failed renewals as warnings, every event at DEBUG, never an owner
token), OpenTelemetry through ``fencedlease.otel`` (the SDK's in-memory exporters), and
``import fencedlease`` not loading OpenTelemetry. The hand-off event needs Redis:
tests/live/test_operations_live.py."""

from __future__ import annotations

import asyncio
import itertools
import logging
import subprocess
import sys
import threading
from collections.abc import Sequence
from typing import Any

import pytest
import redis
import redis.asyncio
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from fencedlease import BackendError, LeaseEvent, LeaseLostError, LeaseManager
from fencedlease._core.protocol import AcquireReply
from fencedlease.aio import AsyncLeaseManager
from fencedlease.backends import AsyncMemoryBackend, MemoryBackend
from fencedlease.otel import instrument
from fencedlease.testing import FakeClock


class FailingRenewals(MemoryBackend):
    def renew_many(self, items: Sequence[tuple[str, str, int]]) -> list[int | BaseException]:
        raise BackendError("renew: connection reset")


def _check_waits(events: list[LeaseEvent], waited_ms: int) -> None:
    """Waits back to back from 0 to the budget, one owner, then the not-granted acquire."""
    kinds = [(e.kind, e.status) for e in events]
    waits = events[:-1]
    assert kinds[-1] == ("acquire", "not-granted")
    assert len(waits) >= 1
    assert {(e.kind, e.status) for e in waits} == {("wait", "waited")}
    assert waits[0].sent_monotonic == 0.0
    for before, after in itertools.pairwise(waits):
        assert after.sent_monotonic == before.at_monotonic
    for event in waits:
        assert event.sent_monotonic is not None and event.duration_ms is not None
        assert event.duration_ms == pytest.approx(
            (event.at_monotonic - event.sent_monotonic) * 1000
        )
        assert (event.key, event.fencing_token) == ("k", None)
    assert sum(e.duration_ms or 0.0 for e in waits) == pytest.approx(waited_ms)
    assert len({e.owner_fingerprint for e in waits}) == 1
    assert waits[0].owner_fingerprint is not None


def test_sync_acquire_reports_each_wait() -> None:
    clock, seen = FakeClock(), list[LeaseEvent]()
    backend = MemoryBackend(clock=clock)
    with (
        LeaseManager(backend, clock=clock) as other,
        LeaseManager(backend, clock=clock, on_event=seen.append) as leases,
    ):
        assert other.acquire("k", ttl_ms=10_000)
        assert not leases.acquire("k", ttl_ms=1_000, wait_ms=300, retry_delay_ms=100)
    _check_waits(seen, 300)


def test_asyncio_acquire_reports_each_wait() -> None:
    clock, seen = FakeClock(), list[LeaseEvent]()
    backend = AsyncMemoryBackend(clock=clock)

    async def main() -> None:
        async with (
            AsyncLeaseManager(backend, clock=clock) as other,
            AsyncLeaseManager(backend, clock=clock, on_event=seen.append) as leases,
        ):
            assert await other.acquire("k", ttl_ms=10_000)
            assert not await leases.acquire("k", ttl_ms=1_000, wait_ms=300, retry_delay_ms=100)

    asyncio.run(main())
    _check_waits(seen, 300)


# -- logging ------------------------------------------------------------------------------------


def test_loss_is_logged_at_info_without_a_hook(caplog: pytest.LogCaptureFixture) -> None:
    """A loss the caller is told of (the hold raises LeaseLostError) is logged once at INFO on the
    fencedlease logger, with the owner's fingerprint and never its token."""
    clock = FakeClock()
    backend = MemoryBackend(clock=clock)
    with (
        caplog.at_level(logging.INFO, logger="fencedlease"),
        LeaseManager(backend, clock=clock) as leases,
    ):
        with (
            pytest.raises(LeaseLostError),
            leases.hold("k", ttl_ms=1_000, heartbeat_ms=False) as lease,
        ):
            clock.advance(1_000)
            assert lease.lost
        token = lease._state.owner_token
    lost = [r for r in caplog.records if "lost" in r.getMessage()]
    assert len(lost) == 1
    assert lost[0].levelno == logging.INFO
    assert "'k'" in lost[0].getMessage()
    assert lease.owner_fingerprint in lost[0].getMessage()
    assert token not in caplog.text


def test_failed_renewals_are_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    leases = LeaseManager(FailingRenewals(clock=clock), clock=clock)
    failed_once = threading.Event()  # on_renew_error runs right after the warning is logged
    with caplog.at_level(logging.WARNING, logger="fencedlease"):
        with leases.hold(
            "k", ttl_ms=1_000, heartbeat_ms=400, on_renew_error=lambda _: failed_once.set()
        ):
            clock.advance(400)
            assert failed_once.wait(30)
        leases.close()
    failed = [r for r in caplog.records if "renewing" in r.getMessage()]
    assert failed[0].levelno == logging.WARNING
    assert "BackendError: renew: connection reset" in failed[0].getMessage()
    assert "['k']" in failed[0].getMessage()


def test_every_event_is_logged_at_debug(caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    caplog.set_level(logging.DEBUG, logger="fencedlease")
    with LeaseManager(MemoryBackend(clock=clock), clock=clock) as leases:
        result = leases.acquire("k", ttl_ms=1_000)
        assert result.lease is not None
        result.lease.release()
        token = result.lease._state.owner_token
    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG]
    events = [line.split()[2:4] for line in lines if line.startswith("fencedlease event:")]
    assert events == [["acquire", "granted"], ["release", "sent"], ["release", "released"]]
    assert token not in caplog.text
    # a manager made while DEBUG is off builds no events for the log
    caplog.set_level(logging.INFO, logger="fencedlease")
    assert LeaseManager(MemoryBackend(clock=clock), clock=clock)._on_event is None


# -- OpenTelemetry ------------------------------------------------------------------------------


def test_otel_spans_and_metrics() -> None:
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    clock, also = FakeClock(), list[LeaseEvent]()
    hook = instrument(also.append, tracer_provider=tracer_provider, meter_provider=meter_provider)
    backend = MemoryBackend(clock=clock)
    with LeaseManager(backend, clock=clock, on_event=hook) as leases:
        with pytest.raises(LeaseLostError), leases.hold("k", ttl_ms=1_000, heartbeat_ms=False):
            clock.advance(1_000)
        token = leases.acquire("k", ttl_ms=1_000)
        assert token.lease is not None
        secret = token.lease._state.owner_token
    names = [
        (s.name, (s.attributes or {})["fencedlease.status"]) for s in spans.get_finished_spans()
    ]
    assert names == [
        ("fencedlease.acquire", "granted"),
        ("fencedlease.lost", "lost"),
        ("fencedlease.release", "sent"),  # the hold's release, refused: the key had lapsed
        ("fencedlease.release", "refused"),
        ("fencedlease.acquire", "granted"),
    ]
    first = spans.get_finished_spans()[0]
    assert dict(first.attributes or {}) == {
        "fencedlease.key": "k",
        "fencedlease.status": "granted",
        "fencedlease.fencing_token": 1,
        "fencedlease.owner_fingerprint": also[0].owner_fingerprint,
    }
    lost = spans.get_finished_spans()[1]
    assert lost.status.status_code is StatusCode.ERROR
    assert all(secret not in str(s.attributes) for s in spans.get_finished_spans())
    assert [(e.kind, e.status) for e in also] == [
        ("acquire", "granted"), ("lost", "lost"), ("release", "sent"), ("release", "refused"),
        ("acquire", "granted"),
    ]  # fmt: skip
    data = reader.get_metrics_data()
    assert data is not None
    points: dict[str, dict[tuple[str, str], float]] = {}
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    attrs = point.attributes or {}
                    label = (str(attrs["fencedlease.kind"]), str(attrs["fencedlease.status"]))
                    value = getattr(point, "value", None)
                    points.setdefault(metric.name, {})[label] = (
                        value if value is not None else float(getattr(point, "count", 0))
                    )
    assert points["fencedlease.events"] == {
        ("acquire", "granted"): 2, ("lost", "lost"): 1, ("release", "sent"): 1,
        ("release", "refused"): 1,
    }  # fmt: skip
    # the histogram's counts: every event but the loss has a duration
    assert points["fencedlease.duration"] == {
        ("acquire", "granted"): 2.0, ("release", "sent"): 1.0, ("release", "refused"): 1.0,
    }  # fmt: skip


def test_import_fencedlease_does_not_load_opentelemetry() -> None:
    """redis-py (8.x) loads parts of OpenTelemetry itself when it is installed; the library adds
    none (and never loads fencedlease.otel)."""
    code = (
        "import sys\n"
        "import redis, redis.asyncio\n"
        "def otel(): return {m for m in sys.modules if m.split('.')[0] == 'opentelemetry'}\n"
        "before = otel()\n"
        "import fencedlease, fencedlease.aio, fencedlease.backends, fencedlease.db\n"
        "print(sorted(otel() - before), 'fencedlease.otel' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "[] False"


@pytest.mark.parametrize("face", ["sync", "asyncio"])
def test_a_new_primary_seen_by_an_acquire_is_a_failover_event(face: str) -> None:
    """The replication id of the primary that answers acquires changes (a failover): the hook is
    told once per change, naming the key and both ids; the same primary again is no event."""
    events: list[LeaseEvent] = []
    manager: Any
    if face == "sync":
        manager = LeaseManager(redis.Redis(port=1), on_event=events.append)
    else:
        manager = AsyncLeaseManager(redis.asyncio.Redis(port=1), on_event=events.append)
    watch = manager._backend.primary
    for key, primary in [("a", "r1"), ("b", "r1"), ("c", "r2"), ("d", "r2"), ("e", "r1")]:
        watch.seen(AcquireReply(True, 1, 1_000, primary_id=primary), key)
    assert [(e.kind, e.status, e.key, e.reason, e.fencing_token) for e in events] == [
        ("failover", "primary-changed", "c", "replication id r1 -> r2", None),
        ("failover", "primary-changed", "e", "replication id r2 -> r1", None),
    ]
    assert manager.primary_changes == 2
