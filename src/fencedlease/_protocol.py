"""The Redis protocol of a lease, with no I/O: key names, scripts and reply decoding.

Shared by the sync and async faces, so there is exactly one definition of each. Replies are
decoded the same way whether the client was built with ``decode_responses=True`` (``str``) or
``False`` (``bytes``).

Key layout. Every Redis key and channel of one name starts with the same *base*
``<prefix>:{<escaped name>}``:

==============================  ==============================================
``<base>``                      the lease: ``"<fencing_token>:<owner_token>"``, with a TTL
``<base>:fence``                the lease's fencing counter (no TTL, never deleted)
``<base>:waiters``              the hand-off queue (sorted set)
``<base>:waiters:meta``         the queued waiters' details (hash)
``<base>:handoff``              the hand-off pub/sub channel
``<base>:resource``             a ``RedisFencedResource``'s data
``<base>:resource:fence``       a ``RedisFencedResource``'s fence state (hash)
==============================  ==============================================

The name is escaped so that the base is injective: ``%``, ``{`` and ``}`` become ``%25``, ``%7B``
and ``%7D``, and a prefix may not hold a brace (``ValidationError``). So the base holds exactly one
``{`` and one ``}``: the text between them is the Redis Cluster hash tag, which every key of one
name shares (one slot), two different ``(prefix, name)`` pairs never give one base, and the
suffixes above never make one key of two roles.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Sequence
from importlib import resources
from typing import Final

import attrs

from ._acl import register_script
from ._errors import BackendError

__all__ = [
    "ACQUIRE",
    "INSPECT",
    "MAX_FENCING_TOKEN",
    "RELEASE",
    "RENEW",
    "RENEW_MANY",
    "SCRIPT_REFUSAL",
    "AcquireReply",
    "InspectReply",
    "Script",
    "decode_acquire",
    "decode_inspect",
    "decode_release",
    "decode_renew",
    "decode_renew_many",
    "escape_name",
    "fence_key",
    "handoff_channel",
    "key_base",
    "lease_key",
    "lease_keys",
    "new_owner_token",
    "owner_fingerprint",
    "parse_token",
    "renew_many_args",
    "resource_keys",
    "split_value",
    "waiters_key",
    "waiters_meta_key",
]

GRANTED: Final = 1
ALREADY_OURS: Final = 2
HELD: Final = 0


_ESCAPES: Final = str.maketrans({"%": "%25", "{": "%7B", "}": "%7D"})

MAX_FENCING_TOKEN: Final = 2**63 - 1
"""The largest fencing token: Redis counters are signed 64-bit integers."""


def escape_name(name: str) -> str:
    """``name`` with ``%``, ``{`` and ``}`` percent-encoded, so it cannot end or open a hash tag."""
    return name.translate(_ESCAPES)


def key_base(prefix: str, name: str) -> str:
    """``<prefix>:{<escaped name>}``: the start of every key of ``name`` (see the module doc).

    ``prefix`` must hold no brace (checked by :func:`fencedlease._validate.check_prefix`)."""
    return f"{prefix}:{{{name.translate(_ESCAPES)}}}"


def lease_key(prefix: str, key: str) -> str:
    """The Redis key holding the lease on ``key``: ``<base>``."""
    return key_base(prefix, key)


def fence_key(prefix: str, key: str) -> str:
    """The Redis key holding ``key``'s fencing counter: ``<base>:fence``."""
    return key_base(prefix, key) + ":fence"


def waiters_key(prefix: str, key: str) -> str:
    """The sorted set of ``key``'s queued waiters: ``<base>:waiters``."""
    return key_base(prefix, key) + ":waiters"


def waiters_meta_key(prefix: str, key: str) -> str:
    """The hash of the queued waiters' deadlines: ``<base>:waiters:meta``."""
    return key_base(prefix, key) + ":waiters:meta"


def handoff_channel(prefix: str, key: str) -> str:
    """The pub/sub channel a release wakes ``key``'s waiters on: ``<base>:handoff``."""
    return key_base(prefix, key) + ":handoff"


def resource_keys(prefix: str, name: str) -> tuple[str, str]:
    """A ``RedisFencedResource``'s (fence state key, data key): ``<base>:resource:fence`` and
    ``<base>:resource``; never a lease's key, whatever the two prefixes."""
    base = key_base(prefix, name)
    return base + ":resource:fence", base + ":resource"


def lease_keys(prefix: str, key: str) -> tuple[str, str, str, str]:
    """KEYS of ``acquire.lua`` and ``release.lua``: the lease key, the counter, and the two
    waiter-queue keys (an acquire takes its owner out of the queue, a release may hand the lease
    to the oldest waiter; every key a script touches is declared)."""
    base = key_base(prefix, key)
    return (base, base + ":fence", base + ":waiters", base + ":waiters:meta")


def new_owner_token() -> str:
    """128 random bits from :mod:`secrets`, as 32 hex characters."""
    return secrets.token_hex(16)


def owner_fingerprint(owner_token: str) -> str:
    """A non-secret name for an owner token: the first 16 hex characters of its SHA-256.

    Tells leases apart in logs, ``inspect`` and fenced resources without revealing the token.
    """
    # surrogateescape: a stored owner that is not UTF-8 (read as bytes) still gets a name.
    return hashlib.sha256(owner_token.encode("utf-8", "surrogateescape")).hexdigest()[:16]


@attrs.frozen
class Script:
    """A Lua script shipped as ``fencedlease/scripts/<name>.lua``, with its SHA-1 for EVALSHA."""

    name: str
    source: str
    sha: str

    def __attrs_post_init__(self) -> None:
        register_script(self.name, self.source, self.sha)  # an ACL refusal inside names its command

    @classmethod
    def load(cls, name: str) -> Script:
        source = resources.files("fencedlease").joinpath(f"scripts/{name}.lua").read_text("utf-8")
        return cls(name, source, hashlib.sha1(source.encode()).hexdigest())  # noqa: S324 (Redis's id)


ACQUIRE: Final = Script.load("acquire")
RENEW: Final = Script.load("renew")
RENEW_MANY: Final = Script.load("renew_many")
RELEASE: Final = Script.load("release")
INSPECT: Final = Script.load("inspect")


@attrs.frozen
class AcquireReply:
    """What the acquire script answered.

    ``acquired`` is true when the caller holds the lease (granted now, or already ours after a
    retried call); ``fencing_token`` is then its token, else 0. ``ttl_ms`` is the lease's TTL when
    acquired, else the current holder's remaining TTL (-1: no TTL, -2: gone meanwhile).
    ``retried`` tells a grant recognised as an earlier call's (no new token was issued).
    """

    acquired: bool
    fencing_token: int
    ttl_ms: int
    retried: bool = False


@attrs.frozen
class InspectReply:
    """A lease as stored: its token, remaining TTL in ms, owner fingerprint and the counter."""

    fencing_token: int
    ttl_ms: int
    owner_fingerprint: str
    last_issued_token: int | None


SCRIPT_REFUSAL: Final = "fencedlease "
"""How every error a lease script returns itself begins (after Redis's ``ERR``): such a script
checked its keys and refused before its first write, so it wrote nothing."""

_DIGITS: Final = frozenset("0123456789")


def _text(value: object, what: str) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "surrogateescape")
    if isinstance(value, str):
        return value
    raise BackendError(f"{what}: unexpected reply element of type {type(value).__name__}")


def _int(value: object, what: str) -> int:
    """An integer reply, or a decimal string of one (with an optional ``-``), exactly."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    text = _text(value, what)
    digits = text[1:] if text.startswith("-") else text
    if not digits or not set(digits) <= _DIGITS or len(digits) > 20:
        raise BackendError(f"{what}: expected an integer, got {text[:40]!r}")
    return int(text)


def _is(value: object, number: int) -> bool:
    """Whether a reply element is the small integer ``number`` (an integer reply, or its text)."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return value == number
    if isinstance(value, bytes):
        return value == str(number).encode()
    return isinstance(value, str) and value == str(number)


def parse_token(value: object, what: str, *, minimum: int = 1) -> int:
    """A fencing token (or counter) as Redis stores it: an integer reply, or a decimal string
    without sign or leading zero, ``minimum``..``MAX_FENCING_TOKEN``, decoded exactly (never
    through a float).

    Raises:
        BackendError: anything else; ``what`` names the key or reply, the value is not quoted
            (a lease value holds an owner token).
    """
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    else:
        text = _text(value, what)
        if (
            not text
            or not set(text) <= _DIGITS
            or len(text) > 19
            or (len(text) > 1 and text[0] == "0")
        ):
            raise BackendError(
                f"{what}: not a fencing token (a decimal integer {minimum}..2**63-1)"
            )
        number = int(text)
    if not minimum <= number <= MAX_FENCING_TOKEN:
        raise BackendError(f"{what}: {number} is outside {minimum}..2**63-1")
    return number


def _shape(reply: object, length: int, what: str) -> Sequence[object]:
    if not isinstance(reply, (list, tuple)) or len(reply) != length:
        raise BackendError(f"{what}: unexpected reply (a script of another version?)")
    return reply


def decode_acquire(reply: object, key: str = "?") -> AcquireReply:
    """Decode the acquire script's ``[status, token, ttl]`` reply; the token (a decimal string)
    exactly, 1..2**63-1.

    Raises:
        BackendError: for a reply of any other shape or value (a script of another version).
    """
    what = f"acquire {key!r}"
    status_value, token_value, ttl_value = _shape(reply, 3, what)
    status, ttl = _int(status_value, what), _int(ttl_value, what)
    if status == GRANTED:
        return AcquireReply(True, parse_token(token_value, what), ttl)
    if status == ALREADY_OURS:
        return AcquireReply(True, parse_token(token_value, what), ttl, retried=True)
    if status == HELD:
        return AcquireReply(False, 0, ttl)
    raise BackendError(f"{what}: unexpected status {status}")


def decode_renew(reply: object, key: str = "?") -> int:
    """Decode the renew script's reply: the fencing token when renewed (exactly, 1..2**63-1), 0
    when the lease is lost.

    Raises:
        BackendError: any other reply.
    """
    what = f"renew {key!r}"
    if _is(reply, 0):
        return 0
    return parse_token(reply, what)


def renew_many_args(
    prefix: str, items: Sequence[tuple[str, str, int]]
) -> tuple[list[str], list[object]]:
    """KEYS and ARGV of ``renew_many.lua`` for ``(key, owner_token, ttl_ms)`` items."""
    keys = [lease_key(prefix, key) for key, _, _ in items]
    args: list[object] = []
    for _, owner_token, ttl_ms in items:
        args.append(owner_token)
        args.append(ttl_ms)
    return keys, args


def decode_renew_many(
    items: Sequence[tuple[str, str, int]], reply: object
) -> list[int | BaseException]:
    """Decode ``renew_many.lua``'s array, one entry per item: the token (renewed; exactly,
    1..2**63-1), 0 (lost), or a :class:`~fencedlease.BackendError` for an item Redis could not
    renew (its TTL was refused, its key holds another type or a malformed value, or the reply
    entry is not a token); the other items are unaffected.

    Raises:
        BackendError: a reply of another shape.
    """
    if not isinstance(reply, (list, tuple)) or len(reply) != len(items):
        raise BackendError(f"renew {len(items)} leases: unexpected reply for {len(items)} leases")
    results: list[int | BaseException] = []
    for (key, _, ttl_ms), value in zip(items, reply, strict=True):
        what = f"renew {key!r}"
        if _is(value, -1):
            results.append(BackendError(f"{what}: ttl_ms {ttl_ms!r} refused by Redis"))
        elif _is(value, -2):
            results.append(
                BackendError(
                    f"{what}: WRONGTYPE, the lease key holds another type (or cannot be read)"
                )
            )
        elif _is(value, -3):
            results.append(BackendError(f"{what}: the lease key holds a malformed value"))
        elif _is(value, 0):
            results.append(0)
        else:
            try:
                results.append(parse_token(value, what))
            except BackendError as exc:
                results.append(exc)
    return results


def decode_release(reply: object, key: str = "?") -> bool:
    """Decode the release script's reply: true when our key was deleted (or handed on).

    Raises:
        BackendError: a reply other than 0 or 1.
    """
    if _is(reply, 1):
        return True
    if _is(reply, 0):
        return False
    raise BackendError(f"release {key!r}: unexpected reply")


def split_value(value: object, what: str = "lease value") -> tuple[int, str]:
    """Split a stored lease value ``"<fencing_token>:<owner_token>"``: the token exactly
    (1..2**63-1), the owner token non-empty.

    Raises:
        BackendError: a malformed value (``what`` names the key; the value is not quoted).
    """
    text = _text(value, what)
    token, sep, owner = text.partition(":")
    if not sep or not owner:
        raise BackendError(f'{what}: a malformed lease value (not "<fencing_token>:<owner>")')
    return parse_token(token, what), owner


def decode_inspect(reply: object, key: str = "?") -> InspectReply | None:
    """Decode the inspect script's ``[value, pttl, counter]`` reply; None when no lease is held.

    Raises:
        BackendError: a malformed lease value or counter (the message names the key), or a reply
            of another shape.
    """
    what = f"inspect {key!r}"
    value, pttl, counter = _shape(reply, 3, what)
    if value is None or value is False:
        return None
    token, owner = split_value(value, f"{what}: the lease key")
    return InspectReply(
        fencing_token=token,
        ttl_ms=_int(pttl, what),
        owner_fingerprint=owner_fingerprint(owner),
        last_issued_token=None
        if counter is None or counter is False
        else parse_token(counter, f"{what}: the fencing counter", minimum=0),
    )
