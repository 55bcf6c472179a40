"""Property ``b``, ``no-lost-update``, key by key.

Each key's final counter equals the number of its acknowledged increments (writes that completed
``ok``), give or take writes whose outcome is unknown (``info``); two acknowledged writes of the
same value on one key name the collision. The final counters are the run's ``final`` events, one
per key (``key``); a final that names no key is the counter of the only key written.
"""

from __future__ import annotations

from collections import defaultdict

from ..extract import Access
from ._base import Context, Outcome, Property, Violation

__all__ = ["PROPERTY"]

KEY = "no-lost-update"


def check(ctx: Context) -> Outcome:
    finals = dict(ctx.data.finals)
    final_lines = dict(ctx.data.final_lines)
    if not finals:
        return Outcome(0, note="the final counter was not read")
    written = {key for key, accesses in ctx.accesses_by_key.items() if accesses}
    if None in finals and None not in written and len(written) == 1:
        only = next(iter(written))
        finals[only], final_lines[only] = finals.pop(None), final_lines.pop(None)
    violations: list[Violation] = []
    checked = 0
    unread = sorted(str(k) for k in written - finals.keys())
    for key in sorted(finals, key=str):
        writes = [a for a in ctx.accesses_by_key.get(key, []) if a.op == "write"]
        checked += sum(1 for w in writes if w.type == "ok") + 1
        found = _check_key(ctx, key, writes, finals[key], final_lines[key])
        if found is not None:
            violations.append(found)
    note = f"the final counter of {len(unread)} key(s) was not read" if unread else None
    return Outcome(checked, violations, note)


def _check_key(
    ctx: Context, key: str | None, writes: list[Access], final: int, final_line: int
) -> Violation | None:
    """The violation of ``key`` (whose counter ends at ``final``, read at ``final_line``), or
    None. Its lines: the colliding writes, then the final read."""
    acked = [w for w in writes if w.type == "ok"]
    unknown = [w for w in writes if w.type == "info" or w.type is None]
    by_value: dict[int | None, list[Access]] = defaultdict(list)
    for write in acked:
        by_value[write.value].append(write)
    collisions = [group for group in by_value.values() if len(group) > 1]
    collided = "; ".join(
        " and ".join(f"{w.process} (token {w.token}, at {ctx.t(w.completed)})" for w in group)
        + f" both wrote {group[0].value}"
        for group in collisions[:5]
    )
    lines = (*(w.end_line or w.line for group in collisions[:5] for w in group), final_line)
    on = ctx.on(key)
    if final < len(acked):
        return ctx.violation(
            KEY,
            f"{on}the counter ends at {final} but {len(acked)} increments were acknowledged: "
            f"{len(acked) - final} acknowledged increment(s) were lost"
            + (f" ({collided}: one overwrote the other)." if collided else "."),
            None,
            lines,
            key,
        )
    if final > len(acked) + len(unknown):
        return ctx.violation(
            KEY,
            f"{on}the counter ends at {final}, more than the {len(acked)} acknowledged plus "
            f"{len(unknown)} unknown increments: a write happened that was reported failed.",
            None,
            (final_line,),
            key,
        )
    if collisions:
        return ctx.violation(
            KEY,
            f"{on}two acknowledged writes wrote the same value ({collided}): one increment "
            "overwrote the other.",
            None,
            lines,
            key,
        )
    return None


PROPERTY = Property(KEY, "b", "no lost update", check)
