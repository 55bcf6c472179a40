"""The dependency graph of [`elle`][fencedlease_lab.harness.elle] and the search for its cycles.

The types of a list-append history ([`Txn`][fencedlease_lab.harness.elle.Txn],
[`Edge`][fencedlease_lab.harness.elle.Edge], [`Anomaly`][fencedlease_lab.harness.elle.Anomaly]), the
graph (transactions and their ``ww``/``wr``/``rw`` edges), Tarjan's strongly connected components
(Tarjan, "Depth-first search and linear graph algorithms", 1972) and, inside each, the shortest
cycle of each anomaly kind found by breadth-first search, as Elle searches them: ``G0`` over ``ww``
edges, ``G1c`` and ``G-single`` as one ``wr`` or ``rw`` edge closed by a ``ww``/``wr`` path, ``G2``
over every edge. Pure.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Sequence
from typing import Any, Final, Literal

import attrs

__all__ = [
    "CYCLE_ANOMALIES",
    "MAX_PER_KIND",
    "Anomaly",
    "Edge",
    "ElleResult",
    "Graph",
    "MicroOp",
    "Txn",
    "find_cycles",
    "fmt_list",
]

EdgeKind = Literal["ww", "wr", "rw"]
#: The cycle anomalies, weakest first, and the edge kinds a cycle of each may use.
CYCLE_ANOMALIES: Final[dict[str, frozenset[str]]] = {
    "G0": frozenset({"ww"}),
    "G1c": frozenset({"ww", "wr"}),
    "G-single": frozenset({"ww", "wr", "rw"}),
    "G2": frozenset({"ww", "wr", "rw"}),
}
#: At most this many anomalies of each kind are reported (and cycle searches per component).
MAX_PER_KIND: Final = 10

#: A micro-operation: ``("r", list, elements or None)`` or ``("append", list, element)``.
MicroOp = tuple[str, str, Any]


@attrs.frozen
class Txn:
    """One transaction: ``process`` and ``id`` (its operation in that process's history),
    ``type`` (``ok``, ``fail`` or ``info``: unknown, also when it never completed), ``ops``,
    ``invoked`` / ``completed`` (monotonic seconds) and the history ``line`` / ``end_line``."""

    process: str
    id: int
    type: str
    ops: tuple[MicroOp, ...]
    invoked: float = 0.0
    completed: float | None = None
    line: int = 0
    end_line: int | None = None

    @property
    def name(self) -> str:
        """``w1#7``: the process and the operation id."""
        return f"{self.process}#{self.id}"

    def reads(self) -> Iterator[tuple[str, tuple[str, ...]]]:
        """``(list, elements)`` for each read with a result."""
        for f, key, value in self.ops:
            if f == "r" and value is not None:
                yield key, value

    def appends(self) -> Iterator[tuple[str, str]]:
        """``(list, element)`` for each append."""
        for f, key, value in self.ops:
            if f == "append":
                yield key, value

    def lines(self) -> tuple[int, ...]:
        return (self.line,) + ((self.end_line,) if self.end_line is not None else ())


@attrs.frozen
class Edge:
    """A dependency ``source -> target`` of ``kind`` on ``key``, and why (``why``, in words)."""

    source: Txn
    target: Txn
    kind: EdgeKind
    key: str
    why: str

    def describe(self) -> str:
        return f"-[{self.kind} {self.key}: {self.why}]->"


@attrs.frozen
class Anomaly:
    """One anomaly: ``kind`` (``G0``, ``G1c``, ``G-single``, ``G2``, ``G1a``, ...), a
    ``message`` in words, the ``txns`` involved and, for a cycle, its ``edges`` in order (the
    target of the last is the source of the first)."""

    kind: str
    message: str
    txns: tuple[Txn, ...]
    edges: tuple[Edge, ...] = ()

    @property
    def lines(self) -> tuple[int, ...]:
        return tuple(sorted({line for txn in self.txns for line in txn.lines()}))


@attrs.frozen
class ElleResult:
    """The verdict: how many transactions were checked (``txns``: those that committed or may
    have), over how many lists (``keys``), the ``anomalies`` and the ``edges`` counted by kind."""

    txns: int
    keys: int
    anomalies: tuple[Anomaly, ...]
    edges: dict[str, int]

    @property
    def valid(self) -> bool:
        return not self.anomalies


def fmt_list(elements: Sequence[str]) -> str:
    if len(elements) <= 4:
        return "[" + " ".join(elements) + "]"
    return f"[{elements[0]} ... {elements[-1]}] ({len(elements)} elements)"


class Graph:
    """The dependency graph: for each transaction (by index), its edges out."""

    def __init__(self) -> None:
        self.out: dict[int, dict[int, list[Edge]]] = defaultdict(lambda: defaultdict(list))
        self.index: dict[tuple[str, int], int] = {}
        self.txns: list[Txn] = []

    def node(self, txn: Txn) -> int:
        key = (txn.process, txn.id)
        if key not in self.index:
            self.index[key] = len(self.txns)
            self.txns.append(txn)
        return self.index[key]

    def add(self, edge: Edge) -> None:
        if edge.source is edge.target:
            return
        self.out[self.node(edge.source)][self.node(edge.target)].append(edge)

    def edges(self, a: int, b: int, kinds: frozenset[str]) -> list[Edge]:
        return [e for e in self.out.get(a, {}).get(b, []) if e.kind in kinds]

    def successors(self, a: int, kinds: frozenset[str], within: set[int]) -> Iterator[int]:
        for b, edges in self.out.get(a, {}).items():
            if b in within and any(e.kind in kinds for e in edges):
                yield b


def _sccs(graph: Graph) -> list[set[int]]:
    """Tarjan's strongly connected components (iterative), those of two or more nodes."""
    index: dict[int, int] = {}
    low: dict[int, int] = {}
    on_stack: set[int] = set()
    stack: list[int] = []
    found: list[set[int]] = []
    counter = 0
    everything = frozenset({"ww", "wr", "rw"})
    nodes = set(range(len(graph.txns)))
    for root in range(len(graph.txns)):
        if root in index:
            continue
        work: list[tuple[int, Iterator[int]]] = [(root, graph.successors(root, everything, nodes))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            advanced = False
            for nxt in successors:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, graph.successors(nxt, everything, nodes)))
                    advanced = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component: set[int] = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(component)
    return found


def _path(
    graph: Graph, start: int, goal: int, kinds: frozenset[str], within: set[int]
) -> list[int] | None:
    """The shortest path ``start .. goal`` over ``kinds`` edges inside ``within`` (BFS)."""
    parent: dict[int, int] = {start: start}
    frontier = [start]
    while frontier:
        following: list[int] = []
        for node in frontier:
            for nxt in graph.successors(node, kinds, within):
                if nxt in parent:
                    continue
                parent[nxt] = node
                if nxt == goal:
                    path = [goal]
                    while path[-1] != start:
                        path.append(parent[path[-1]])
                    return path[::-1]
                following.append(nxt)
        frontier = following
    return None


def _cycle_edges(
    graph: Graph, nodes: list[int], kinds: frozenset[str], first: str | None = None
) -> tuple[Edge, ...]:
    """The edges of the cycle through ``nodes`` (closed back to the first): the first of kind
    ``first`` when given; elsewhere ``ww`` before ``wr`` before ``rw`` where two transactions
    have several."""
    rank = {"ww": 0, "wr": 1, "rw": 2}
    out: list[Edge] = []
    for a, b in zip(nodes, nodes[1:] + nodes[:1], strict=True):
        allowed = frozenset({first}) if first is not None and not out else kinds
        out.append(min(graph.edges(a, b, allowed), key=lambda e: rank[e.kind]))
    return tuple(out)


def _cycle_anomaly(kind: str, edges: tuple[Edge, ...]) -> Anomaly:
    steps = " ".join(f"{e.source.name} {e.describe()}" for e in edges)
    text = {
        "G0": "a write cycle",
        "G1c": "circular information flow",
        "G-single": "read skew / a lost update: one anti-dependency",
        "G2": "write skew: anti-dependencies",
    }[kind]
    message = f"{kind} ({text}): {steps} {edges[0].source.name}"
    return Anomaly(kind, message, tuple(e.source for e in edges), edges)


def find_cycles(graph: Graph) -> list[Anomaly]:
    """Cycles of each kind per strongly connected component, the weakest kind first (a set of
    transactions found in a weaker cycle is not reported again), at most
    [`MAX_PER_KIND`][fencedlease_lab.harness.elle_graph.MAX_PER_KIND] of each kind and as many
    searches per component."""
    anomalies: list[Anomaly] = []
    wwr = CYCLE_ANOMALIES["G1c"]
    for component in _sccs(graph):
        seen: set[frozenset[int]] = set()
        members = sorted(component)[: MAX_PER_KIND * 5]
        for kind in CYCLE_ANOMALIES:
            found = 0
            for nodes, first in _candidates(graph, kind, members, component, wwr):
                if found >= MAX_PER_KIND:
                    break
                if nodes is None or frozenset(nodes) in seen:
                    continue
                edges = _cycle_edges(graph, nodes, CYCLE_ANOMALIES[kind], first)
                rw = sum(1 for e in edges if e.kind == "rw")
                wr = sum(1 for e in edges if e.kind == "wr")
                if (kind == "G1c" and wr == 0) or (kind == "G-single" and rw != 1):
                    continue
                if kind == "G2" and rw < 2:
                    continue
                seen.add(frozenset(nodes))
                anomalies.append(_cycle_anomaly(kind, edges))
                found += 1
    return anomalies


def _candidates(
    graph: Graph, kind: str, members: list[int], component: set[int], wwr: frozenset[str]
) -> Iterator[tuple[list[int] | None, str | None]]:
    """Cycles to try for ``kind``: G0 and G2, a shortest cycle through each member over the
    kind's edges; G1c (G-single), each wr (rw) edge closed by a shortest ww/wr path back."""
    if kind in ("G0", "G2"):
        for start in members:
            yield _closed(graph, start, CYCLE_ANOMALIES[kind], component), None
        return
    first = "wr" if kind == "G1c" else "rw"
    for a in members:
        for b in sorted(graph.out.get(a, {})):
            if b in component and graph.edges(a, b, frozenset({first})):
                back = _path(graph, b, a, wwr, component)
                yield (None if back is None else [a, *back[:-1]]), first


def _closed(graph: Graph, start: int, kinds: frozenset[str], within: set[int]) -> list[int] | None:
    """A shortest cycle through ``start`` over ``kinds`` edges, as its nodes from ``start``."""
    best: list[int] | None = None
    for nxt in graph.successors(start, kinds, within):
        back = _path(graph, nxt, start, kinds, within) if nxt != start else [start]
        if back is not None and (best is None or len(back) + 1 < len(best)):
            best = [start, *back[:-1]]
    return best
