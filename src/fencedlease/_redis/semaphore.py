"""The steps of the Redis slot store of semaphores (``semaphore_*.lua``), both faces: what each
sends and how its reply reads is decided once, without I/O, by `SlotCalls`; the store that runs
them is `fencedlease._async.redis_slots` (and the sync module generated from it). The steps are
those of the slot stores' protocol (`fencedlease._async.semaphore_stores.AsyncSlotStore`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

import attrs

from fencedlease._core.backend import RenewItem
from fencedlease._core.errors import BackendError
from fencedlease._core.protocol import AcquireReply

from .cluster import finish_batch, slot_groups
from .keys import semaphore_keys
from .replies import decode_acquire, decode_renew_many, parse_token
from .scripts import (
    SEMAPHORE_ACQUIRE,
    SEMAPHORE_CLEAR,
    SEMAPHORE_COUNT,
    SEMAPHORE_RELEASE,
    SEMAPHORE_RENEW_MANY,
    Script,
)

__all__ = [
    "SlotCall",
    "SlotCalls",
    "decode_count",
    "merge_calls",
    "renew_args",
    "renew_calls",
]

T = TypeVar("T")


def renew_args(prefix: str, items: Sequence[RenewItem]) -> tuple[list[str], list[object]]:
    """KEYS and ARGV of ``semaphore_renew_many.lua`` for ``(name, owner_token, ttl_ms)`` items
    (both faces)."""
    keys: list[str] = []
    args: list[object] = []
    for name, owner_token, ttl_ms in items:
        keys.extend(semaphore_keys(prefix, name)[:2])
        args.extend((owner_token, ttl_ms))
    return keys, args


def renew_calls(prefix: str, items: Sequence[RenewItem], client: object) -> list[list[int]]:
    """The indices of ``items`` each ``semaphore_renew_many.lua`` call carries (both faces): all
    in one on a Redis server; one call per hash slot on a cluster (``client`` has a
    ``nodes_manager``), whose scripts' keys must share a slot. A semaphore's keys share its
    name's hash tag as a lease's do, so `slot_groups` places them. Pure."""
    if getattr(client, "nodes_manager", None) is None:
        return [list(range(len(items)))]
    return [indices for _, indices in slot_groups(prefix, items)]


def merge_calls(
    count: int,
    calls: Sequence[list[int]],
    outcomes: Sequence[list[int | BaseException] | BackendError],
) -> list[int | BaseException]:
    """The batch's ``count`` replies in order from each call's outcome (its decoded replies, or
    the error that stands in its slots' places).

    Raises:
        BackendError: every call failed (the first call's error), as one round trip would.
    """
    results: list[int | BaseException | None] = [None] * count
    failures: list[BaseException] = []
    for indices, outcome in zip(calls, outcomes, strict=True):
        if isinstance(outcome, BackendError):
            failures.append(outcome)
            outcome = [outcome] * len(indices)
        for index, value in zip(indices, outcome, strict=True):
            results[index] = value
    return finish_batch(results, failures)


def decode_count(reply: object, name: str) -> int:
    """``semaphore_count.lua``'s reply, a count 0..2**63-1.

    Raises:
        BackendError: any other reply."""
    return parse_token(reply, f"semaphore count {name!r}", minimum=0)


@attrs.frozen
class SlotCall(Generic[T]):
    """One step of the Redis slot store, decided without I/O: ``script`` with ``keys`` and
    ``args``, ``what`` (the step, as its `BackendError` names it), and ``decode`` (the reply as
    the step's result; raises `BackendError` for a reply it does not expect). ``renewal``: the
    step goes over the backend's renewal client, not the caller's."""

    what: str
    script: Script
    keys: Sequence[str]
    args: Sequence[object]
    decode: Callable[[object], T]
    renewal: bool = False


class SlotCalls:
    """The steps of the Redis slot store under ``prefix`` (keys ``<prefix>:{<name>}:semaphore``,
    ``...:semaphore:tokens``, ``...:semaphore:fence``) as `SlotCall`s, the same for both faces:
    each face's store only runs them (`fencedlease._async.redis_slots` and the sync module
    generated from it). No I/O."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix

    def fencing_scope(self, name: str) -> str:
        """The name of the semaphore's counter (the fencing scope of its slots)."""
        return semaphore_keys(self.prefix, name)[2]

    def acquire(
        self, name: str, owner_token: str, ttl_ms: int, limit: int
    ) -> SlotCall[AcquireReply]:
        return SlotCall(
            f"semaphore acquire {name!r}",
            SEMAPHORE_ACQUIRE,
            semaphore_keys(self.prefix, name),
            (owner_token, ttl_ms, limit),
            lambda reply: decode_acquire(reply, name),
        )

    def renew_many(self, items: Sequence[RenewItem]) -> SlotCall[list[int | BaseException]]:
        keys, args = renew_args(self.prefix, items)
        return SlotCall(
            f"semaphore renew {len(items)} slots",
            SEMAPHORE_RENEW_MANY,
            keys,
            args,
            lambda reply: decode_renew_many(items, reply),
            renewal=True,
        )

    def release(self, name: str, owner_token: str) -> SlotCall[bool]:
        return SlotCall(
            f"semaphore release {name!r}",
            SEMAPHORE_RELEASE,
            semaphore_keys(self.prefix, name)[:2],
            (owner_token,),
            lambda reply: decode_count(reply, name) == 1,
        )

    def count(self, name: str) -> SlotCall[int]:
        return SlotCall(
            f"semaphore count {name!r}",
            SEMAPHORE_COUNT,
            semaphore_keys(self.prefix, name)[:1],
            (),
            lambda reply: decode_count(reply, name),
        )

    def clear(self, name: str) -> SlotCall[bool]:
        return SlotCall(
            f"semaphore clear {name!r}",
            SEMAPHORE_CLEAR,
            semaphore_keys(self.prefix, name)[:2],
            (),
            lambda reply: decode_count(reply, name) > 0,
        )
