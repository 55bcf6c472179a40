"""Decoding the Lua scripts' replies, and text as Redis sends it, with no I/O.

Replies are decoded the same way whether the client was built with ``decode_responses=True``
(``str``) or ``False`` (``bytes``); every malformed reply is a
[`BackendError`][fencedlease.BackendError] naming the operation and the key, never quoting a value
that may hold an owner token. Tokens and counters are decoded exactly (never through a float),
1..2**63-1.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final

from fencedlease._core.errors import BackendError
from fencedlease._core.protocol import (
    MAX_FENCING_TOKEN,
    AcquireReply,
    InspectReply,
    owner_fingerprint,
    stored_metadata,
)

__all__ = [
    "decode_acquire",
    "decode_inspect",
    "decode_release",
    "decode_renew",
    "decode_renew_many",
    "parse_grant",
    "parse_token",
    "reply_text",
    "split_value",
    "text",
]

GRANTED: Final = 1
ALREADY_OURS: Final = 2
HELD: Final = 0

_DIGITS: Final = frozenset("0123456789")
_HEX: Final = frozenset("0123456789abcdef")
_MAX_PX: Final = 2**31 - 1


def text(value: object) -> str:
    """A reply element (or a pub/sub message field) as text: ``bytes`` decoded as UTF-8 (bytes
    that are not UTF-8 kept by ``surrogateescape``, so nothing raises), ``str`` as it is, anything
    else by ``str()``."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "surrogateescape")
    return value if isinstance(value, str) else str(value)


def reply_text(value: object, what: str) -> str:
    """`text` of a reply element that must be a string (``bytes`` or ``str``).

    Raises:
        BackendError: any other type; ``what`` names the operation.
    """
    if isinstance(value, (bytes, str)):
        return text(value)
    raise BackendError(f"{what}: unexpected reply element of type {type(value).__name__}")


def _int(value: object, what: str) -> int:
    """An integer reply, or a decimal string of one (with an optional ``-``), exactly."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    string = reply_text(value, what)
    digits = string[1:] if string.startswith("-") else string
    if not digits or not set(digits) <= _DIGITS or len(digits) > 20:
        raise BackendError(f"{what}: expected an integer, got {string[:40]!r}")
    return int(string)


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
        string = reply_text(value, what)
        if (
            not string
            or not set(string) <= _DIGITS
            or len(string) > 19
            or (len(string) > 1 and string[0] == "0")
        ):
            raise BackendError(
                f"{what}: not a fencing token (a decimal integer {minimum}..2**63-1)"
            )
        number = int(string)
    if not minimum <= number <= MAX_FENCING_TOKEN:
        raise BackendError(f"{what}: {number} is outside {minimum}..2**63-1")
    return number


def _shape(reply: object, length: int, what: str, longer: int = 0) -> Sequence[object]:
    """``reply`` as an array of ``length`` elements, padded with None from one of ``longer``."""
    if isinstance(reply, (list, tuple)) and len(reply) == longer:
        return reply
    if not isinstance(reply, (list, tuple)) or len(reply) != length:
        raise BackendError(f"{what}: unexpected reply (a script of another version?)")
    return [*reply, *([None] * (longer - length))] if longer else reply


def _replid(value: object, what: str) -> str | None:
    """A primary's replication id (40 hex characters), None when missing or empty."""
    if value is None or value is False:
        return None
    string = reply_text(value, what)
    if not string:
        return None
    if len(string) != 40 or not set(string) <= _HEX:
        raise BackendError(f"{what}: not a replication id")
    return string


def decode_acquire(reply: object, key: str = "?") -> AcquireReply:
    """Decode the acquire script's ``[status, token, ttl, primary]`` reply (a script without the
    primary's replication id answers the first three); the token (a decimal string) exactly,
    1..2**63-1.

    The reply as the script sends it (two integers and the token as ASCII digits) is read on a
    fast path that builds no message; anything else goes through the checks that name it.

    Raises:
        BackendError: for a reply of any other shape or value (a script of another version).
    """
    if type(reply) is list and len(reply) == 3:
        status, token, ttl = reply
        if type(status) is int and type(ttl) is int:
            if status == HELD:
                return AcquireReply(False, 0, ttl)
            if status in (GRANTED, ALREADY_OURS):
                number = _plain_token(token)
                if number:
                    return AcquireReply(True, number, ttl, retried=status == ALREADY_OURS)
    return _decode_acquire(reply, key)


def _plain_token(value: object) -> int:
    """``value`` as a fencing token when it is one written plainly (ASCII digits, no leading zero,
    1..2**63-1), else 0: the caller then takes the checked path."""
    if type(value) is bytes:
        value = value.decode("ascii", "replace")
    if type(value) is str and value.isascii() and value.isdigit() and value[0] != "0":
        number = int(value)  # isdigit: not empty
        if number <= MAX_FENCING_TOKEN:
            return number
    return 0


def parse_grant(data: str) -> tuple[str, AcquireReply | None]:
    """A hand-off message ``"<sha1>[:<fencing token>:<px>[:<primary>]]"`` (``release.lua``):
    the waiter's name, and the grant it carries as an `AcquireReply`
    (``acquired``, ``retried``: issued by the release; ``fencing_token`` 1..2**63-1, written
    plainly; ``ttl_ms``: the PX, 1..2**31-1 milliseconds; ``primary_id``: the primary's
    replication id, None when the message has none or an empty one), or None when it carries
    none or a malformed one (the waiter is woken all the same, and claims). No I/O."""
    name, _, rest = data.partition(":")
    fields = rest.split(":") if rest else []
    if len(fields) not in (2, 3):
        return name, None
    token, px = _plain_token(fields[0]), _plain_token(fields[1])
    primary = fields[2] if len(fields) == 3 else ""
    if not token or not 0 < px <= _MAX_PX:
        return name, None
    if primary and (len(primary) != 40 or not set(primary) <= _HEX):
        return name, None
    return name, AcquireReply(True, token, px, retried=True, primary_id=primary or None)


def _decode_acquire(reply: object, key: str) -> AcquireReply:
    """`decode_acquire` with every check, naming what is wrong."""
    what = f"acquire {key!r}"
    status_value, token_value, ttl_value, primary_value = _shape(reply, 3, what, longer=4)
    status, ttl = _int(status_value, what), _int(ttl_value, what)
    primary = _replid(primary_value, what)
    if status == GRANTED:
        return AcquireReply(True, parse_token(token_value, what), ttl, primary_id=primary)
    if status == ALREADY_OURS:
        token = parse_token(token_value, what)
        return AcquireReply(True, token, ttl, retried=True, primary_id=primary)
    if status == HELD:
        return AcquireReply(False, 0, ttl, primary_id=primary)
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


_TOKEN_BYTES: Final = re.compile(rb"[1-9][0-9]{0,18}")
"""A fencing token as ``renew_many.lua`` returns it (bulk string, no sign, no leading zero)."""
_ALL_TOKENS: Final = re.compile(rb"[1-9][0-9]{0,18}(?: [1-9][0-9]{0,18})*")
"""A ``'joined'`` reply of ``renew_many.lua`` that holds only tokens."""


def decode_renew_many(
    items: Sequence[tuple[str, str, int]], reply: object
) -> list[int | BaseException]:
    """Decode ``renew_many.lua``'s array, one entry per item: the token (renewed; exactly,
    1..2**63-1), 0 (lost), or a [`BackendError`][fencedlease.BackendError] for an item Redis could
    not renew (its TTL was refused, its key holds another type or a malformed value, or the reply
    entry is not a token); the other items are unaffected.

    ``reply`` may also be the ``'joined'`` form, the entries as one string separated by spaces.
    One pass over the reply: a token as bytes and 0 (the usual entries) are decoded inline; any
    other entry goes through the full checks (`parse_token`).

    Raises:
        BackendError: a reply of another shape.
    """
    if isinstance(reply, str):
        reply = reply.encode()
    if isinstance(reply, bytes):
        if _ALL_TOKENS.fullmatch(reply):  # the usual batch: every lease renewed
            tokens = list(map(int, reply.split(b" ")))
            if len(tokens) == len(items) and max(tokens) <= MAX_FENCING_TOKEN:
                return list(tokens)
        reply = reply.split(b" ") if reply else []
    if not isinstance(reply, (list, tuple)) or len(reply) != len(items):
        raise BackendError(f"renew {len(items)} leases: unexpected reply for {len(items)} leases")
    results: list[int | BaseException] = []
    append = results.append
    token = _TOKEN_BYTES.fullmatch
    for index, value in enumerate(reply):
        if value.__class__ is bytes and token(value):
            number = int(value)
            if number <= MAX_FENCING_TOKEN:
                append(number)
                continue
        elif (value.__class__ is int and value == 0) or value == b"0":
            append(0)
            continue
        append(_renew_entry(items[index], value))
    return results


def _renew_entry(item: tuple[str, str, int], value: object) -> int | BaseException:
    """One entry of ``renew_many.lua``'s array, any shape (see `decode_renew_many`)."""
    key, _, ttl_ms = item
    what = f"renew {key!r}"
    if _is(value, -1):
        return BackendError(f"{what}: ttl_ms {ttl_ms!r} refused by Redis")
    if _is(value, -2):
        return BackendError(
            f"{what}: WRONGTYPE, the lease key holds another type (or cannot be read)"
        )
    if _is(value, -3):
        return BackendError(f"{what}: the lease key holds a malformed value")
    if _is(value, 0):
        return 0
    try:
        return parse_token(value, what)
    except BackendError as exc:
        return exc


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
    string = reply_text(value, what)
    token, sep, owner = string.partition(":")
    if not sep or not owner:
        raise BackendError(f'{what}: a malformed lease value (not "<fencing_token>:<owner>")')
    return parse_token(token, what), owner


def decode_inspect(reply: object, key: str = "?") -> InspectReply | None:
    """Decode the inspect script's ``[value, pttl, counter, primary, previous, grant_token,
    metadata]`` reply (or the first three, or five); None when no lease is held. The metadata is
    the lease's only when ``grant_token`` is its token (else an older grant's: none).

    Raises:
        BackendError: a malformed lease value or counter (the message names the key), or a reply
            of another shape.
    """
    what = f"inspect {key!r}"
    if isinstance(reply, (list, tuple)) and len(reply) == 5:
        reply = [*reply, None, None]
    value, pttl, counter, primary, previous, grant_token, metadata = _shape(
        reply, 3, what, longer=7
    )
    if value is None or value is False:
        return None
    token, owner = split_value(value, f"{what}: the lease key")
    ours = metadata not in (None, False) and grant_token not in (None, False)
    if ours and parse_token(grant_token, f"{what}: the grant details' token") != token:
        ours = False
    return InspectReply(
        fencing_token=token,
        ttl_ms=_int(pttl, what),
        owner_fingerprint=owner_fingerprint(owner),
        last_issued_token=None
        if counter is None or counter is False
        else parse_token(counter, f"{what}: the fencing counter", minimum=0),
        primary_id=_replid(primary, what),
        promoted_from=_replid(previous, what),
        metadata=stored_metadata(metadata, what) if ours else {},
    )
