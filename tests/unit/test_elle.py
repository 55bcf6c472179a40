"""The list-append checker on hand-made histories: each anomaly found with its cycle, and the
histories without one pass."""

from __future__ import annotations

from typing import Any

import attrs
from hypothesis import assume, given
from hypothesis import strategies as st

from fencedlease_lab.harness.checker import check_history
from fencedlease_lab.harness.elle import Txn, check_list_append, txns_from_history
from fencedlease_lab.harness.history import Event


def txn(
    process: str,
    op_id: int,
    *ops: tuple[str, str, Any],
    kind: str = "ok",
    at: tuple[float, float | None] = (0.0, 1.0),
) -> Txn:
    return Txn(process, op_id, kind, tuple(ops), at[0], at[1], line=op_id, end_line=op_id + 100)


def r(key: str, *elements: str) -> tuple[str, str, Any]:
    return ("r", key, tuple(elements))


def a(key: str, element: str) -> tuple[str, str, Any]:
    return ("append", key, element)


def kinds(txns: list[Txn]) -> list[str]:
    return [anomaly.kind for anomaly in check_list_append(txns).anomalies]


def test_a_serial_history_has_no_anomaly_and_its_edges_counted() -> None:
    t1 = txn("w0", 1, a("x", "1"), at=(0.0, 1.0))
    t2 = txn("w1", 2, r("x", "1"), a("x", "2"), at=(2.0, 3.0))
    t3 = txn("w0", 3, r("x", "1", "2"), at=(4.0, 5.0))
    result = check_list_append([t1, t2, t3])
    assert result.anomalies == ()
    assert result.valid
    assert result.txns == 3
    assert result.keys == 1
    # ww 1->2; wr 1->2, 2->3; rw none (t2 read [1] and 2 is its own append)
    assert result.edges == {"wr": 2, "ww": 1}


def test_g0_a_write_cycle() -> None:
    """t1 appended before t2 to x, after it to y."""
    t1 = txn("w0", 1, a("x", "1"), a("y", "2"))
    t2 = txn("w1", 2, a("x", "3"), a("y", "4"))
    t3 = txn("w2", 3, r("x", "1", "3"), r("y", "4", "2"))
    [anomaly] = check_list_append([t1, t2, t3]).anomalies
    assert anomaly.kind == "G0"
    assert [(e.source.name, e.kind, e.key, e.target.name) for e in anomaly.edges] == [
        ("w0#1", "ww", "x", "w1#2"),
        ("w1#2", "ww", "y", "w0#1"),
    ]
    assert anomaly.message == (
        "G0 (a write cycle): w0#1 -[ww x: 1 then 3]-> w1#2 -[ww y: 4 then 2]-> w0#1"
    )
    assert anomaly.lines == (1, 2, 101, 102)


def test_g1c_circular_information_flow() -> None:
    """Each read what the other appended."""
    t1 = txn("w0", 1, a("x", "1"), r("y", "2"))
    t2 = txn("w1", 2, a("y", "2"), r("x", "1"))
    [anomaly] = check_list_append([t1, t2]).anomalies
    assert anomaly.kind == "G1c"
    assert anomaly.message == (
        "G1c (circular information flow): w0#1 -[wr x: read [1], last 1]-> w1#2 "
        "-[wr y: read [2], last 2]-> w0#1"
    )


def test_g_single_the_lost_update() -> None:
    """Both read x empty and appended: the second append lost what the first read meant."""
    t1 = txn("w0", 1, r("x"), a("x", "1"))
    t2 = txn("w1", 2, r("x"), a("x", "2"))
    t3 = txn("w2", 3, r("x", "1", "2"), at=(5.0, 6.0))
    [anomaly] = check_list_append([t1, t2, t3]).anomalies
    assert anomaly.kind == "G-single"
    assert anomaly.message == (
        "G-single (read skew / a lost update: one anti-dependency): "
        "w1#2 -[rw x: read [], missed 1]-> w0#1 -[ww x: 1 then 2]-> w1#2"
    )
    assert [e.kind for e in anomaly.edges] == ["rw", "ww"]


def test_g2_write_skew() -> None:
    """Each read both lists empty and appended to a different one."""
    t1 = txn("w0", 1, r("x"), r("y"), a("x", "1"))
    t2 = txn("w1", 2, r("x"), r("y"), a("y", "2"))
    t3 = txn("w2", 3, r("x", "1"), r("y", "2"), at=(5.0, 6.0))
    [anomaly] = check_list_append([t1, t2, t3]).anomalies
    assert anomaly.kind == "G2"
    assert anomaly.message == (
        "G2 (write skew: anti-dependencies): w0#1 -[rw y: read [], missed 2]-> w1#2 "
        "-[rw x: read [], missed 1]-> w0#1"
    )


def test_g1a_an_aborted_read_and_a_garbage_read() -> None:
    t1 = txn("w0", 1, a("x", "1"), kind="fail")
    t2 = txn("w1", 2, r("x", "1", "9"), at=(0.5, 2.0))
    result = check_list_append([t1, t2])
    assert [(x.kind, x.message) for x in result.anomalies] == [
        ("G1a", "G1a (aborted read): w1#2 read x = [1 9], which holds 1, appended by w0#1, "
         "which failed"),
        ("garbage-read", "garbage read: w1#2 read x = [1 9], which holds 9, which no "
         "transaction appended"),
    ]  # fmt: skip


def test_an_unknown_outcome_is_a_writer_only_when_seen() -> None:
    """An info transaction whose append a read saw committed: no anomaly; one never seen is
    left out of the graph."""
    t1 = txn("w0", 1, r("x"), a("x", "1"), kind="info", at=(0.0, None))
    t2 = txn("w1", 2, a("y", "5"), kind="info", at=(0.0, None))
    t3 = txn("w2", 3, r("x", "1"), r("y"), at=(3.0, 4.0))
    result = check_list_append([t1, t2, t3])
    assert result.anomalies == ()
    assert result.edges == {"wr": 1}


def test_duplicates_and_incompatible_orders() -> None:
    t1 = txn("w0", 1, a("x", "1"))
    t2 = txn("w0", 2, a("x", "2"))
    t3 = txn("w1", 3, r("x", "1", "1"))
    t4 = txn("w1", 4, r("x", "2", "1"))
    t5 = txn("w1", 5, r("x", "1", "2", "3"))
    got = [(x.kind, x.message) for x in check_list_append([t1, t2, t3, t4, t5]).anomalies]
    assert ("duplicate-elements", "duplicate elements: w1#3 read x = [1 1], which holds 1 more "
            "than once") in got  # fmt: skip
    assert ("incompatible-order", "incompatible orders of x: w1#4 read [2 1] and w1#5 read "
            "[1 2 3]; neither is a prefix of the other") in got  # fmt: skip
    assert ("incompatible-order", "incompatible orders of x: w1#3 read [1 1] and w1#5 read "
            "[1 2 3]; neither is a prefix of the other") in got  # fmt: skip


def test_a_stale_read_and_a_concurrent_one_that_is_not() -> None:
    t1 = txn("w0", 1, a("x", "1"), at=(0.0, 1.0))
    late = txn("w1", 2, r("x"), at=(2.0, 3.0))
    concurrent = txn("w2", 3, r("x"), at=(0.5, 3.0))
    seen = txn("w2", 4, r("x", "1"), at=(4.0, 5.0))
    result = check_list_append([t1, late, concurrent, seen])
    stale = [x for x in result.anomalies if x.kind == "stale-read"]
    assert [x.message for x in stale] == [
        "stale read: w1#2 began at 2.000 s, after w0#1 committed 1 to x (at 1.000 s), yet read "
        "x = []"
    ]
    # the empty reads are also anti-dependencies to w0#1, but without a cycle
    assert [x.kind for x in result.anomalies] == ["stale-read"]


def test_a_longer_cycle_through_three_transactions() -> None:
    """t1 -ww-> t2 -wr-> t3 -rw-> t1: one anti-dependency, a G-single of three."""
    t1 = txn("w0", 1, a("x", "1"), a("z", "7"))
    t2 = txn("w1", 2, a("x", "2"), a("y", "3"))
    t3 = txn("w2", 3, r("y", "3"), r("z"))
    t4 = txn("w2", 4, r("x", "1", "2"), r("z", "7"), at=(5.0, 6.0))
    [anomaly] = check_list_append([t1, t2, t3, t4]).anomalies
    assert anomaly.kind == "G-single"
    assert [(e.source.name, e.kind, e.target.name) for e in anomaly.edges] == [
        ("w2#3", "rw", "w0#1"),
        ("w0#1", "ww", "w1#2"),
        ("w1#2", "wr", "w2#3"),
    ]


def ev(process: str, op_id: int, kind: str, mono: float, **fields: Any) -> Event:
    return Event(process, "txn", kind, mono, mono, id=op_id, **fields)  # type: ignore[arg-type]


def done(element: str) -> dict[str, Any]:
    return {"txn": [["r", "k#0", []], ["append", "k#0", element]]}


def lost_update_events() -> list[Event]:
    start = Event("run", "start", "info", 0.0, 0.0, detail={"mode": "unfenced"})
    plan = {"txn": [["r", "k#0", None], ["append", "k#0", "w0.1"]]}
    plan2 = {"txn": [["r", "k#0", None], ["append", "k#0", "w1.1"]]}
    return [
        start,
        ev("w0", 0, "invoke", 0.1, key="k", detail=plan),
        ev("w1", 0, "invoke", 0.2, key="k", detail=plan2),
        ev("w0", 0, "ok", 0.3, key="k", detail=done("w0.1")),
        ev("w1", 0, "ok", 0.4, key="k", detail=done("w1.1")),
        ev("w0", 1, "invoke", 0.5, key="k", detail={"txn": [["r", "k#0", None]]}),
        ev("w0", 1, "ok", 0.6, key="k", detail={"txn": [["r", "k#0", ["w0.1", "w1.1"]]]}),
        ev("w1", 1, "invoke", 0.7, key="k", detail=plan),
        ev("w1", 1, "fail", 0.8, key="k", outcome="stale", detail=plan),
        ev("w1", 2, "invoke", 0.9, key="k", detail={"txn": [["r", "k#0", None]]}),
    ]  # fmt: skip


def test_txns_from_history_pairs_invocations_and_completions() -> None:
    txns = txns_from_history(lost_update_events())
    assert [(t.name, t.type, t.line, t.end_line) for t in txns] == [
        ("w0#0", "ok", 2, 4),
        ("w1#0", "ok", 3, 5),
        ("w0#1", "ok", 6, 7),
        ("w1#1", "fail", 8, 9),
        ("w1#2", "info", 10, None),
    ]
    assert txns[2].ops == (("r", "k#0", ("w0.1", "w1.1")),)
    assert txns[4].ops == (("r", "k#0", None),)


def test_the_checker_judges_transactions_when_the_history_has_them() -> None:
    report = check_history(lost_update_events())
    prop = report.property("transactions")
    assert prop.letter == "h"
    assert prop.checked == 3
    assert [v.message for v in prop.violations] == [
        "G-single (read skew / a lost update: one anti-dependency): "
        "w1#0 -[rw k#0: read [], missed w0.1]-> w0#0 -[ww k#0: w0.1 then w1.1]-> w1#0"
    ]
    found = prop.violations[0]
    assert found.lines == (2, 3, 4, 5)
    # Like every property's, the violation names its key and the events of its transactions.
    assert found.key == "k"
    assert found.at == 0.2  # the cycle's first transaction, w1#0, was invoked then
    assert [(o.line, o.process, o.op, o.type, o.id, o.key) for o in found.ops] == [
        (2, "w0", "txn", "invoke", 0, "k"),
        (3, "w1", "txn", "invoke", 0, "k"),
        (4, "w0", "txn", "ok", 0, "k"),
        (5, "w1", "txn", "ok", 0, "k"),
    ]
    assert prop.note == "3 transaction(s) over 1 list(s); 1 rw, 1 wr, 1 ww edge(s)"
    assert not report.valid


@st.composite
def serial_histories(draw: st.DrawFn) -> list[Txn]:
    """Transactions run one after another (each invoked after the previous completed) on up
    to three lists: reads see everything appended before."""
    lists: dict[str, list[str]] = {"x": [], "y": [], "z": []}
    txns: list[Txn] = []
    for i in range(draw(st.integers(1, 12))):
        ops: list[tuple[str, str, Any]] = []
        for _ in range(draw(st.integers(1, 4))):
            key = draw(st.sampled_from(sorted(lists)))
            if draw(st.booleans()):
                ops.append(r(key, *lists[key]))
            else:
                element = f"{i}.{len(ops)}"
                lists[key].append(element)
                ops.append(a(key, element))
        txns.append(txn(f"w{i % 3}", i, *ops, at=(2.0 * i, 2.0 * i + 1.0)))
    return txns


@given(serial_histories())
def test_a_serial_history_is_never_an_anomaly(txns: list[Txn]) -> None:
    assert check_list_append(txns).anomalies == ()


@given(serial_histories(), st.data())
def test_a_read_that_misses_a_committed_append_is_found(
    txns: list[Txn], data: st.DataObject
) -> None:
    """Cut the last element off one non-empty read: the reader missed an append committed
    before it began (a stale read), whatever else it shows."""
    candidates = [(t, n) for t in txns for n, op in enumerate(t.ops) if op[0] == "r" and op[2]]
    assume(candidates)
    victim, n = data.draw(st.sampled_from(candidates))
    f, key, elements = victim.ops[n]
    writer = next(t for t in txns if (key, elements[-1]) in set(t.appends()))
    assume(writer is not victim)
    ops = list(victim.ops)
    ops[n] = (f, key, elements[:-1])
    mutated = [attrs.evolve(t, ops=tuple(ops)) if t is victim else t for t in txns]
    found = check_list_append(mutated).anomalies
    assert "stale-read" in [x.kind for x in found]
