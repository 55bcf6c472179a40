"""Downstream fencing: the rule, decided once, and the in-memory reference resource.

A fencing token protects data only if the storage checks it atomically with the access (Kleppmann,
"How to do distributed locking", 2016). Every store in this library applies the same rule, written
here as the pure function :func:`decide`; the Lua scripts (``scripts/fenced_check.lua``) and the SQL
of :mod:`fencedlease.db` are transcriptions of it, and the tests hold each of them to the same
sequential model.

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

A lease's counter ``k`` is its :attr:`~fencedlease.Lease.fencing_scope`: the store and key whose
counter issued the token, ``"<prefix>:{<escaped key>}:fence"`` (for Redis the counter's own key), so
two managers with different prefixes, which count independently, never share a fence. A lease
without a scope (an object of another library with only a ``key``) is identified by its ``key``.

Records of the earlier shape hold a bare key (the lease's ``key``, before scopes were recorded).
Such a record matches a lease whose ``key`` equals it, provided that key does not itself look like
a scope (:func:`looks_like_scope`: it holds ``":{"`` and ends with ``"}:fence"``; such a record is
taken for a scope and fails closed); the accepted lease then records its scope in its place. Once
a scope is recorded, only leases of that scope are accepted. So ``k`` matches ``last_k`` when
``last_k == scope``, or ``last_k == key`` for the bare key of the earlier shape
(:attr:`FencingAccess.legacy_key`).

An accepted lease's counter is recorded (``last_k`` is replaced only by the same counter's scope).

Tokens are exact integers ``1 <= t <= 2**63 - 1`` (:data:`MAX_FENCING_TOKEN`, a signed 64-bit
counter's largest value) in every store: Lua compares them as canonical decimal strings, SQL as
``BIGINT``, Python and JSON as ``int``.
"""

from __future__ import annotations

import threading
from typing import Final, Literal, Protocol, TypeAlias, runtime_checkable

import attrs

from . import _protocol
from ._errors import LeaseKeyMismatchError, StaleTokenError, ValidationError
from ._validate import check_key

__all__ = [
    "MAX_FENCING_TOKEN",
    "MIN_FENCING_TOKEN",
    "FenceState",
    "FencedResource",
    "FencingAccess",
    "HasFencingToken",
    "RefusalReason",
    "TokenOrLease",
    "check_strict",
    "coerce_access",
    "decide",
    "lease_key_of",
    "lease_scope_of",
    "looks_like_scope",
    "owner_fingerprint",
    "stale_token_error",
]

#: The largest token a fenced store accepts: 2**63 - 1, the largest value of Redis's signed 64-bit
#: counter (and of SQL ``BIGINT``). Every store compares tokens exactly up to it (the Lua scripts as
#: decimal strings, never as Lua's double-precision numbers).
MAX_FENCING_TOKEN: Final = _protocol.MAX_FENCING_TOKEN

#: The smallest token a fenced store accepts: counters start at 1.
MIN_FENCING_TOKEN: Final = 1

RefusalReason = Literal["older", "strict", "duplicate", "key"]


@runtime_checkable
class HasFencingToken(Protocol):
    """What fencing needs from a lease: its fencing token and its (secret) owner token.

    A lease's ``fencing_scope`` and ``key`` are read too when it has them (every lease of this
    library has): see :func:`lease_scope_of` and :func:`lease_key_of`.
    """

    @property
    def fencing_token(self) -> int | None: ...

    @property
    def owner_token(self) -> str: ...


TokenOrLease: TypeAlias = "int | HasFencingToken"


def owner_fingerprint(owner_token: str) -> str:
    """Return a non-secret name for the lease holding ``owner_token``: 16 hex characters.

    The first 64 bits of SHA-256 of the token (the same name :mod:`fencedlease._protocol` gives a
    lease in ``inspect`` and events): enough to tell two leases apart, useless for renewing
    or releasing someone else's lease, so it may be stored beside the data and shown in errors.
    Raises :class:`ValidationError` unless ``owner_token`` is a non-empty ``str`` encodable as
    UTF-8.
    """
    if not isinstance(owner_token, str) or not owner_token:
        raise ValidationError("owner_token", "owner_token must be a non-empty str")
    try:
        return _protocol.owner_fingerprint(owner_token)
    except UnicodeEncodeError:
        raise ValidationError("owner_token", "owner_token must be encodable as UTF-8") from None


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


def lease_key_of(lease: object, argument: str = "token_or_lease") -> str | None:
    """The ``key`` of ``lease``, or ``None`` when it has no ``key`` attribute.

    Raises :class:`ValidationError` naming ``argument`` when ``key`` is there but not a non-empty
    ``str`` encodable as UTF-8.
    """
    key = getattr(lease, "key", None)
    if key is None:
        return None
    if not isinstance(key, str) or not key:
        raise ValidationError(argument, f"{argument}.key must be a non-empty str")
    try:
        key.encode("utf-8")
    except UnicodeEncodeError:
        raise ValidationError(argument, f"{argument}.key must be encodable as UTF-8") from None
    return key


def looks_like_scope(text: str) -> bool:
    """Whether ``text`` has the shape of a fencing scope: it holds ``":{"`` and ends with
    ``"}:fence"`` (``"appA:{orders}:fence"``). A recorded value of that shape is never taken for a
    bare key of the earlier shape."""
    return text.endswith("}:fence") and ":{" in text


def lease_scope_of(lease: object, argument: str = "token_or_lease") -> str | None:
    """The ``fencing_scope`` of ``lease``, or ``None`` when it has none (an object without the
    attribute, or a lease of a backend that names no scope).

    Raises :class:`ValidationError` naming ``argument`` when ``fencing_scope`` is there but not a
    non-empty ``str`` encodable as UTF-8.
    """
    scope = getattr(lease, "fencing_scope", None)
    if scope is None:
        return None
    if not isinstance(scope, str) or not scope:
        raise ValidationError(argument, f"{argument}.fencing_scope must be a non-empty str")
    try:
        scope.encode("utf-8")
    except UnicodeEncodeError:
        raise ValidationError(
            argument, f"{argument}.fencing_scope must be encodable as UTF-8"
        ) from None
    return scope


def coerce_access(token_or_lease: object, *, argument: str = "token_or_lease") -> FencingAccess:
    """Turn "a token or a lease" into a :class:`FencingAccess`, or raise :class:`ValidationError`.

    Accepts an ``int`` (not ``bool``), :data:`MIN_FENCING_TOKEN` (1) ≤ n ≤
    :data:`MAX_FENCING_TOKEN` (2**63 - 1), which has no fingerprint and no key, or any object with
    ``fencing_token`` (such an int) and ``owner_token`` (a non-empty ``str``), whose fingerprint is
    :func:`owner_fingerprint` of its owner token and whose counter is its ``fencing_scope``
    (:func:`lease_scope_of`), or its ``key`` (:func:`lease_key_of`) when it has no scope.
    A lease restored without a fencing token (``fencing_token is None``) cannot be fenced and is
    refused here. ``argument`` names the argument in the error.
    """
    if isinstance(token_or_lease, bool):
        raise ValidationError(
            argument, f"{argument} must be an int fencing token or a lease, not bool"
        )
    if isinstance(token_or_lease, int):
        return FencingAccess(_check_token(token_or_lease, argument), None)
    if isinstance(token_or_lease, HasFencingToken):
        token = token_or_lease.fencing_token
        if token is None:
            raise ValidationError(
                argument,
                f"{argument} is a lease without a fencing token (restored without one); "
                "it cannot be fenced",
            )
        if isinstance(token, bool) or not isinstance(token, int):
            raise ValidationError(
                argument, f"{argument}.fencing_token must be an int, not {type(token).__name__}"
            )
        owner = token_or_lease.owner_token
        if not isinstance(owner, str) or not owner:
            raise ValidationError(argument, f"{argument}.owner_token must be a non-empty str")
        try:
            fingerprint = owner_fingerprint(owner)
        except ValidationError:
            raise ValidationError(
                argument, f"{argument}.owner_token must be encodable as UTF-8"
            ) from None
        key = lease_key_of(token_or_lease, argument)
        scope = lease_scope_of(token_or_lease, argument)
        if scope is None:
            return FencingAccess(_check_token(token, argument), fingerprint, key)
        legacy = key if key is not None and not looks_like_scope(key) else None
        return FencingAccess(_check_token(token, argument), fingerprint, scope, legacy)
    raise ValidationError(
        argument,
        f"{argument} must be an int fencing token or a lease with fencing_token and owner_token, "
        f"not {type(token_or_lease).__name__}",
    )


def _check_token(token: int, argument: str) -> int:
    if not MIN_FENCING_TOKEN <= token <= MAX_FENCING_TOKEN:
        raise ValidationError(
            argument,
            f"{argument}: a fencing token must be {MIN_FENCING_TOKEN} <= token <= "
            f"{MAX_FENCING_TOKEN} (2**63 - 1), got {token}",
        )
    # An int subclass (an IntEnum member) becomes a plain int: stores would see its repr.
    return int(token)


def check_strict(strict: object) -> bool:
    """Return ``strict`` if it is a ``bool``; raise :class:`ValidationError` naming it otherwise
    (``strict="no"`` would be true)."""
    if not isinstance(strict, bool):
        raise ValidationError("strict", f"strict must be a bool, not {type(strict).__name__}")
    return strict


def decide(
    state: FenceState | None, access: FencingAccess, *, strict: bool = False
) -> FenceState | RefusalReason:
    """Apply the fencing rule (module docstring): the new state if accepted, else why not.

    Pure: no I/O, no clock. Returns a :class:`FenceState` (accepted; the state to store) or one of
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
    """Build the :class:`StaleTokenError` every fenced store raises for a refusal of ``reason``.

    For ``"key"`` it is a :class:`LeaseKeyMismatchError` naming ``lease_key`` (on record) and
    ``presented_key`` (the refused lease's).
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


class FencedResource:
    """An in-memory, thread-safe fenced resource: the reference for every other store.

    ``FencedResource(name, *, strict=False)``. :meth:`accept` applies the fencing rule of this
    module atomically (one lock); a process-local resource, so it protects only what lives in this
    process. ``name`` (a non-empty ``str``) is used in errors. The first lease accepted records its
    counter (:attr:`lease_key`, the lease's ``fencing_scope``); from then on leases of other
    counters (another key, or the same key under another prefix or store) are refused. Raises
    :class:`ValidationError` for a bad ``name`` or a ``strict`` that is not a ``bool``.
    """

    def __init__(self, name: str, *, strict: bool = False) -> None:
        self._name = check_key(name, "name")
        self._strict = check_strict(strict)
        self._lock = threading.Lock()
        self._state: FenceState | None = None

    @property
    def name(self) -> str:
        """The resource's name, as given."""
        return self._name

    @property
    def strict(self) -> bool:
        """``True``: a token is accepted only if greater than every accepted one (not equal)."""
        return self._strict

    @property
    def last_token(self) -> int | None:
        """The largest accepted token, or ``None`` before the first access."""
        with self._lock:
            return None if self._state is None else self._state.token

    @property
    def last_fingerprint(self) -> str | None:
        """:func:`owner_fingerprint` of the lease that presented :attr:`last_token`, or ``None``."""
        with self._lock:
            return None if self._state is None else self._state.fingerprint

    @property
    def lease_key(self) -> str | None:
        """The counter of the leases that fence this resource: the first accepted lease's
        ``fencing_scope`` (``"<prefix>:{<escaped key>}:fence"``; its ``key`` for a lease without
        one), or ``None`` while only bare ``int`` tokens (or nothing) were accepted."""
        with self._lock:
            return None if self._state is None else self._state.lease_key

    def accept(self, token_or_lease: TokenOrLease) -> int:
        """Admit one access by ``token_or_lease`` (an ``int`` token or a lease); return its token.

        Accepted only if the token is at least the largest accepted so far (``strict``: greater),
        not the same number as the last accepted one presented by a different lease (a duplicate
        grant), and, for a lease, if its counter is the one on record (:attr:`lease_key`). Raises
        :class:`StaleTokenError` (``.last_token`` is the largest accepted) when refused, its
        subclass :class:`LeaseKeyMismatchError` for a lease of another counter,
        :class:`ValidationError` for something that is not a token (1..2**63 - 1) or a lease.
        """
        access = coerce_access(token_or_lease)
        with self._lock:
            state = self._state
            outcome = decide(state, access, strict=self._strict)
            if isinstance(outcome, FenceState):
                self._state = outcome
                return access.token
        assert state is not None  # a refusal needs something on record
        raise stale_token_error(
            self._name,
            access.token,
            state.token,
            outcome,
            lease_key=state.lease_key,
            presented_key=access.lease_key,
        )

    def __repr__(self) -> str:
        return (
            f"FencedResource({self._name!r}, strict={self._strict}, last_token={self.last_token!r})"
        )
