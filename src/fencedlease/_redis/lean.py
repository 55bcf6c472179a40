"""The lean path of the hot commands: an acquire, a release, a renewal batch and a hand-off claim
(each packed by `fencedlease._redis.wire`) written on a pooled connection's socket by the library
and their reply parsed by ``hiredis``'s C reader, while redis-py keeps everything else: the
connection's set-up (connect, ``AUTH``/ACL, TLS, the RESP3 ``HELLO``), its health check, the pool,
Sentinel and Cluster. No I/O here: the sends and reads are each face's
(``fencedlease._async.primitives``' ``send_bytes`` and ``read_bytes``, and the sync ones).

redis-py's own reading of a reply is Python for every line of it (its parser's buffer, a
``readline`` per RESP line, the socket's timeout set and reset around each read); hiredis's
reader, fed the bytes the socket gave, parses in C and answers the same values
(its ``replyError`` is redis-py's own ``parse_error``, so an error reply is redis-py's exception
class, ``NoScriptError`` for ``NOSCRIPT``) and decodes as the client's encoder does.

``hiredis`` is an optional extra (``pip install "fencedlease[hiredis]"``): without it, or with
`LeanSwitch.enabled` off, the same packed bytes go out through redis-py's ``send_packed_command``
and come back through its ``read_response``: the same results, errors and timeouts (the tests run
both paths). A read or a send that fails is raised as redis-py's exception of the same kind and
text (`fencedlease._redis.errors.socket_failed`), so ``map_exceptions`` maps it alike.
"""

from __future__ import annotations

import importlib.util
from typing import Any, Final

from .errors import PROTOCOL_ERROR, socket_failed

# the optional extra; imported by name so that its absence types the same
hiredis: Any = (
    importlib.import_module("hiredis") if importlib.util.find_spec("hiredis") is not None else None
)

__all__ = [
    "LEAN",
    "NOT_YET",
    "READ_SIZE",
    "LeanSwitch",
    "fed",
    "leftover",
    "reader_for",
    "reply_of",
]

READ_SIZE: Final = 65_536
"""The most bytes one read of the socket asks for (redis-py's own ``socket_read_size``)."""


class _NotYet:
    """The type of `NOT_YET`."""

    __slots__ = ()


NOT_YET: Final = _NotYet()
"""`reply_of`'s answer while the reply's bytes are not all in (hiredis's ``notEnoughData``: its
default, ``False``, is also a RESP3 reply)."""


class LeanSwitch:
    """Whether the hot commands take the lean path where it applies: on when ``hiredis`` is
    importable. The tests turn it off to run redis-py's path on the same server."""

    __slots__ = ("enabled",)

    def __init__(self) -> None:
        self.enabled = hiredis is not None

    def available(self) -> bool:
        """Whether ``hiredis`` is importable (the switch can be on)."""
        return hiredis is not None


LEAN: Final = LeanSwitch()


def reader_for(conn: Any) -> Any | None:
    """The hiredis reader of ``conn`` (a redis-py connection, either face), made as redis-py makes
    its own (redis-py's error classes, the client's decoding) once per socket the connection
    opens and kept on it (about 6 us to make, more than a reply's parse); None where the lean
    path does not apply: the switch off, or ``conn`` not made yet (its socket, or the asyncio
    face's stream, is None: redis-py's send makes it), or a connection class whose send or read
    is not a plain connection's (Sentinel's handles ``READONLY``; an override instruments them
    or injects faults: each keeps its own).

    A kept reader holds nothing between two replies: a reply not read to its end (an error, a
    timeout, a cancellation) drops the connection, and its next socket gets a new reader; bytes
    past a reply close it (`leftover`)."""
    if not LEAN.enabled or hiredis is None or not _redis_pys_own_io(type(conn)):
        return None
    stream = getattr(conn, "_sock", None) or getattr(conn, "_reader", None)
    if stream is None:
        return None
    kept = getattr(conn, _KEPT, None)
    if kept is not None and kept[0] is stream:
        return kept[1]
    encoder = conn.encoder
    decoding = (
        {"encoding": encoder.encoding, "errors": encoder.encoding_errors}
        if encoder.decode_responses
        else {}
    )
    reader = hiredis.Reader(
        protocolError=PROTOCOL_ERROR,
        replyError=type(conn._parser).parse_error,
        notEnoughData=NOT_YET,
        **decoding,
    )
    setattr(conn, _KEPT, (stream, reader))
    return reader


_IO_METHODS: Final = ("send_packed_command", "read_response")
_OWN_IO: dict[type, bool] = {}


_PLAIN_IO: Final = frozenset({"redis.connection", "redis.asyncio.connection"})
"""The modules of redis-py's plain connections: a send or read defined elsewhere does more (a
Sentinel-managed connection turns ``READONLY`` into a dropped connection and a new primary)."""


def _redis_pys_own_io(kind: type) -> bool:
    """Whether connection class ``kind`` sends and reads with redis-py's plain connections'
    methods (its ``Connection``, ``SSLConnection``, ``UnixDomainSocketConnection``, or a
    subclass that overrides neither), asked once per class."""
    own = _OWN_IO.get(kind)
    if own is None:
        own = _OWN_IO[kind] = all(
            getattr(getattr(kind, name, None), "__module__", "") in _PLAIN_IO
            for name in _IO_METHODS
        )
    return own


_KEPT: Final = "fencedlease_reader"
"""The attribute of a connection that keeps its reader, with the socket (or stream) it reads."""


def reply_of(reader: Any) -> Any:
    """The reply ``reader`` holds, or `NOT_YET` while it lacks bytes; an error reply is raised as
    redis-py raises it (its ``ResponseError`` class for the error's code).

    Raises:
        ResponseError: the reply is an error (``NoScriptError`` for ``NOSCRIPT``...).
        ConnectionError: the bytes are not RESP (redis-py's ``InvalidResponse`` is one).
    """
    reply = reader.gets()
    if isinstance(reply, Exception):  # made by replyError: redis-py's class for the error
        raise reply
    return reply


def fed(reader: Any, data: bytes) -> Any:
    """`reply_of` ``reader`` once ``data`` (the bytes one read of the socket gave) is fed to it.

    Raises:
        ConnectionError: ``data`` is empty: the server closed the connection (redis-py's text).
        ResponseError: as `reply_of`.
    """
    if not data:
        raise socket_failed(None, None)
    reader.feed(data)
    return reply_of(reader)


def leftover(reader: Any) -> bool:
    """Whether ``reader`` holds bytes past the reply it gave: a connection out of step (nothing
    else was asked on it), never used again."""
    return bool(reader.has_data())
