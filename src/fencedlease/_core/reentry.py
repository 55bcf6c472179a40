"""Bounded reentrancy of ``hold(key, reentrant=True)``, both faces: the rules, no I/O.

The owner of a hold is the caller that entered it: the thread on the sync face (a token of the
thread's own, new in a forked child, see ``current_caller``), the task on the asyncio face; never
the manager, so two threads (tasks) of one manager still wait for each other. A reentrant hold
inside an enclosing hold (or ``keep_alive``) of the same key by the same manager and owner
acquires nothing: it gets the enclosing block's lease, with its token, and adds one to the
enclosing block's depth; leaving it takes one off and releases nothing (only the outermost block
releases). The depth, the outermost block included, may not pass ``max_depth``
([`ReentrancyLimitError`][fencedlease.ReentrancyLimitError], raised before anything changes).

A loss is seen at every level: a nested hold of a lost lease raises
[`LeaseLostError`][fencedlease.LeaseLostError] when entered, and a nested block whose lease was
lost while it ran ends in it (on the asyncio face the enclosing block's cancellation of the task
comes out of the nested one as ``LeaseLostError``, then out of the enclosing one unchanged).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple, Protocol, TypeVar

from fencedlease._core.decisions import hold_outcome
from fencedlease._core.errors import ReentrancyLimitError, ValidationError
from fencedlease._core.view import LeaseView

__all__ = [
    "DEFAULT_MAX_DEPTH",
    "MAX_DEPTH_BOUND",
    "NOT_REENTRANT",
    "Reentry",
    "check_reentry",
    "enclosing",
    "nest",
    "unnest",
]

DEFAULT_MAX_DEPTH = 64
"""How deep reentrant holds of one key may nest by default, the outermost block included."""

MAX_DEPTH_BOUND = 10_000
"""The largest ``max_depth`` accepted."""


class Reentry(NamedTuple):
    """``hold``'s reentrancy arguments, checked (see `check_reentry`)."""

    reentrant: bool
    max_depth: int


NOT_REENTRANT = Reentry(False, DEFAULT_MAX_DEPTH)
"""A plain hold's: a nested hold of a key the owner holds is refused."""


def check_reentry(reentrant: object, max_depth: object) -> Reentry:
    """Validate ``reentrant`` (a bool) and ``max_depth`` (an int in 1..`MAX_DEPTH_BOUND`).

    Raises:
        ValidationError: naming the argument and the bound (``bool`` is no depth).
    """
    if not isinstance(reentrant, bool):
        raise ValidationError(
            "reentrant", f"reentrant must be a bool, not {type(reentrant).__name__}"
        )
    if (
        isinstance(max_depth, bool)
        or not isinstance(max_depth, int)
        or not 1 <= max_depth <= MAX_DEPTH_BOUND
    ):
        raise ValidationError(
            "max_depth",
            f"max_depth must be an int, 1 <= max_depth <= {MAX_DEPTH_BOUND}; got {max_depth!r}",
        )
    return Reentry(reentrant, int(max_depth))


class _Canceller(Protocol):
    def delivered(self, exc: BaseException | None) -> bool: ...


class Block(Protocol):
    """An outermost hold block as the bookkeeping sees it (a face's ``_Hold``)."""

    caller: object
    depth: int

    @property
    def lease(self) -> LeaseView | None: ...

    @property
    def _canceller(self) -> _Canceller | None: ...


B = TypeVar("B", bound=Block)


def enclosing(blocks: Iterable[B], key: str, caller: object) -> B | None:
    """The block of ``blocks`` that holds ``key`` for ``caller``: its lease neither released nor
    being released (a lost one included, so that a nested hold sees the loss), a held one before
    a lost one. None if there is none."""
    lost = None
    for block in blocks:
        lease = block.lease
        if block.caller != caller or lease is None or lease.key != key:
            continue
        state = lease._state
        if state.released or state.releasing:
            continue
        if not state.lost:
            return block
        lost = block
    return lost


def nest(block: Block, reentry: Reentry, now_mono: float) -> None:
    """Enter a reentrant hold inside ``block`` (whose lease it gets): the depth one more.

    Raises:
        LeaseLostError: the lease is lost (its deadline applied at ``now_mono``).
        ReentrancyLimitError: the depth would pass ``reentry.max_depth``.
    """
    lease = block.lease
    assert lease is not None
    if lease._state.check_deadline(now_mono):
        raise lease._lost_error()
    if block.depth >= reentry.max_depth:
        raise ReentrancyLimitError(lease.key, reentry.max_depth)
    block.depth += 1


def unnest(block: Block, exc: BaseException | None, now_mono: float) -> BaseException | None:
    """Leave a reentrant hold inside ``block`` (nothing is released): the depth one less, and
    what the nested block ends in: None (as its body did), or the lease's
    [`LeaseLostError`][fencedlease.LeaseLostError] when the lease was lost (by ``now_mono``) and
    the body returned or was cancelled by that loss; an exception of the body's own wins."""
    block.depth -= 1
    lease = block.lease
    assert lease is not None
    canceller = block._canceller
    by_loss = canceller is not None and canceller.delivered(exc)
    lease._state.check_deadline(now_mono)
    return hold_outcome(lease, exc is not None and not by_loss, None)
