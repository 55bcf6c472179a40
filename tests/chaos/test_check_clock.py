"""The ``clock`` nemesis: the workers' wall clocks jump by five TTLs each way and strobe; no lease
is shortened or lengthened by it, and the history shows the jumps as the workers saw them."""

from __future__ import annotations

from collections.abc import Callable
from statistics import median

import pytest

from fencedlease_lab.harness.history import Event, read_history
from fencedlease_lab.harness.run import CheckResult

from .conftest import the_fault

pytestmark = pytest.mark.chaos

RunCheck = Callable[..., CheckResult]

#: How close to a step's moment an event may fall and still be read as before or after it.
EDGE_S = 0.2


def _offset(event: Event, base: float) -> float:
    """The wall-clock offset (seconds) the worker's clock carried when it wrote ``event``."""
    return round(event.wall - event.mono - base, 1)


def test_clock_jumps_and_strobes_move_no_lease(check_run: RunCheck) -> None:
    result = check_run("clock", duration_s=8.0)
    data, fault = the_fault(result, "clock")
    ttl_ms = result.config.ttl_ms
    steps = fault.detail["steps"]
    assert [s["step"] for s in steps] == ["forward", "backward", "strobe", "reset"]
    assert [s["offset_ms"] for s in steps] == [5 * ttl_ms, -5 * ttl_ms, 5 * ttl_ms, 0]
    assert fault.detail["strobe_flips"] > 10

    # The workers read the jumped clock: each worker event carries the offset of its moment.
    events = [e for e in read_history(result.history_path) if e.process.startswith("w")]
    before = [e for e in events if e.mono < fault.start]
    base = median(e.wall - e.mono for e in before)
    at = [fault.start + s["at_ms"] / 1000 for s in steps]
    jumped = 0
    for event in events:
        offset = _offset(event, base)
        if any(abs(event.mono - t) < EDGE_S for t in at):
            continue  # too close to a step to say which side it fell on
        if event.mono < at[0] or event.mono > at[3]:
            assert offset == 0.0, event
        elif event.mono < at[1]:
            assert offset == 5 * ttl_ms / 1000, event
        elif event.mono < at[2]:
            assert offset == -5 * ttl_ms / 1000, event
        else:
            assert abs(offset) == 5 * ttl_ms / 1000, event
        jumped += offset != 0.0
    assert jumped >= 2, "no worker wrote anything while its clock was off"

    # The leases held across a jump were neither cut short nor told of a loss.
    across = [g for g in data.grants if any(g.granted < t < (g.end or 0.0) for t in at[:3])]
    assert across, "no lease was held across a jump"
    for grant in across:
        assert grant.end_type == "ok", grant
        assert grant.lost is None, grant
    assert result.report.stats["leases_lost"] == 0
    assert result.report.property("mutual-exclusion").violations == ()
    tokens = [g.token for g in data.grants]
    assert tokens == sorted(set(tokens))
