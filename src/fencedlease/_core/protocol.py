"""What every lease store speaks, with no I/O: owner tokens, fencing tokens, and the replies.

Shared by every backend (Redis, memory, SQLite) and both faces. The Redis side (key layout,
scripts, reply decoding, errors) is in `fencedlease._redis`.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from typing import Final

import attrs

from fencedlease._core.errors import BackendError

__all__ = [
    "MAX_FENCING_TOKEN",
    "PLAIN_GRANT",
    "AcquireReply",
    "GrantExtras",
    "InspectReply",
    "metadata_json",
    "new_owner_token",
    "owner_fingerprint",
    "stored_metadata",
]

MAX_FENCING_TOKEN: Final = 2**63 - 1
"""The largest fencing token: Redis counters are signed 64-bit integers."""


def new_owner_token() -> str:
    """128 random bits from the OS's CSPRNG (`os.urandom`, what `secrets.token_hex` reads, without
    its extra calls), as 32 hex characters."""
    return os.urandom(16).hex()


def owner_fingerprint(owner_token: str) -> str:
    """A non-secret name for an owner token: the first 16 hex characters of its SHA-256.

    Tells leases apart in logs, ``inspect`` and fenced resources without revealing the token.
    """
    # surrogateescape: a stored owner that is not UTF-8 (read as bytes) still gets a name.
    return hashlib.sha256(owner_token.encode("utf-8", "surrogateescape")).hexdigest()[:16]


@attrs.frozen
class AcquireReply:
    """What the acquire step answered.

    ``acquired`` is true when the caller holds the lease (granted now, or already ours after a
    retried call); ``fencing_token`` is then its token, else 0. ``ttl_ms`` is the lease's TTL when
    acquired, else the current holder's remaining TTL (-1: no TTL, -2: gone meanwhile).
    ``retried`` tells a grant recognised as an earlier call's (no new token was issued).
    ``refused``: a grant the store made and took back (e.g. too few replicas acknowledged it:
    a [`ReplicationError`][fencedlease.ReplicationError]); ``acquired`` is then false, a waiting
    acquire keeps waiting and one that fails fast raises it. ``primary_id``: the replication id
    of the Redis primary that answered, when the store names one (a new one after a failover).
    """

    acquired: bool
    fencing_token: int
    ttl_ms: int
    retried: bool = False
    # Not compared: what the store says about itself, not about the lease.
    refused: BaseException | None = attrs.field(default=None, eq=False)
    primary_id: str | None = attrs.field(default=None, eq=False)


@attrs.frozen
class GrantExtras:
    """What a grant stores beside the lease, both checked by `fencedlease._core.validate`:
    ``metadata`` (who holds it: str to str, returned by ``inspect``, stored and deleted with the
    lease) and ``lock_delay_ms`` (milliseconds past the lease's deadline during which a lease that
    ended without a release keeps its key from being granted; 0: none). `PLAIN_GRANT`: neither,
    the common grant, which a backend is given as None."""

    metadata: Mapping[str, str] = attrs.field(factory=dict)
    lock_delay_ms: int = 0

    @property
    def plain(self) -> bool:
        """Whether the grant stores nothing beside the lease."""
        return not self.metadata and not self.lock_delay_ms


PLAIN_GRANT: Final = GrantExtras()
"""A grant with no metadata and no lock-delay."""


@attrs.frozen
class InspectReply:
    """A lease as stored: its token, remaining TTL in ms, owner fingerprint and the counter; for
    Redis, the replication id of the primary that answered and of the one it was promoted from
    (None: never promoted, or a store without replication); the grant's ``metadata`` (empty:
    none)."""

    fencing_token: int
    ttl_ms: int
    owner_fingerprint: str
    last_issued_token: int | None
    metadata: Mapping[str, str] = attrs.field(factory=dict)
    # Not compared: what the store says about itself, not about the lease.
    primary_id: str | None = attrs.field(default=None, eq=False)
    promoted_from: str | None = attrs.field(default=None, eq=False)


def metadata_json(metadata: Mapping[str, str]) -> str:
    """``metadata`` as the stores keep it: a compact JSON object, names sorted."""
    return json.dumps(dict(metadata), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def stored_metadata(value: object, what: str) -> dict[str, str]:
    """Metadata read back from a store (`metadata_json`'s text, str or bytes).

    Raises:
        BackendError: not a JSON object of str to str; ``what`` names the read (the text is not
            quoted).
    """
    try:
        text = value.decode("utf-8") if isinstance(value, bytes) else value
        decoded = json.loads(text) if isinstance(text, str) else None
    except ValueError:  # UnicodeDecodeError and json's errors alike
        decoded = None
    if not isinstance(decoded, dict) or not all(
        isinstance(name, str) and isinstance(text, str) for name, text in decoded.items()
    ):
        raise BackendError(f"{what}: the stored metadata is not a JSON object of str to str")
    return decoded
