"""The register model check (property g): the model is the library's fencing rule, generated
linearizable histories pass, planted anomalies are caught with the smallest failing prefix."""

from __future__ import annotations

import random
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fencedlease._core.fencing import FenceState, FencingAccess, decide
from fencedlease_lab.harness.checker import check_history
from fencedlease_lab.harness.history import Event
from fencedlease_lab.harness.linearizable import (
    RegisterOp,
    RegisterState,
    check_register,
    ops_from_history,
    random_history,
    step,
)


def w(process: str, token: int | None, value: int, start: float, end: float | None,
      outcome: Any = "ok", *, last: int | None = None, owner: Any = ...,
      key: str = "k") -> RegisterOp:  # fmt: skip
    return RegisterOp(process, "write", key, token, value, outcome, start, end,
                      owner=process if owner is ... else owner, last=last)  # fmt: skip


def r(process: str, token: int | None, value: int | None, start: float, end: float | None,
      outcome: Any = "ok", *, last: int | None = None, owner: Any = ...,
      key: str = "k") -> RegisterOp:  # fmt: skip
    return RegisterOp(process, "read", key, token, value, outcome, start, end,
                      owner=process if owner is ... else owner, last=last)  # fmt: skip


# --- the model is the fencing rule ------------------------------------------------------------


@given(
    fence=st.none() | st.tuples(st.integers(1, 5), st.sampled_from(["a", "b", None])),
    token=st.integers(1, 5),
    owner=st.sampled_from(["a", "b", None]),
)
def test_step_accepts_and_refuses_exactly_as_the_fencing_rule(
    fence: tuple[int, str | None] | None, token: int, owner: str | None
) -> None:
    """A fenced write's acceptance and the fence it leaves are decide()'s, owners standing for
    fingerprints."""
    state = RegisterState(7, None, None) if fence is None else RegisterState(7, *fence)
    rule = decide(
        None if fence is None else FenceState(fence[0], fence[1]), FencingAccess(token, owner)
    )
    accepted = step(state, w("p", token, 9, 0.0, 1.0, owner=owner))
    refused = step(state, w("p", token, 9, 0.0, 1.0, "refused", owner=owner))
    if isinstance(rule, FenceState):
        assert accepted == RegisterState(9, rule.token, rule.fingerprint)
        assert refused is None
    else:
        assert accepted is None
        assert refused == state


def test_step_reads_move_the_fence_and_unfenced_accesses_do_not() -> None:
    state = RegisterState(3, 2, "a")
    assert step(state, r("p", 4, 3, 0, 1, owner="b")) == RegisterState(3, 4, "b")
    assert step(state, r("p", 4, 5, 0, 1, owner="b")) is None  # the wrong value
    assert step(state, r("p", None, 3, 0, 1)) == state
    assert step(state, w("p", None, 8, 0, 1)) == RegisterState(8, 2, "a")
    assert step(state, w("p", 1, 8, 0, 1, "refused", last=2)) == state
    assert step(state, w("p", 1, 8, 0, 1, "refused", last=3)) is None  # the wrong last token
    assert step(state, w("p", 1, 8, 0, 1, "unknown")) == state  # refused, had it happened
    assert step(state, r("p", 9, None, 0, 1, "unknown", owner="c")) == RegisterState(3, 9, "c")


# --- hand-made histories ----------------------------------------------------------------------


def test_sequential_history_passes() -> None:
    ops = [w("a", 1, 1, 0, 1), r("a", 1, 1, 2, 3), w("b", 2, 2, 4, 5), r("b", 2, 2, 6, 7),
           w("a", 1, 9, 8, 9, "refused", last=2), r("c", None, 2, 10, 11)]  # fmt: skip
    result = check_register(ops)
    assert result.valid
    assert (result.keys, result.ops) == (1, 6)


def test_concurrent_writes_may_land_in_either_order() -> None:
    """Two overlapping writes, then a read: either value is explained."""
    for seen in (1, 2):
        ops = [w("a", 1, 1, 0, 2), w("b", 1, 2, 1, 3, owner="a"), r("c", None, seen, 4, 5)]
        assert check_register(ops).valid


def test_stale_read_is_caught_with_the_read_as_culprit() -> None:
    ops = [w("a", 1, 1, 0, 1), w("a", 1, 2, 2, 3), r("b", None, 1, 4, 5), w("a", 1, 3, 6, 7)]
    result = check_register(ops)
    assert not result.valid
    (failure,) = result.failures
    assert failure.culprit == ops[2]
    assert failure.prefix_ops == 3  # the last write is not needed to show it
    assert failure.partial_state == RegisterState(2, 1, "a")
    assert "b's read (unfenced) returned 1 [4.000 s .. 5.000 s]" in failure.explain()
    assert "leaves the register at (value 2, fence 1)" in failure.explain()


def test_accepted_stale_write_is_caught() -> None:
    """Token 2 accepted and completed; token 1 accepted afterwards: impossible."""
    ops = [w("a", 1, 1, 0, 1), w("b", 2, 2, 2, 3), w("a", 1, 3, 4, 5)]
    (failure,) = check_register(ops).failures
    assert failure.culprit == ops[2]
    assert "a's write (token 1) wrote 3" in failure.explain()


def test_overlapping_stale_write_may_precede_the_newer_one() -> None:
    """The same write overlapping the newer one may have landed first: linearizable."""
    ops = [w("a", 1, 1, 0, 1), w("b", 2, 2, 2, 3), w("a", 1, 3, 2.5, 5), r("c", None, 2, 6, 7)]
    assert check_register(ops).valid


def test_unknown_write_may_or_may_not_have_happened() -> None:
    for seen in (0, 5):
        ops = [w("a", 1, 5, 0, None, "unknown"), r("b", None, seen, 3, 4)]
        assert check_register(ops).valid
    ops = [w("a", 1, 5, 0, None, "unknown"), r("b", None, 6, 3, 4)]
    assert not check_register(ops).valid


def test_unknown_write_takes_effect_only_after_its_invocation() -> None:
    ops = [r("b", None, 5, 0, 1), w("a", 1, 5, 2, None, "unknown")]
    (failure,) = check_register(ops).failures
    assert failure.culprit == ops[0]


def test_unknown_read_may_have_moved_the_fence() -> None:
    """A refusal of token 1 with last 3 is explained only by the read of token 3 whose outcome
    is unknown; without it, it is not."""
    base = [w("a", 1, 1, 0, 1), w("a", 1, 2, 4, 5, "refused", last=3)]
    assert check_register([*base, r("b", 3, None, 2, None, "unknown")]).valid
    (failure,) = check_register(base).failures
    assert failure.culprit == base[1]


def test_duplicate_token_from_another_lease_is_refused() -> None:
    """After a counter rollback two leases carry token 2: the second is refused."""
    ops = [w("a", 2, 1, 0, 1, owner="a"), w("b", 2, 2, 2, 3, "refused", last=2, owner="b")]
    assert check_register(ops).valid
    accepted = [ops[0], attrs.evolve(ops[1], outcome="ok", last=None)]
    assert not check_register(accepted).valid


def test_keys_are_checked_apart() -> None:
    ops = [w("a", 1, 1, 0, 1, key="x"), r("b", None, 0, 2, 3, key="y"),
           r("b", None, 0, 2, 3, key="x")]  # fmt: skip
    result = check_register(ops)
    assert result.per_key == {"x": 2, "y": 1}
    assert [f.key for f in result.failures] == ["x"]


# --- generated histories ----------------------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(
    seed=st.integers(0, 2**32),
    ops=st.integers(1, 80),
    keys=st.integers(1, 3),
    processes=st.integers(1, 6),
    unknown=st.sampled_from([0.0, 0.1, 0.3]),
    fenced_reads=st.booleans(),
)
def test_histories_made_from_the_model_are_linearizable(
    seed: int, ops: int, keys: int, processes: int, unknown: float, fenced_reads: bool
) -> None:
    history = random_history(
        random.Random(seed), ops=ops, keys=keys, processes=processes, unknown=unknown,
        fenced_reads=fenced_reads,
    )  # fmt: skip
    result = check_register(history)
    assert result.valid, result.failures[0].explain()
    assert result.ops == len(history)


def _tail(history: list[RegisterOp], bug: str) -> tuple[list[RegisterOp], RegisterOp]:
    """A quiet tail after ``history`` with one planted anomaly; returns the ops and the op
    that plants it. New leases x (token t) and y (token t + 1) on key k0."""
    t = max((op.token or 0 for op in history if op.key == "k0"), default=0) + 1
    at = max((op.completed or op.invoked for op in history), default=0.0) + 10.0
    x1 = w("x", t, 1001, at + 1, at + 2, key="k0")
    if bug == "stale-read":
        x2 = w("x", t, 1002, at + 3, at + 4, key="k0")
        bad = r("x", t, 1001, at + 5, at + 6, key="k0")  # 1002 overwrote 1001
        return [x1, x2, bad], bad
    y1 = w("y", t + 1, 1002, at + 3, at + 4, key="k0")
    if bug == "lost-update":
        bad = r("z", None, 1001, at + 5, at + 6, key="k0")  # y's acknowledged write is gone
        return [x1, y1, bad], bad
    bad = w("x", t, 1003, at + 5, at + 6, key="k0")  # accepted below the fence t + 1
    return [x1, y1, bad], bad


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**32),
    ops=st.integers(0, 60),
    processes=st.integers(1, 5),
    unknown=st.sampled_from([0.0, 0.2]),
    bug=st.sampled_from(["stale-read", "lost-update", "accepted-stale-write"]),
)
def test_a_planted_anomaly_is_caught_and_named(
    seed: int, ops: int, processes: int, unknown: float, bug: str
) -> None:
    history = random_history(random.Random(seed), ops=ops, keys=2, processes=processes,
                             unknown=unknown) if ops else []  # fmt: skip
    tail, bad = _tail(history, bug)
    result = check_register(history + tail)
    (failure,) = result.failures
    assert failure.key == "k0"
    assert failure.culprit == bad
    k0 = [op for op in history if op.key == "k0"]
    assert failure.prefix_ops == len(k0) + len(tail)


# --- from a history ---------------------------------------------------------------------------


def _events(mode: str | None, *, final: int | None = None) -> list[Event]:
    """w0 (grant 0, token 1) reads 0 and writes 1; w1 (token 2) reads 1; w0's second write is
    refused (last 2); w1's write is unknown."""
    out: list[Event] = []

    def add(process: str, op: str, kind: Any, at: float, **fields: Any) -> None:
        out.append(Event(process, op, kind, at, 1e9 + at, **fields))

    add("run", "start", "info", 0.0, detail={} if mode is None else {"mode": mode})
    add("w0", "read", "invoke", 0.1, id=1, grant=0, key="c", token=1)
    add("w0", "read", "ok", 0.2, id=1, grant=0, key="c", token=1, value=0)
    add("w0", "write", "invoke", 0.3, id=2, grant=0, key="c", token=1, value=1)
    add("w0", "write", "ok", 0.4, id=2, grant=0, key="c", token=1, value=1)
    add("w1", "read", "invoke", 0.5, id=1, grant=0, key="c", token=2)
    add("w1", "read", "ok", 0.6, id=1, grant=0, key="c", token=2, value=1)
    add("w0", "write", "invoke", 0.7, id=3, grant=0, key="c", token=1, value=2)
    add("w0", "write", "fail", 0.8, id=3, grant=0, key="c", token=1, value=2, outcome="stale",
        detail={"last": 2})  # fmt: skip
    add("w1", "write", "invoke", 0.9, id=2, grant=0, key="c", token=2, value=2)
    add("w1", "write", "info", 1.0, id=2, grant=0, key="c", token=2, value=2,
        outcome="backend-error")  # fmt: skip
    if final is not None:
        add("run", "final", "ok", 2.0, value=final)
    return out


def test_ops_from_history_in_fenced_mode() -> None:
    ops, lacking = ops_from_history(_events("fenced", final=2))
    assert lacking is None
    assert [(op.process, op.kind, op.token, op.value, op.outcome, op.last, op.owner)
            for op in ops] == [
        ("w0", "read", 1, 0, "ok", None, ("w0", 0)),
        ("w0", "write", 1, 1, "ok", None, ("w0", 0)),
        ("w1", "read", 2, 1, "ok", None, ("w1", 0)),
        ("w0", "write", 1, 2, "refused", 2, ("w0", 0)),
        ("w1", "write", 2, 2, "unknown", None, ("w1", 0)),
        ("run", "read", None, 2, "ok", None, None),
    ]  # fmt: skip
    assert (ops[0].line, ops[0].end_line) == (2, 3)
    assert ops[4].completed is None
    assert check_register(ops).valid


def test_ops_from_history_write_fenced_reads_are_plain() -> None:
    ops, _ = ops_from_history(_events("write-fenced"))
    assert [op.token for op in ops] == [None, 1, None, 1, 2]


def test_ops_from_history_names_what_it_lacks() -> None:
    assert ops_from_history(_events(None)) == (
        [],
        "history lacks the resource's mode (the run's start detail.mode)",
    )


@pytest.mark.parametrize(("final", "valid"), [(1, True), (2, True), (3, False)])
def test_property_g_in_the_checker(final: int, valid: bool) -> None:
    """The final counter is 1 or 2 (w1's write unknown), never 3."""
    result = check_history(_events("fenced", final=final)).property("linearizable-register")
    assert result.checked == 6
    assert result.note == "6 operation(s) over 1 key(s), the counter starting at 0"
    if valid:
        assert result.status == "pass"
    else:
        (violation,) = result.violations
        assert "run's read (unfenced) returned 3" in violation.message
        assert violation.lines[-1] == 12
        assert violation.at == pytest.approx(2.0)


def test_many_unknowns_on_one_key_are_refuted_without_blowing_up() -> None:
    """Unknown operations are optional: without folding the dead ones (token below the fence)
    out of the cache, each one doubled the refutation of everything after it (2**30 here)."""
    history = random_history(random.Random(7), ops=1000, keys=1, processes=8, unknown=0.03)
    assert sum(1 for op in history if op.outcome == "unknown") >= 25
    tail, bad = _tail(history, "stale-read")
    (failure,) = check_register(history + tail).failures
    assert failure.culprit == bad


def _unknown_write_then(mode: str, read: int) -> list[Event]:
    """w0's write of 5 times out (``info``); w1 then writes 6 (``ok``) and, after it, reads
    ``read``."""
    out: list[Event] = []

    def add(process: str, op: str, kind: Any, at: float, **fields: Any) -> None:
        out.append(Event(process, op, kind, at, 1e9 + at, key="c", **fields))

    out.append(Event("run", "start", "info", 0.0, 1e9, detail={"mode": mode}))
    add("w0", "write", "invoke", 0.1, id=1, grant=0, token=1, value=5)
    add("w0", "write", "info", 0.2, id=1, grant=0, token=1, value=5, outcome="backend-error")
    add("w1", "write", "invoke", 0.3, id=1, grant=0, token=2, value=6)
    add("w1", "write", "ok", 0.4, id=1, grant=0, token=2, value=6, outcome="accepted")
    add("w1", "read", "invoke", 0.5, id=2, grant=0, token=2)
    add("w1", "read", "ok", 0.6, id=2, grant=0, token=2, value=read, outcome="accepted")
    return out


def test_a_real_unknown_write_may_show_up_after_its_timeout() -> None:
    """An unknown write of a real history may take effect after its timeout was recorded (after
    a later write), never only by then: unfenced, a read of it after the later write passes."""
    ops, _ = ops_from_history(_unknown_write_then("unfenced", 5))
    assert [(op.value, op.outcome, op.completed) for op in ops] == [
        (5, "unknown", None), (6, "ok", 0.4), (5, "ok", 0.6),
    ]  # fmt: skip
    result = check_history(_unknown_write_then("unfenced", 5)).property("linearizable-register")
    assert (result.status, result.checked) == ("pass", 3)


def test_a_real_unknown_write_may_never_show_up() -> None:
    """An unknown write of a real history may never have happened: a read that does not see it
    passes."""
    result = check_history(_unknown_write_then("unfenced", 6)).property("linearizable-register")
    assert (result.status, result.checked) == ("pass", 3)


def test_a_real_unknown_write_below_the_fence_cannot_show_up_late() -> None:
    """Fenced, the same late appearance is a violation: once token 2 was accepted, the unknown
    write's token 1 is refused, so a read of its value is stale."""
    result = check_history(_unknown_write_then("fenced", 5)).property("linearizable-register")
    assert result.status == "fail"
    (violation,) = result.violations
    assert violation.lines[-1] == 7
