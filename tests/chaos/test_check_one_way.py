"""Asymmetric partitions: one direction of the holder's link lost (Toxiproxy ``timeout`` 0 on one
stream). With the replies lost, Redis runs the holder's renewals and the holder never hears of
them; with the requests lost, nothing reaches Redis. Either way the holder counts its lease lost
within ttl + one heartbeat, and the next holder has a larger token."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from fencedlease.lab.harness.run import CheckResult

pytestmark = pytest.mark.chaos

RunCheck = Callable[..., CheckResult]


@pytest.mark.parametrize(
    ("kind", "stream"), [("drop-replies", "downstream"), ("drop-requests", "upstream")]
)
def test_one_way_loss_is_told_in_time(check_run: RunCheck, kind: str, stream: str) -> None:
    result = check_run(kind)
    assert result.report.valid, result.report.explain()
    assert result.toxiproxy is not None
    data = result.history()
    (fault,) = data.faults
    assert fault.kind == kind
    assert fault.type == "ok"
    assert fault.detail["stream"] == stream
    config = result.config
    victim = next(
        g for g in data.grants
        if g.process == fault.target and g.granted < fault.start < (g.end or 0.0)
    )  # fmt: skip
    assert victim.lost is not None, "the cut-off holder was never told"
    told_s = victim.lost - fault.start
    assert told_s <= (config.ttl_ms + config.heartbeat) / 1000
    assert victim.end_type == "fail"
    assert victim.end_outcome in ("stale", "lease-lost")
    rival = next(g for g in data.grants if g.process != victim.process and g.granted > fault.start)
    assert rival.token > victim.token
    owned_ms = fault.detail["owned_for_ms"]
    assert owned_ms is not None
    if kind == "drop-replies":
        # Redis renewed the lease after the cut; the holder heard nothing and gave it up first.
        assert fault.detail["renewed_in_redis"] >= 1
        assert owned_ms / 1000 > told_s
        assert rival.granted - fault.start >= owned_ms / 1000
    else:
        # Nothing reached Redis: the key ran out at most a ttl after the last renewal before.
        assert fault.detail["renewed_in_redis"] == 0
        assert owned_ms <= config.ttl_ms
    assert result.report.property("loss-reported").checked > len(data.grants)
