"""Downstream fencing: the rule, decided once, and the in-memory reference resource.

A fencing token protects data only if the storage checks it atomically with the access (Kleppmann,
"How to do distributed locking", 2016). Every store in this library applies the same rule, written
here as the pure function :func:`decide`; the Lua scripts (``scripts/fenced_check.lua``) and the SQL
of :mod:`fencedlease.db` are transcriptions of it, and the tests hold each of them to the same
sequential model.

The rule, for an access with token ``t`` by a lease with fingerprint ``f`` (``None`` for a bare
``int``), against a resource that has accepted at most ``last`` (by a lease with fingerprint
``last_f``):

- nothing accepted yet, or ``t > last``: accept, and remember ``(t, f)``;
- ``t < last``: refuse (``"older"``);
- ``t == last`` under ``strict``: refuse (``"strict"``);
- ``t == last``, both fingerprints known and different: refuse (``"duplicate"``). Two leases
  carrying the same number means the counter was rolled back (a Redis failover, or a restart without
  persistence);
- ``t == last`` otherwise: accept (the same lease again, or an unknown one); an unknown fingerprint
  on record is replaced by a known one.
"""

from __future__ import annotations

import threading
from typing import Final, Literal, Protocol, TypeAlias, runtime_checkable

import attrs

from . import _protocol
from ._errors import StaleTokenError, ValidationError

__all__ = [
    "MAX_FENCING_TOKEN",
    "FenceState",
    "FencedResource",
    "FencingAccess",
    "HasFencingToken",
    "RefusalReason",
    "TokenOrLease",
    "coerce_access",
    "decide",
    "owner_fingerprint",
    "stale_token_error",
]

#: The largest token a fenced store accepts. The Redis scripts compare tokens in Lua, whose numbers
#: are IEEE doubles, exact only up to 2**53 - 1; a per-key counter will not get there.
MAX_FENCING_TOKEN: Final = 2**53 - 1

RefusalReason = Literal["older", "strict", "duplicate"]


@runtime_checkable
class HasFencingToken(Protocol):
    """What fencing needs from a lease: its fencing token and its (secret) owner token."""

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
    Raises :class:`ValidationError` unless ``owner_token`` is a non-empty ``str``.
    """
    if not isinstance(owner_token, str) or not owner_token:
        raise ValidationError("owner_token", "owner_token must be a non-empty str")
    return _protocol.owner_fingerprint(owner_token)


@attrs.frozen
class FencingAccess:
    """One access to a fenced resource: ``token``, and the lease's ``fingerprint`` or ``None``."""

    token: int
    fingerprint: str | None = None


@attrs.frozen
class FenceState:
    """What a fenced resource remembers: the largest accepted token and who presented it."""

    token: int
    fingerprint: str | None = None


def coerce_access(token_or_lease: object, *, argument: str = "token_or_lease") -> FencingAccess:
    """Turn "a token or a lease" into a :class:`FencingAccess`, or raise :class:`ValidationError`.

    Accepts an ``int`` (not ``bool``), 0 ≤ n ≤ :data:`MAX_FENCING_TOKEN`, which has no fingerprint,
    or any object with ``fencing_token`` (such an int) and ``owner_token`` (a non-empty ``str``),
    whose fingerprint is :func:`owner_fingerprint` of its owner token. A lease restored without a
    fencing token (``fencing_token is None``) cannot be fenced and is refused here. ``argument``
    names the argument in the error.
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
        return FencingAccess(_check_token(token, argument), owner_fingerprint(owner))
    raise ValidationError(
        argument,
        f"{argument} must be an int fencing token or a lease with fencing_token and owner_token, "
        f"not {type(token_or_lease).__name__}",
    )


def _check_token(token: int, argument: str) -> int:
    if not 0 <= token <= MAX_FENCING_TOKEN:
        raise ValidationError(
            argument, f"fencing token must be 0 <= token <= {MAX_FENCING_TOKEN}, got {token}"
        )
    return token


def decide(
    state: FenceState | None, access: FencingAccess, *, strict: bool = False
) -> FenceState | RefusalReason:
    """Apply the fencing rule (module docstring): the new state if accepted, else why not.

    Pure: no I/O, no clock. Returns a :class:`FenceState` (accepted; the state to store) or one of
    ``"older"``, ``"strict"``, ``"duplicate"`` (refused; the state is unchanged).
    """
    if state is None or access.token > state.token:
        return FenceState(access.token, access.fingerprint)
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
    if state.fingerprint is None and access.fingerprint is not None:
        return FenceState(state.token, access.fingerprint)
    return state


def stale_token_error(
    resource: str, token: int, last_token: int | None, reason: RefusalReason
) -> StaleTokenError:
    """Build the :class:`StaleTokenError` every fenced store raises for a refusal of ``reason``."""
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
    process. ``name`` (a non-empty ``str``) is used in errors. Raises :class:`ValidationError` for a
    bad ``name``.
    """

    def __init__(self, name: str, *, strict: bool = False) -> None:
        if not isinstance(name, str) or not name:
            raise ValidationError("name", "name must be a non-empty str")
        self._name = name
        self._strict = bool(strict)
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

    def accept(self, token_or_lease: TokenOrLease) -> int:
        """Admit one access by ``token_or_lease`` (an ``int`` token or a lease); return its token.

        Accepted only if the token is at least the largest accepted so far (``strict``: greater),
        and not the same number as the last accepted one presented by a different lease (a duplicate
        grant). Raises :class:`StaleTokenError` (``.last_token`` is the largest accepted) when
        refused, :class:`ValidationError` for something that is not a token or a lease.
        """
        access = coerce_access(token_or_lease)
        with self._lock:
            outcome = decide(self._state, access, strict=self._strict)
            if isinstance(outcome, FenceState):
                self._state = outcome
                return access.token
            last = None if self._state is None else self._state.token
        raise stale_token_error(self._name, access.token, last, outcome)

    def __repr__(self) -> str:
        return (
            f"FencedResource({self._name!r}, strict={self._strict}, last_token={self.last_token!r})"
        )
