"""OpenTelemetry spans and metrics from a manager's [`LeaseEvent`][fencedlease.LeaseEvent]s.

Needs ``opentelemetry-api`` (``pip install -e ".[otel]"`` in a clone); nothing of the library
imports this module or OpenTelemetry by itself, so ``import fencedlease`` stays light. Turn it
on per manager with the ``on_event`` hook this module makes:

```python
from fencedlease import LeaseManager
from fencedlease.otel import instrument

leases = LeaseManager.from_url(url, on_event=instrument())
```

Each event becomes one span, ``fencedlease.<kind>`` (``acquire``, ``wait``, ``handoff``,
``renew``, ``release``, ``lost``, ``failover``), ending when the event was seen and starting
``duration_ms`` earlier when the event has one, with the attributes ``fencedlease.key``,
``fencedlease.status``,
``fencedlease.fencing_token``, ``fencedlease.owner_fingerprint`` and ``fencedlease.reason`` (those
that are set) and an error status for ``"error"`` and ``"lost"``. Metrics: the counter
``fencedlease.events`` and the histogram ``fencedlease.duration`` (milliseconds), both with the
attributes ``fencedlease.kind`` and ``fencedlease.status`` (no key: keys are unbounded). Owner
tokens and passwords never appear (events carry neither).
"""

from __future__ import annotations

import time

from opentelemetry import metrics, trace
from opentelemetry.trace import Status, StatusCode

from fencedlease._core.events import EventHook, LeaseEvent, check_event_hook

__all__ = ["instrument"]

_SCOPE = "fencedlease"
_FAILED = frozenset({"error", "lost"})


class _Instrument:
    """The hook `instrument` returns."""

    def __init__(
        self,
        then: EventHook | None,
        tracer_provider: trace.TracerProvider | None,
        meter_provider: metrics.MeterProvider | None,
    ) -> None:
        self._then = then
        self._tracer = trace.get_tracer(_SCOPE, tracer_provider=tracer_provider)
        meter = metrics.get_meter(_SCOPE, meter_provider=meter_provider)
        self._events = meter.create_counter(
            "fencedlease.events", unit="{event}", description="Lease events, by kind and status"
        )
        self._durations = meter.create_histogram(
            "fencedlease.duration",
            unit="ms",
            description="From a send to its reply (a wait: its length), by kind and status",
        )

    def __call__(self, event: LeaseEvent) -> None:
        end_ns = time.time_ns()
        start_ns = end_ns
        if event.duration_ms is not None:
            start_ns = end_ns - max(0, int(event.duration_ms * 1_000_000))
        attributes: dict[str, str | int] = {
            "fencedlease.key": event.key,
            "fencedlease.status": event.status,
        }
        if event.fencing_token is not None:
            attributes["fencedlease.fencing_token"] = event.fencing_token
        if event.owner_fingerprint is not None:
            attributes["fencedlease.owner_fingerprint"] = event.owner_fingerprint
        if event.reason is not None:
            attributes["fencedlease.reason"] = event.reason
        span = self._tracer.start_span(
            f"fencedlease.{event.kind}", start_time=start_ns, attributes=attributes
        )
        if event.status in _FAILED:
            span.set_status(Status(StatusCode.ERROR, event.reason))
        span.end(end_time=end_ns)
        labels = {"fencedlease.kind": event.kind, "fencedlease.status": event.status}
        self._events.add(1, labels)
        if event.duration_ms is not None:
            self._durations.record(event.duration_ms, labels)
        if self._then is not None:
            self._then(event)


def instrument(
    on_event: EventHook | None = None,
    *,
    tracer_provider: trace.TracerProvider | None = None,
    meter_provider: metrics.MeterProvider | None = None,
) -> EventHook:
    """An ``on_event`` hook that records each event as a span and in the metrics (see the module
    docstring), then calls ``on_event`` (if given). ``tracer_provider`` / ``meter_provider``:
    OpenTelemetry's global ones by default.

    Raises:
        ValidationError: ``on_event`` is not a plain callable.
    """
    return _Instrument(check_event_hook(on_event), tracer_provider, meter_provider)
