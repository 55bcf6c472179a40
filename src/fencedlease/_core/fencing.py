"""Downstream fencing: the rule, decided once.

A fencing token protects data only if the storage checks it atomically with the access (Kleppmann,
"How to do distributed locking", 2016). Every store in this library applies the same rule, written
here as the pure function `decide`; the Lua scripts (``scripts/fenced_check.lua``) and the SQL
of [`fencedlease.db`][] are transcriptions of it, and the tests hold each of them to the same
sequential model. The reference store is [`FencedResource`][fencedlease.FencedResource]
(`fencedlease._core.fenced_resource`); what a store is given, a token or a lease, is read by
`coerce_access`.

The rule, for an access with token ``t`` by a lease of counter ``k`` with fingerprint ``f`` (both
``None`` for a bare ``int``), against a resource that has accepted at most ``last`` (by a lease
with fingerprint ``last_f``) and is fenced by leases of counter ``last_k`` (``None`` until a lease
came):

- ``k`` and ``last_k`` both known and not the same counter: refuse (``"key"``). Tokens are counted
  per counter, so a token of another counter cannot be compared with ``last``;
- nothing accepted yet, or ``t > last``: accept, and remember ``(t, f)``;
- ``t < last``: refuse (``"older"``);
- ``t == last`` under ``strict``: refuse (``"strict"``);
- ``t == last``, both fingerprints known and different: refuse (``"duplicate"``). Two leases
  carrying the same number means the counter was rolled back (a Redis failover, or a restart without
  persistence);
- ``t == last`` otherwise: accept (the same lease again, or an unknown one); an unknown fingerprint
  on record is replaced by a known one.

A lease's counter ``k`` is its [`fencing_scope`][fencedlease.Lease.fencing_scope]: the store and key
whose counter issued the token, ``"<prefix>:{<escaped key>}:fence"`` (for Redis the counter's own
key), so two managers with different prefixes, which count independently, never share a fence. A
lease without a scope (an object of another library with only a ``key``) is identified by its
``key``.

Records of the earlier shape hold a bare key (the lease's ``key``, before scopes were recorded).
Such a record matches a lease whose ``key`` equals it, provided that key does not itself look like
a scope (`looks_like_scope`: it holds ``":{"`` and ends with ``"}:fence"``; such a record is
taken for a scope and fails closed); the accepted lease then records its scope in its place. Once
a scope is recorded, only leases of that scope are accepted. So ``k`` matches ``last_k`` when
``last_k == scope``, or ``last_k == key`` for the bare key of the earlier shape
(`FencingAccess.legacy_key`).

An accepted lease's counter is recorded (``last_k`` is replaced only by the same counter's scope).

Tokens are exact integers ``1 <= t <= 2**63 - 1`` (`MAX_FENCING_TOKEN`, a signed 64-bit
counter's largest value) in every store: Lua compares them as canonical decimal strings, SQL as
``BIGINT``, Python and JSON as ``int``.
"""

from __future__ import annotations

from typing import Final, Literal

import attrs

from fencedlease._core import protocol as _protocol
from fencedlease._core.errors import LeaseKeyMismatchError, StaleTokenError

__all__ = [
    "MAX_FENCING_TOKEN",
    "MIN_FENCING_TOKEN",
    "FenceState",
    "FencingAccess",
    "RefusalReason",
    "decide",
    "looks_like_scope",
    "stale_token_error",
]

#: The largest token a fenced store accepts: 2**63 - 1, the largest value of Redis's signed 64-bit
#: counter (and of SQL ``BIGINT``). Every store compares tokens exactly up to it (the Lua scripts as
#: decimal strings, never as Lua's double-precision numbers).
MAX_FENCING_TOKEN: Final = _protocol.MAX_FENCING_TOKEN

#: The smallest token a fenced store accepts: counters start at 1.
MIN_FENCING_TOKEN: Final = 1

RefusalReason = Literal["older", "strict", "duplicate", "key"]


@attrs.frozen
class FencingAccess:
    """One access to a fenced resource: ``token``, and the lease's ``fingerprint`` and
    ``lease_key``, or ``None`` (a bare ``int``).

    ``lease_key`` is the identity of the lease's counter that a store records and compares: the
    lease's ``fencing_scope`` (``"<prefix>:{<escaped key>}:fence"``), or its ``key`` when it has
    no scope. ``legacy_key`` is the lease's bare ``key`` when a record of the earlier shape holding
    it may match this lease (see the module docstring), else ``None``.
    """

    token: int
    fingerprint: str | None = None
    lease_key: str | None = None
    legacy_key: str | None = None

    def matches(self, recorded: str) -> bool:
        """Whether a store fenced by ``recorded`` (a scope, or a bare key of the earlier shape)
        is fenced by this lease's counter."""
        return recorded == self.lease_key or (
            self.legacy_key is not None and recorded == self.legacy_key
        )


@attrs.frozen
class FenceState:
    """What a fenced resource remembers: the largest accepted token, who presented it, and the
    counter of the leases that fence it (``lease_key``: a scope such as
    ``"appA:{orders}:fence"``, or a bare key recorded by the earlier shape; ``None`` until the
    first lease)."""

    token: int
    fingerprint: str | None = None
    lease_key: str | None = None


def looks_like_scope(text: str) -> bool:
    """Whether ``text`` has the shape of a fencing scope: it holds ``":{"`` and ends with
    ``"}:fence"`` (``"appA:{orders}:fence"``). A recorded value of that shape is never taken for a
    bare key of the earlier shape."""
    return text.endswith("}:fence") and ":{" in text


def decide(
    state: FenceState | None, access: FencingAccess, *, strict: bool = False
) -> FenceState | RefusalReason:
    """Apply the fencing rule (module docstring): the new state if accepted, else why not.

    Pure: no I/O, no clock. Returns a `FenceState` (accepted; the state to store) or one of
    ``"key"``, ``"older"``, ``"strict"``, ``"duplicate"`` (refused; the state is unchanged).
    """
    if state is None:
        return FenceState(access.token, access.fingerprint, access.lease_key)
    if (
        state.lease_key is not None
        and access.lease_key is not None
        and not access.matches(state.lease_key)
    ):
        return "key"
    # A bare key of the earlier shape is replaced by the scope of the lease it matched.
    lease_key = state.lease_key if access.lease_key is None else access.lease_key
    if access.token > state.token:
        return FenceState(access.token, access.fingerprint, lease_key)
    if access.token < state.token:
        return "older"
    if strict:
        return "strict"
    if (
        state.fingerprint is not None
        and access.fingerprint is not None
        and state.fingerprint != access.fingerprint
    ):
        return "duplicate"
    fingerprint = state.fingerprint if state.fingerprint is not None else access.fingerprint
    return FenceState(state.token, fingerprint, lease_key)


def stale_token_error(
    resource: str,
    token: int,
    last_token: int | None,
    reason: RefusalReason,
    *,
    lease_key: str | None = None,
    presented_key: str | None = None,
) -> StaleTokenError:
    """Build the [`StaleTokenError`][fencedlease.StaleTokenError] every fenced store raises for a
    refusal of ``reason``.

    For ``"key"`` it is a [`LeaseKeyMismatchError`][fencedlease.LeaseKeyMismatchError] naming
    ``lease_key`` (on record) and ``presented_key`` (the refused lease's).
    """
    if reason == "key":
        recorded = "" if lease_key is None else lease_key
        presented = "" if presented_key is None else presented_key
        return LeaseKeyMismatchError(
            resource,
            token,
            last_token,
            recorded,
            presented,
            f"resource {resource!r} refused fencing token {token} of a lease of {presented!r}: "
            f"it is fenced by leases of {recorded!r} (the counter that issued its tokens), and "
            "fencing tokens are counted per counter (per prefix and key), so tokens of two "
            "counters cannot be compared (fence each key's data in a resource of its own)",
        )
    if reason == "duplicate":
        detail = (
            f"it has already accepted {last_token} from a different lease "
            "(a duplicate grant: was the fencing counter rolled back?)"
        )
    elif reason == "strict":
        detail = f"it has already accepted {last_token} and fences strictly"
    else:
        detail = f"it has already accepted {last_token}"
    return StaleTokenError(
        resource,
        token,
        last_token,
        f"resource {resource!r} refused fencing token {token}: {detail}",
    )
