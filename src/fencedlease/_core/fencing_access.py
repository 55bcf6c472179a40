"""What a fenced store is given: "a token or a lease", checked and turned into a
`FencingAccess` (`coerce_access`), and the non-secret name of a
lease ([`owner_fingerprint`][fencedlease.owner_fingerprint]). Every store
([`FencedResource`][fencedlease.FencedResource],
[`RedisFencedResource`][fencedlease.RedisFencedResource], [`fencedlease.db`][]) reads its argument
here, so each refuses the same values with the same
[`ValidationError`][fencedlease.ValidationError].
"""

from __future__ import annotations

from typing import Protocol, TypeAlias, runtime_checkable

from fencedlease._core import protocol as _protocol
from fencedlease._core.errors import ValidationError
from fencedlease._core.fencing import (
    MAX_FENCING_TOKEN,
    MIN_FENCING_TOKEN,
    FencingAccess,
    looks_like_scope,
)

__all__ = [
    "HasFencingToken",
    "TokenOrLease",
    "coerce_access",
    "lease_key_of",
    "lease_scope_of",
    "owner_fingerprint",
]


@runtime_checkable
class HasFencingToken(Protocol):
    """What fencing needs from a lease: its fencing token and its (secret) owner token.

    A lease's ``fencing_scope`` and ``key`` are read too when it has them (every lease of this
    library has): see `lease_scope_of` and `lease_key_of`.
    """

    @property
    def fencing_token(self) -> int | None: ...

    @property
    def owner_token(self) -> str: ...


TokenOrLease: TypeAlias = "int | HasFencingToken"


def owner_fingerprint(owner_token: str) -> str:
    """Return a non-secret name for the lease holding ``owner_token``: 16 hex characters.

    The first 64 bits of SHA-256 of the token (the same name `fencedlease._core.protocol` gives a
    lease in ``inspect`` and events): enough to tell two leases apart, useless for renewing
    or releasing someone else's lease, so it may be stored beside the data and shown in errors.
    Raises [`ValidationError`][fencedlease.ValidationError] unless ``owner_token`` is a non-empty
    ``str`` encodable as UTF-8.
    """
    if not isinstance(owner_token, str) or not owner_token:
        raise ValidationError("owner_token", "owner_token must be a non-empty str")
    try:
        return _protocol.owner_fingerprint(owner_token)
    except UnicodeEncodeError:
        raise ValidationError("owner_token", "owner_token must be encodable as UTF-8") from None


def _text_attribute(lease: object, name: str, argument: str) -> str | None:
    """``lease.<name>``, or ``None`` when it is missing or ``None``;
    [`ValidationError`][fencedlease.ValidationError] naming ``argument`` when it is there but not a
    non-empty ``str`` encodable as UTF-8."""
    value = getattr(lease, name, None)
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise ValidationError(argument, f"{argument}.{name} must be a non-empty str")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValidationError(argument, f"{argument}.{name} must be encodable as UTF-8") from None
    return value


def lease_key_of(lease: object, argument: str = "token_or_lease") -> str | None:
    """The ``key`` of ``lease``, or ``None`` when it has no ``key`` attribute.

    Raises [`ValidationError`][fencedlease.ValidationError] naming ``argument`` when ``key`` is
    there but not a non-empty ``str`` encodable as UTF-8.
    """
    return _text_attribute(lease, "key", argument)


def lease_scope_of(lease: object, argument: str = "token_or_lease") -> str | None:
    """The ``fencing_scope`` of ``lease``, or ``None`` when it has none (an object without the
    attribute, or a lease of a backend that names no scope).

    Raises [`ValidationError`][fencedlease.ValidationError] naming ``argument`` when
    ``fencing_scope`` is there but not a non-empty ``str`` encodable as UTF-8.
    """
    return _text_attribute(lease, "fencing_scope", argument)


def coerce_access(token_or_lease: object, *, argument: str = "token_or_lease") -> FencingAccess:
    """Turn "a token or a lease" into a `FencingAccess`, or raise
    [`ValidationError`][fencedlease.ValidationError].

    Accepts an ``int`` (not ``bool``), `MIN_FENCING_TOKEN` (1) ≤ n ≤
    `MAX_FENCING_TOKEN` (2**63 - 1), which has no fingerprint and no key, or any object with
    ``fencing_token`` (such an int) and ``owner_token`` (a non-empty ``str``), whose fingerprint is
    [`owner_fingerprint`][fencedlease.owner_fingerprint] of its owner token and whose counter is its
    ``fencing_scope`` (`lease_scope_of`), or its ``key`` (`lease_key_of`) when it has no scope.
    A lease restored without a fencing token (``fencing_token is None``) cannot be fenced and is
    refused here. ``None`` itself is refused with a hint: it is most often the ``lease`` of an
    acquire result that was not acquired. ``argument`` names the argument in the error.
    """
    if token_or_lease is None:
        # The usual way to get here: ``acquire(...).lease`` of a result that was not acquired.
        raise ValidationError(
            argument,
            f"{argument} is None, not a lease or a fencing token: did the acquire fail? "
            "acquire() returns a result whose .lease is None when it was not acquired; "
            "check result.acquired before using result.lease",
        )
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
