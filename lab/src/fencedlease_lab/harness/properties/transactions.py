"""Property ``h``, ``transactions``: the list-append transactions, when the history has any
([`elle`][fencedlease_lab.harness.elle] does the work, after Elle).

No cycle of ww/wr/rw dependencies (G0, G1c, G-single, G2), no aborted or garbage read, no stale
read; each violation shows the cycle as transactions and edges, and names the history events of
those transactions (Kingsbury & Alvaro 2020; Adya 1999).
"""

from __future__ import annotations

from ..elle import check_list_append, txns_from_history
from ._base import Context, Outcome, Property

__all__ = ["PROPERTY"]

KEY = "transactions"


def check(ctx: Context) -> Outcome:
    txns = txns_from_history(ctx.events)
    if not txns:
        return Outcome(0, note="not judged: the history has no transactions")
    result = check_list_append(txns)
    violations = [
        ctx.violation(KEY, anomaly.message, anomaly.txns[0].invoked, anomaly.lines, None)
        for anomaly in result.anomalies
    ]
    edges = ", ".join(f"{n} {kind}" for kind, n in result.edges.items()) or "no"
    note = f"{result.txns} transaction(s) over {result.keys} list(s); {edges} edge(s)"
    return Outcome(result.txns, violations, note)


PROPERTY = Property(KEY, "h", "list-append transactions: no dependency cycle, no stale read", check)
