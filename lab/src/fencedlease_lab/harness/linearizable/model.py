"""The sequential model: a key of the resource as a fenced register, ``(value, fence)``, and the
library's fencing rule as one [`step`][fencedlease_lab.harness.linearizable.step] of it.

Pure: no I/O, no clock."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Literal

import attrs

OpKind = Literal["read", "write"]
#: ``ok``: the resource accepted it (a read's ``value`` is what it returned); ``refused``: the
#: resource refused the token (``last``: the token it said it had accepted, None if unknown);
#: ``unknown``: it may or may not have taken effect.
OpOutcome = Literal["ok", "refused", "unknown"]


@attrs.frozen
class RegisterOp:
    """One access of one key of the resource.

    ``kind``: ``read`` or ``write``; ``token``: the fencing token presented (None: an unfenced
    access); ``owner``: which lease presented it (two grants with the same token are told apart
    by it, as the resource tells them apart by the owner's fingerprint; None: unknown);
    ``value``: what a write wrote, or what an ``ok`` read returned; ``outcome``; ``last``: for a
    refusal, the last accepted token the resource reported; ``invoked`` / ``completed``:
    monotonic seconds (``completed`` None: it never completed); ``line`` / ``end_line``: the
    history lines (1-based) of the invocation and the completion.
    """

    process: str
    kind: OpKind
    key: str
    token: int | None
    value: int | None
    outcome: OpOutcome
    invoked: float
    completed: float | None = None
    owner: Hashable | None = None
    last: int | None = None
    line: int = 0
    end_line: int | None = None

    @property
    def fenced(self) -> bool:
        """Whether the resource checks this access's token."""
        return self.token is not None

    @property
    def determinate(self) -> bool:
        """Its outcome is known: it must appear in a linearization."""
        return self.outcome != "unknown" and self.completed is not None

    def describe(self, origin: float = 0.0) -> str:
        """``w1's read (token 5) returned 3 [1.20 s .. 1.23 s]``, for messages."""
        token = f"token {self.token}" if self.token is not None else "unfenced"
        if self.outcome == "refused":
            what = "was refused" + (
                f" (last accepted {self.last})" if self.last is not None else ""
            )
        elif self.outcome == "unknown":
            what = "had an unknown outcome" + (
                f" (writing {self.value})" if self.kind == "write" else ""
            )
        elif self.kind == "read":
            what = f"returned {self.value}"
        else:
            what = f"wrote {self.value}"
        end = "never" if self.completed is None else f"{self.completed - origin:.3f} s"
        return (
            f"{self.process}'s {self.kind} ({token}) {what} "
            f"[{self.invoked - origin:.3f} s .. {end}]"
        )


@attrs.frozen
class RegisterState:
    """The model's state: ``value``, ``fence`` (the highest accepted token; None: none yet) and
    ``owner`` (who presented it)."""

    value: int | None
    fence: int | None = None
    owner: Hashable | None = None

    def describe(self) -> str:
        fence = "none" if self.fence is None else str(self.fence)
        return f"(value {self.value}, fence {fence})"


_State = tuple[int | None, int | None, Hashable | None]


def _accepts(state: _State, token: int | None, owner: Hashable | None) -> _State | None:
    """The fencing rule on a state tuple: the new (fence, owner) half, or None when refused."""
    _, fence, fence_owner = state
    if token is None:  # unfenced: always accepted, the fence unchanged
        return state
    if fence is None or token > fence:
        return (state[0], token, owner)
    if token < fence:
        return None
    if fence_owner is not None and owner is not None and fence_owner != owner:
        return None  # the same number from a different lease: a duplicate grant
    return (state[0], fence, fence_owner if fence_owner is not None else owner)


def _step(state: _State, op: RegisterOp) -> _State | None:
    """The state after ``op`` if its recorded outcome is possible from ``state``, else None."""
    accepted = _accepts(state, op.token, op.owner)
    if op.outcome == "refused":
        if accepted is not None:
            return None
        if op.last is not None and op.last != state[1]:
            return None
        return state
    if op.outcome == "ok":
        if accepted is None:
            return None
        if op.kind == "read":
            return accepted if op.value == state[0] else None
        return (op.value, accepted[1], accepted[2])
    # unknown: whatever the model does (accepted or refused), the result is unconstrained
    if accepted is None:
        return state
    return (op.value, accepted[1], accepted[2]) if op.kind == "write" else accepted


def step(state: RegisterState, op: RegisterOp) -> RegisterState | None:
    """The model: the state after ``op`` (applied atomically) when its recorded outcome is the
    one the model gives from ``state``, else None. An ``unknown`` op always steps."""
    after = _step((state.value, state.fence, state.owner), op)
    return None if after is None else RegisterState(*after)
