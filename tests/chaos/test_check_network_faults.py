"""The harness under Toxiproxy faults, one proxy per worker so the holder is cut off alone."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from fencedlease_lab.harness.run import CheckResult

from .conftest import assert_told_in_time, the_fault, victim_of

pytestmark = pytest.mark.chaos

RunCheck = Callable[..., CheckResult]


@pytest.mark.parametrize("kind", ["partition", "timeout"])
def test_cut_off_holder_is_told_within_ttl_plus_heartbeat(check_run: RunCheck, kind: str) -> None:
    """The holder's proxy disabled (or black-holed) for 2 x ttl: the body is told of the loss
    within ttl + one heartbeat, its later access is refused, another worker takes over."""
    result = check_run(kind)
    assert result.toxiproxy is not None
    data, fault = the_fault(result, kind)
    assert_told_in_time(result, fault, victim_of(data, fault))
    assert result.report.property("loss-reported").checked > len(data.grants)


def test_latency_is_survived_without_loss(check_run: RunCheck) -> None:
    """ttl/5 +- ttl/20 of latency on the holder's link: renewals are slower, the lease holds."""
    result = check_run("latency")
    assert result.report.valid, result.report.explain()
    data = result.history()
    (fault,) = data.faults
    victim = next(
        g
        for g in data.grants
        if g.process == fault.target and g.granted < fault.start < (g.end or 0)
    )
    assert victim.end_type == "ok", result.history_path.read_text()[-6000:]
    assert victim.lost is None


def test_reset_peer_is_survived(check_run: RunCheck) -> None:
    """TCP RST on the holder's connections for two heartbeats: the checker's properties hold and
    a lease is granted again afterwards."""
    result = check_run("reset-peer")
    assert result.report.valid, result.report.explain()
    data = result.history()
    (fault,) = data.faults
    assert fault.type == "ok"
    assert [g for g in data.grants if g.granted > (fault.end or 0)]
