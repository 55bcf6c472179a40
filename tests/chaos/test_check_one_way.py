"""Asymmetric partitions: one direction of the holder's link lost (Toxiproxy ``timeout`` 0 on one
stream). With the replies lost, Redis runs the holder's renewals and the holder never hears of
them; with the requests lost, nothing reaches Redis. Either way the holder counts its lease lost
within ttl + one heartbeat, and the next holder has a larger token."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from fencedlease_lab.harness.run import CheckResult

from .conftest import assert_told_in_time, the_fault, victim_of

pytestmark = pytest.mark.chaos

RunCheck = Callable[..., CheckResult]


@pytest.mark.parametrize(
    ("kind", "stream"), [("drop-replies", "downstream"), ("drop-requests", "upstream")]
)
def test_one_way_loss_is_told_in_time(check_run: RunCheck, kind: str, stream: str) -> None:
    result = check_run(kind)
    assert result.toxiproxy is not None
    data, fault = the_fault(result, kind)
    assert fault.detail["stream"] == stream
    victim = victim_of(data, fault)
    assert_told_in_time(result, fault, victim)
    assert victim.lost is not None
    told_s = victim.lost - fault.start
    rival = min((g for g in data.grants if g.granted > fault.start), key=lambda g: g.granted)
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
        assert owned_ms <= result.config.ttl_ms
    assert result.report.property("loss-reported").checked > len(data.grants)
