"""The network faults on a worker's Toxiproxy proxy: ``latency``, ``timeout``, ``reset-peer``,
``partition``, ``drop-replies`` and ``drop-requests``; and ``resource-link`` on the workers'
proxies to the resource servers."""

from __future__ import annotations

import threading
import time
from typing import Any

from fencedlease import redis_keys

from ..faults_network import one_way_toxic, watch_lease
from ..history import Operation
from ..kinds import latency_toxic_ms
from ..resource_links import resource_timeout_ms
from .core import NemesisCore
from .env import FaultSpec


class NetworkActions(NemesisCore):
    """The actions of the network faults, each on the victim's Toxiproxy proxy."""

    def _with_toxics(
        self,
        spec: FaultSpec,
        stop: threading.Event,
        op: Operation,
        target: int | None,
        toxics: list[dict[str, Any]],
    ) -> None:
        with self._toxics_in_force(spec, target, toxics):
            stop.wait(spec.duration_s)
        self._finish(op, toxics=[t["type"] for t in toxics])

    def _do_latency(
        self, spec: FaultSpec, stop: threading.Event, op: Operation, target: int | None
    ) -> None:
        # The victim's next lease is held through the slow replies (its body stretched over
        # the fault): a healthy renewer keeps it, since the larger of a heartbeat and a reply's
        # delay, plus two more delays, fit in the ttl; the checker counts its loss as
        # unexplained (mutex.could_cost_lease).
        began = time.monotonic()
        delay_ms, jitter_ms = latency_toxic_ms(self.env.ttl_ms)
        latency = {"latency": delay_ms, "jitter": jitter_ms}
        toxic = {"type": "latency", "name": "nemesis-latency", "attributes": latency}
        held = None
        with self._toxics_in_force(spec, target, [toxic]):
            if target is not None:
                held = self._stretched(target, spec.duration_s, stop)
            stop.wait(max(0.0, began + spec.duration_s - time.monotonic()))
        token, key = (None, None) if held is None else held[:2]
        self._finish(op, toxics=["latency"], key=key, token=token)

    def _do_timeout(
        self, spec: FaultSpec, stop: threading.Event, op: Operation, target: int | None
    ) -> None:
        toxics = [
            {
                "type": "timeout",
                "name": f"nemesis-timeout-{stream}",
                "stream": stream,
                "attributes": {"timeout": 0},
            }
            for stream in ("upstream", "downstream")
        ]
        self._with_toxics(spec, stop, op, target, toxics)

    def _do_reset_peer(
        self, spec: FaultSpec, stop: threading.Event, op: Operation, target: int | None
    ) -> None:
        toxic = {
            "type": "reset_peer",
            "name": "nemesis-reset-peer",
            "stream": "upstream",
            "attributes": {"timeout": 0},
        }
        self._with_toxics(spec, stop, op, target, [toxic])

    def _do_partition(
        self, spec: FaultSpec, stop: threading.Event, op: Operation, target: int | None
    ) -> None:
        assert target is not None
        self._take(self._disabled, target, self._proxy(target).disable)
        try:
            stop.wait(spec.duration_s)
        finally:
            self._enable_proxy(target)
        self._finish(op)

    def _one_way(
        self, spec: FaultSpec, stop: threading.Event, op: Operation, target: int | None
    ) -> None:
        assert target is not None
        token = self.env.board.get(target, "token") or None
        toxic = one_way_toxic(spec.kind)
        lease_key = redis_keys(self.env.prefix, self.env.held_key(target)).lease
        with self._toxics_in_force(spec, target, [toxic]):
            until = time.monotonic() + spec.duration_s
            watched = watch_lease(self._admin, lease_key, token, spec.duration_s, stop)
            # A Redis error (a pause or a restart in force with it) ends the watch, not the cut.
            stop.wait(max(0.0, until - time.monotonic()))
        self._finish(op, stream=toxic["stream"], **watched)

    _do_drop_replies = _one_way
    _do_drop_requests = _one_way

    def _do_resource_link(
        self, spec: FaultSpec, stop: threading.Event, op: Operation, target: int | None
    ) -> None:
        # Each phase leaves accesses with an unknown outcome in its own way: a reply later than
        # the client's timeout (the access ran), a link that swallows everything and is closed
        # at that timeout (it may have run), a reset (it may have reached the server first).
        timeout_ms = resource_timeout_ms(self.env.ttl_ms)
        phases: list[dict[str, Any]] = [
            {"type": "latency", "name": "nemesis-data-late", "stream": "downstream",
             "attributes": {"latency": timeout_ms + self.env.ttl_ms // 4, "jitter": 0}},
            {"type": "timeout", "name": "nemesis-data-cut", "attributes": {"timeout": timeout_ms}},
            {"type": "reset_peer", "name": "nemesis-data-reset", "attributes": {"timeout": 0}},
        ]  # fmt: skip
        began = time.monotonic()
        for place, toxic in enumerate(phases, 1):
            until = began + spec.duration_s * place / len(phases)
            with self._toxics_in_force(spec, None, [toxic], self.env.resource_proxies):
                stop.wait(max(0.0, until - time.monotonic()))
            if stop.is_set():
                break
        self._finish(op, toxics=[t["type"] for t in phases])
