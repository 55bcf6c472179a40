"""An Elle-style checker of list-append transactions: the dependency graph and its cycles.

After Kingsbury & Alvaro, "Elle: Inferring Isolation Anomalies from Experimental Observations"
(VLDB 2020), and Adya's anomalies ("Weak Consistency", 1999). Each transaction reads whole lists
and appends values unique per list; a read of a list shows the order of every append it saw, so
the version order of each list is known (the longest read; every read must be a prefix of it)
and the dependencies between transactions can be inferred:

- ``ww`` (write-write): ``T1`` appended the element right before ``T2``'s in a list;
- ``wr`` (write-read): ``T2`` read a list whose last element ``T1`` appended;
- ``rw`` (read-write, an anti-dependency): ``T1`` read a list and ``T2`` appended the element
  right after the last one ``T1`` saw: ``T1`` read a version ``T2`` overwrote.

A cycle in that graph is an anomaly no serializable execution has. Named as Adya does:
``G0`` (write cycle: ``ww`` only), ``G1c`` (circular information flow: ``ww`` and ``wr``, at
least one ``wr``), ``G-single`` (exactly one ``rw``: read skew, the lost update), ``G2`` (two or
more ``rw``: write skew). Each is reported with its cycle: the transactions and the edge from
each to the next, with the list and the elements that make the edge. Beside the cycles:

- ``G1a`` (aborted read): a read saw an element appended by a transaction that failed;
- ``garbage-read``: a read saw an element no transaction appended;
- ``duplicate-elements``: a read saw an element twice;
- ``incompatible-order``: two reads of a list that are not prefixes of one another;
- ``stale-read`` (real time, strict serializability): a transaction began after another had
  committed an append to a list it reads, and did not see it.

Transactions that failed are left out of the graph (they certainly did not happen); those of
unknown outcome are in it only through elements some read saw. Pure: no I/O, no clock.
"""

from __future__ import annotations

import bisect
import itertools
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from .elle_graph import (
    CYCLE_ANOMALIES,
    MAX_PER_KIND,
    Anomaly,
    Edge,
    ElleResult,
    Graph,
    MicroOp,
    Txn,
    find_cycles,
    fmt_list,
)
from .history import Event

__all__ = [
    "CYCLE_ANOMALIES",
    "Anomaly",
    "Edge",
    "ElleResult",
    "Txn",
    "check_list_append",
    "txns_from_history",
]

# --- the history ------------------------------------------------------------------------------


def _micro_ops(raw: object) -> tuple[MicroOp, ...]:
    if not isinstance(raw, list):
        return ()
    ops: list[MicroOp] = []
    for item in raw:
        if isinstance(item, list | tuple) and len(item) == 3 and item[0] in ("r", "append"):
            value: Any
            if item[0] == "r":
                value = None if item[2] is None else tuple(str(v) for v in item[2])
            else:
                value = str(item[2])
            ops.append((str(item[0]), str(item[1]), value))
    return tuple(ops)


def txns_from_history(events: Sequence[Event]) -> list[Txn]:
    """The ``txn`` operations of a merged history: an invocation with ``detail.txn`` and its
    completion (``ok``: ``detail.txn`` with the reads filled in; ``fail``; ``info``). One never
    completed is ``info``. In invocation order."""
    pending: dict[tuple[str, int], tuple[Event, int]] = {}
    txns: list[Txn] = []
    for line, event in enumerate(events, 1):
        if event.op != "txn" or event.id is None:
            continue
        if event.type == "invoke":
            pending[(event.process, event.id)] = (event, line)
            continue
        started = pending.pop((event.process, event.id), None)
        if started is None:
            continue
        invoke, invoke_line = started
        ops = _micro_ops(event.detail.get("txn", invoke.detail.get("txn")))
        txns.append(
            Txn(event.process, event.id, event.type, ops, invoke.mono, event.mono,
                invoke_line, line)
        )  # fmt: skip
    for (process, op_id), (invoke, line) in pending.items():
        ops = _micro_ops(invoke.detail.get("txn"))
        txns.append(Txn(process, op_id, "info", ops, invoke.mono, None, line, None))
    txns.sort(key=lambda t: (t.invoked, t.line))
    return txns


# --- the checker ------------------------------------------------------------------------------


def check_list_append(txns: Iterable[Txn]) -> ElleResult:
    """Check list-append transactions (module docstring): build the ``ww``/``wr``/``rw``
    graph from the orders the reads show, report its cycles and every other anomaly."""
    txns = list(txns)
    anomalies: list[Anomaly] = []
    appended: dict[tuple[str, str], Txn] = {}
    aborted: dict[tuple[str, str], Txn] = {}
    for txn in txns:
        for key, element in txn.appends():
            (aborted if txn.type == "fail" else appended)[(key, element)] = txn
    committed = [t for t in txns if t.type == "ok"]
    orders = _orders(committed, anomalies)
    anomalies += _bad_elements(committed, orders, appended, aborted)
    graph = Graph()
    for txn in txns:
        if txn.type == "ok":
            graph.node(txn)
    _add_edges(graph, committed, orders, appended)
    anomalies[:0] = find_cycles(graph)
    anomalies += _stale_reads(committed, orders)
    counts: dict[str, int] = defaultdict(int)
    for targets in graph.out.values():
        for edges in targets.values():
            for edge in edges:
                counts[edge.kind] += 1
    per_kind: dict[str, int] = defaultdict(int)
    capped: list[Anomaly] = []
    for anomaly in anomalies:
        per_kind[anomaly.kind] += 1
        if per_kind[anomaly.kind] <= MAX_PER_KIND:
            capped.append(anomaly)
    keys = {key for txn in txns for _, key, _ in txn.ops}
    return ElleResult(len(graph.txns), len(keys), tuple(capped), dict(sorted(counts.items())))


def _orders(committed: list[Txn], anomalies: list[Anomaly]) -> dict[str, tuple[str, ...]]:
    """Each list's version order: its longest read; reads that disagree are reported."""
    longest: dict[str, tuple[tuple[str, ...], Txn]] = {}
    for txn in committed:
        for key, elements in txn.reads():
            if len(set(elements)) != len(elements):
                twice = sorted({e for e in elements if elements.count(e) > 1})
                anomalies.append(
                    Anomaly(
                        "duplicate-elements",
                        f"duplicate elements: {txn.name} read {key} = {fmt_list(elements)}, which"
                        f" holds {', '.join(twice)} more than once",
                        (txn,),
                    )
                )
            if key not in longest or len(elements) > len(longest[key][0]):
                longest[key] = (elements, txn)
    for txn in committed:
        for key, elements in txn.reads():
            order, other = longest[key]
            if order[: len(elements)] != elements:
                anomalies.append(
                    Anomaly(
                        "incompatible-order",
                        f"incompatible orders of {key}: {txn.name} read {fmt_list(elements)} and"
                        f" {other.name} read {fmt_list(order)}; neither is a prefix of the other",
                        (txn, other),
                    )
                )
    return {key: order for key, (order, _) in longest.items()}


def _bad_elements(
    committed: list[Txn],
    orders: dict[str, tuple[str, ...]],
    appended: dict[tuple[str, str], Txn],
    aborted: dict[tuple[str, str], Txn],
) -> list[Anomaly]:
    """G1a and garbage reads, each element judged once: a read that is a prefix of its list's
    order brings only the elements past those judged already."""
    found: list[Anomaly] = []
    judged: dict[str, int] = defaultdict(int)
    seen: set[tuple[str, str]] = set()
    for reader in committed:
        for key, elements in reader.reads():
            if orders[key][: len(elements)] == elements:
                fresh = elements[judged[key] :]
                judged[key] = max(judged[key], len(elements))
            else:
                fresh = elements
            for element in fresh:
                if (key, element) in appended or (key, element) in seen:
                    continue
                seen.add((key, element))
                writer = aborted.get((key, element))
                if writer is not None:
                    message = (
                        f"G1a (aborted read): {reader.name} read {key} = {fmt_list(elements)},"
                        f" which holds {element}, appended by {writer.name}, which failed"
                    )
                    found.append(Anomaly("G1a", message, (reader, writer)))
                else:
                    message = (
                        f"garbage read: {reader.name} read {key} = {fmt_list(elements)}, which"
                        f" holds {element}, which no transaction appended"
                    )
                    found.append(Anomaly("garbage-read", message, (reader,)))
    return found


def _add_edges(
    graph: Graph,
    committed: list[Txn],
    orders: dict[str, tuple[str, ...]],
    appended: dict[tuple[str, str], Txn],
) -> None:
    for key, order in orders.items():
        for before, after in itertools.pairwise(order):
            a, b = appended.get((key, before)), appended.get((key, after))
            if a is not None and b is not None:
                graph.add(Edge(a, b, "ww", key, f"{before} then {after}"))
    for reader in committed:
        for key, elements in reader.reads():
            order = orders[key]
            if order[: len(elements)] != elements:
                continue  # reported as incompatible-order
            if elements:
                writer = appended.get((key, elements[-1]))
                if writer is not None:
                    graph.add(
                        Edge(
                            writer,
                            reader,
                            "wr",
                            key,
                            f"read {fmt_list(elements)}, last {elements[-1]}",
                        )
                    )
            if len(order) > len(elements):
                nxt = order[len(elements)]
                writer = appended.get((key, nxt))
                if writer is not None:
                    graph.add(
                        Edge(reader, writer, "rw", key, f"read {fmt_list(elements)}, missed {nxt}")
                    )


def _stale_reads(committed: list[Txn], orders: dict[str, tuple[str, ...]]) -> list[Anomaly]:
    """Reads that missed an append committed before their transaction began."""
    per_key: dict[str, list[tuple[float, int, str, Txn]]] = defaultdict(list)
    for txn in committed:
        if txn.completed is None:
            continue
        for key, element in txn.appends():
            order = orders.get(key, ())
            position = order.index(element) if element in order else 1 << 40  # never read
            per_key[key].append((txn.completed, position, element, txn))
    prefix: dict[str, tuple[list[float], list[tuple[int, str, Txn]]]] = {}
    for key, items in per_key.items():
        items.sort(key=lambda item: item[0])
        best: list[tuple[int, str, Txn]] = []
        for _, position, element, txn in items:
            if not best or position > best[-1][0]:
                best.append((position, element, txn))
            else:
                best.append(best[-1])
        prefix[key] = ([item[0] for item in items], best)
    found: list[Anomaly] = []
    for reader in committed:
        for key, elements in reader.reads():
            if key not in prefix:
                continue
            times, best = prefix[key]
            n = bisect.bisect_left(times, reader.invoked)
            if n == 0:
                continue
            position, element, writer = best[n - 1]
            if position >= len(elements) and writer is not reader:
                found.append(
                    Anomaly(
                        "stale-read",
                        f"stale read: {reader.name} began at {reader.invoked:.3f} s, after "
                        f"{writer.name} committed {element} to {key} (at "
                        f"{writer.completed or 0.0:.3f} s), yet read {key} = {fmt_list(elements)}",
                        (reader, writer),
                    )
                )
    return found
