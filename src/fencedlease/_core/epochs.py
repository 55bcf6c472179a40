"""Fencing tokens that stay above every earlier grant across the failovers of a replicated Redis
(Sentinel, Cluster), and the majority's word they rest on. No I/O.

A token is ``epoch * 2**40 + counter`` (`compose`), as ZooKeeper's zxid puts the leader's epoch
above its counter and a Raft term orders every entry of an older term below a newer one's. The
epoch is the failover configuration's: Sentinel's ``config-epoch`` of the primary, Redis Cluster's
``configEpoch`` of the node serving the slot. Each failover that promotes a node gives it an epoch
greater than every earlier one (a sentinel leader, or a cluster replica, is elected for a new epoch
by a majority of voters), and one epoch names one primary.

A grant runs with the floor ``epoch * 2**40`` (`floor`): the script grants ``max(counter + 1,
floor)``, so the first grant of a newer epoch is above every token of an older one, whatever
counter the promoted replica had when its primary died. A grant counts only when, once it ran
(and its ``WAIT``), a majority of the configured voters still name, alike, the node it ran on the
primary with the epoch its floor came from (`Majority.decide`): two majorities share a voter and
a voter's epoch never goes back, so a grant confirmed at epoch ``e`` ran before any majority
named a newer one, hence before any grant of a newer epoch, and no later majority names an older
one. A minority (one sentinel left with a deposed primary) confirms nothing.

The confirmation may come from any read of the voters that *started* after the grant's script
(and its ``WAIT``) returned, not only one made for that grant: the argument needs the majority's
word to follow the grant, and a read that started later follows it as well. So on a cluster one
read of every primary serves every grant and renewal batch waiting at once (each takes a read that
started after its own call returned); a read that started earlier, while its call was running,
serves none of them. A renewal counts on the same terms: a majority, in a read that started after
it returned, names the node it ran on with the slot's epoch of before; a holder whose node the
majority no longer names is refused its renewals and loses the lease at its deadline.

No clock enters the argument: it assumes only that a voter's epoch never decreases, that a primary
keeps its counter while it serves an epoch (persistence: a restart that loses the counter within
an epoch breaks it, as it breaks plain counters), and fewer than ``2**40`` grants of one key in
one epoch.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Sequence
from typing import Final, Generic, TypeVar

import attrs

from .errors import ValidationError

__all__ = [
    "COUNTER_BITS",
    "MAX_EPOCH",
    "Majority",
    "Named",
    "compose",
    "epoch_of",
    "floor",
    "majority_of",
]

COUNTER_BITS: Final = 40
"""The low bits of a token: the grants of one key within one epoch (about 1.1e12)."""
MAX_EPOCH: Final = 2 ** (63 - COUNTER_BITS) - 1
"""The largest epoch a token holds below ``2**63`` (a signed 64-bit column compares it)."""
_COUNTER_SPAN: Final = 1 << COUNTER_BITS

A = TypeVar("A", bound=Hashable)


def _check_int(name: str, value: object, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= high:
        raise ValidationError(name, f"{name} must be an int, 0 <= {name} <= {high}; got {value!r}")
    return value


def floor(epoch: int) -> int:
    """The lowest token of ``epoch``: ``epoch * 2**40``.

    Raises:
        ValidationError: ``epoch`` not an int in 0..`MAX_EPOCH`.
    """
    return _check_int("epoch", epoch, MAX_EPOCH) << COUNTER_BITS


def compose(epoch: int, counter: int) -> int:
    """The token ``epoch * 2**40 + counter``.

    Raises:
        ValidationError: ``epoch`` not an int in 0..`MAX_EPOCH`, ``counter`` not an int in
            0..2**40-1.
    """
    return floor(epoch) + _check_int("counter", counter, _COUNTER_SPAN - 1)


def epoch_of(token: int) -> int:
    """The epoch a token was granted in (its bits above the low 40)."""
    return token >> COUNTER_BITS


def majority_of(configured: int) -> int:
    """How many of ``configured`` voters are a majority: ``configured // 2 + 1``.

    Raises:
        ValidationError: ``configured`` not an int >= 1.
    """
    if isinstance(configured, bool) or not isinstance(configured, int) or configured < 1:
        raise ValidationError(
            "configured", f"configured must be an int >= 1 (voters); got {configured!r}"
        )
    return configured // 2 + 1


@attrs.frozen
class Named(Generic[A]):
    """The primary a majority names (``address``) and the epoch of that configuration."""

    address: A
    epoch: int


@attrs.frozen
class Majority(Generic[A]):
    """What the replies of ``configured`` voters (sentinels, cluster primaries) say.

    ``named``: the primary and epoch a majority of the configured voters name alike; None when no
    pair has a majority of the configured (not of those that answered: a voter that did not
    answer counts against), or when an answering voter reports a newer epoch (a failover's
    leader carries the new configuration before the others learn it: the old primary is
    already deposed). ``why``: the reason when ``named`` is None.
    """

    named: Named[A] | None
    why: str | None

    @classmethod
    def decide(cls, configured: int, replies: Sequence[tuple[A, int] | None]) -> Majority[A]:
        """The decision from ``replies``, one per voter asked (``(address, epoch)``, or None for
        a voter that did not answer or does not know the primary).

        Raises:
            ValidationError: ``configured`` not an int >= 1, fewer than ``len(replies)``.
        """
        need = majority_of(configured)
        if len(replies) > configured:
            raise ValidationError(
                "replies", f"{len(replies)} replies from {configured} configured voters"
            )
        answers = [reply for reply in replies if reply is not None]
        # Votes count for an (address, epoch) pair, not for an address: two majorities share a
        # voter, whose epoch never goes back, so a later decision names an epoch no older. A
        # voter that voted in an election does not carry the new configuration until the leader
        # announces it: a mixed majority's highest epoch may be one a later majority lacks.
        votes = Counter(answers)
        top = votes.most_common(1)
        if not top or top[0][1] < need:
            return cls(
                None,
                f"no majority: {top[0][1] if top else 0} of {configured} configured voters"
                f" agree on the primary and its epoch, {need} needed",
            )
        (address, epoch), _ = top[0]
        newer = [a for a, e in answers if e > epoch]
        if newer:
            return cls(
                None, f"a voter names {newer[0]!r} with an epoch newer than {epoch}: a failover"
            )
        return cls(Named(address, epoch), None)

    def confirms(self, ran_on: A, epoch: int) -> str | None:
        """Why a grant or renewal that ran on ``ran_on`` with the floor of ``epoch`` does not
        count; None when the majority names ``ran_on`` at that same epoch."""
        named = self.named
        if named is None:
            return self.why
        if named.address != ran_on:
            return f"the majority names {named.address!r} the primary, not {ran_on!r}"
        if named.epoch != epoch:
            return f"the primary's epoch moved from {epoch} to {named.epoch} meanwhile"
        return None
