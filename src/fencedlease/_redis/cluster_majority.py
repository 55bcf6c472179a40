"""The Redis Cluster majority's view, with no I/O: one primary's ``CLUSTER NODES`` read once
into a slot table (`SlotTable`), the tables of every primary decided per slot (`ClusterView`),
when a read may end early (`settled`), and which renewals of a batch the majority does not confirm
(`renewed_slots`, `unconfirmed_renewals`). The argument is `fencedlease._core.epochs`'s; the
reads are `fencedlease._async.cluster_backend`'s.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

import attrs
from redis.crc import key_slot

from fencedlease._core.epochs import Majority, majority_of
from fencedlease._core.errors import BackendError

from .keys import lease_key
from .replies import text

__all__ = [
    "ClusterView",
    "SlotTable",
    "renewal_doubt",
    "renewed_slots",
    "settled",
    "slot_owner",
    "unconfirmed_renewals",
]


def slot_owner(view: object, slot: int) -> tuple[str, int] | None:
    """The primary serving ``slot`` (``host:port``) and its ``configEpoch``, as one node's
    ``CLUSTER NODES`` (redis-py's dict of ``"host:port"`` to the node's fields) tells them; None
    when no primary there serves it, or the view is not such a dict. The epoch of a Redis
    Cluster failover: a promoted replica takes one greater than every other
    (`fencedlease._core.epochs`)."""
    return SlotTable.of(view).owner(slot)


@attrs.frozen
class SlotTable:
    """One node's ``CLUSTER NODES`` read once: every slot range a primary there serves, as
    ``(low, high, "host:port", configEpoch)`` sorted by ``low`` (`of`), so that the owner of a
    slot is one binary search (`owner`), not a walk of the reply. No I/O."""

    ranges: tuple[tuple[int, int, str, int], ...] = ()

    @classmethod
    def of(cls, view: object) -> SlotTable:
        """The table of ``view`` (redis-py's dict of ``"host:port"`` to the node's fields); empty
        when it is not such a dict. A replica's line, or a range or epoch that is not a number,
        is left out."""
        if not isinstance(view, dict):
            return cls()
        ranges: list[tuple[int, int, str, int]] = []
        for address, node in view.items():
            if not isinstance(node, dict) or "master" not in text(node.get("flags")).split(","):
                continue
            for bounds in node.get("slots") or ():
                try:
                    low, high = int(text(bounds[0])), int(text(bounds[-1]))
                    epoch = int(text(node.get("epoch")))
                except (ValueError, IndexError, TypeError):
                    continue
                ranges.append((low, high, text(address), epoch))
        return cls(tuple(sorted(ranges)))

    def owner(self, slot: int) -> tuple[str, int] | None:
        """The primary serving ``slot`` and its ``configEpoch``; None when none here does."""
        index = bisect.bisect_right(self.ranges, (slot, _NO_SLOT)) - 1
        if index >= 0:
            low, high, address, epoch = self.ranges[index]
            if low <= slot <= high:
                return address, epoch
        return None


_NO_SLOT = 1 << 14  # above every slot: sorts after each range that starts at a slot


def settled(configured: int, answers: dict[str, SlotTable | None]) -> bool:
    """Whether the primaries that answered so far (``answers``; None: one that failed) already
    decide every slot as the rest could not change: a majority of the ``configured`` answered,
    all alike. A primary still silent would only count against, or name a newer epoch, which
    refuses what the majority confirms; neither is needed for the majority's argument
    (`fencedlease._core.epochs`), and waiting for a stalled one would cost every call its bound.
    No I/O."""
    tables = [table for table in answers.values() if table is not None]
    return len(tables) >= majority_of(configured) and all(t == tables[0] for t in tables)


class ClusterView:
    """What the primaries asked at once said of the slot map (one `SlotTable` per primary, None
    for one that failed or did not answer in time), decided per slot on demand and kept: the
    decision of a slot is made once per view, however many grants and renewals ask it. No I/O."""

    def __init__(self, configured: int, tables: Sequence[SlotTable | None]) -> None:
        self.configured = configured
        self.tables = tuple(tables)
        self._decided: dict[int, Majority[str]] = {}

    def majority(self, slot: int) -> Majority[str]:
        """What a majority of the ``configured`` primaries say of ``slot``'s primary and its
        ``configEpoch`` (`fencedlease._core.epochs.Majority.decide`)."""
        decided = self._decided.get(slot)
        if decided is None:
            replies = [None if table is None else table.owner(slot) for table in self.tables]
            decided = Majority.decide(self.configured, replies)
            self._decided[slot] = decided
        return decided


def renewal_doubt(decided: Majority[str], ran_on: str, epoch: int | None) -> str | None:
    """Why renewals of a slot that ran on ``ran_on`` do not count, from the majority's view read
    after they ran (``decided``); None when they do: the majority names ``ran_on`` the slot's
    primary, at ``epoch`` (the slot's epoch the majority named before they were sent; None when
    none is known, then the node alone is checked). No I/O."""
    if epoch is None and decided.named is not None:
        epoch = decided.named.epoch
    return decided.confirms(ran_on, epoch or 0)


def renewed_slots(
    prefix: str,
    items: Sequence[tuple[str, str, int]],
    nodes: dict[str, list[list[int]]],
    results: Sequence[int | BaseException],
) -> dict[tuple[str, int], list[int]]:
    """The ``(node, slot)`` pairs of a batch (``nodes``, as `by_node` grouped it) where a lease
    was renewed (a token in its result), each with the indices of those leases. No I/O."""
    renewed: dict[tuple[str, int], list[int]] = {}
    for node, groups in nodes.items():
        for indices in groups:
            tokens = [i for i in indices if isinstance(results[i], int) and results[i]]
            if tokens:
                slot = key_slot(lease_key(prefix, items[indices[0]][0]).encode())
                renewed[node, slot] = tokens
    return renewed


def unconfirmed_renewals(
    items: Sequence[tuple[str, str, int]],
    renewed: dict[tuple[str, int], list[int]],
    results: Sequence[int | BaseException],
    doubts: dict[tuple[str, int], str | None],
) -> list[int | BaseException]:
    """A batch's ``results`` with the token of each lease ``renewed`` on a ``(node, slot)``
    replaced by a `BackendError` where ``doubts`` says why renewals there do not count. No
    I/O."""
    checked = list(results)
    for place, indices in renewed.items():
        why = doubts.get(place)
        if why is not None:
            for i in indices:
                checked[i] = BackendError(
                    f"renew {items[i][0]!r}: not confirmed by the cluster's majority: {why}"
                )
    return checked
