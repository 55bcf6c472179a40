"""Commands packed by the library: a renewal batch's ``EVALSHA renew_many.lua`` as one RESP frame,
each lease's part built once and kept on its `RenewalItem`, and an acquire's and a release's, each
key's names framed once (`PackedCalls`). No I/O: the send is `fencedlease._async.wire.run_packed`
(and the sync module generated from it). Replies are read by redis-py.

redis-py packs a command one argument at a time (an encode call and a join per argument), three
per lease: for a batch of 500 leases most of the renewer's CPU. A lease's key, owner token and TTL
do not change from one renewal to the next, so their RESP framing is made once: a batch is a
header and the leases' parts joined, and goes out on one of the client's connections as it is
(``send_packed_command``). The script answers ``'joined'``: its replies as one string, which
redis-py reads at once, where an array costs it a few calls per lease.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from fencedlease._core.schedule import RenewalItem

from .keys import KEYS_CACHED, lease_key, lease_keys
from .scripts import Script

__all__ = [
    "PackedCalls",
    "PackedRenewals",
    "PrimaryReads",
    "forget_primary",
    "frame",
    "primary_ask",
    "primary_reply",
]

_Wire = tuple[object, bytes, bytes]
"""A lease's packed part: whose it is (the `PackedRenewals` that made it), the key's frame, and
the owner token's and TTL's frames."""


class PackedRenewals:
    """Packs ``renew_many.lua`` batches for one backend: keys under ``prefix``, strings encoded as
    the client encodes them (``encode``: its encoder's ``encode``)."""

    def __init__(self, script: Script, prefix: str, encode: Callable[[str], bytes]) -> None:
        self._sha = script.sha.encode()
        self._prefix = prefix
        self._encode = encode

    def _wire(self, item: tuple[str, str, int]) -> _Wire:
        key, owner_token, ttl_ms = item
        encode = self._encode
        name = encode(lease_key(self._prefix, key))
        owner = encode(owner_token)
        ttl = str(ttl_ms).encode()
        return (
            self,
            b"$%d\r\n%b\r\n" % (len(name), name),
            b"$%d\r\n%b\r\n$%d\r\n%b\r\n" % (len(owner), owner, len(ttl), ttl),
        )

    def command(self, items: Sequence[tuple[str, str, int]]) -> bytes:
        """``EVALSHA <sha> <n> <key>... <owner_token> <ttl_ms> ... joined`` for ``items`` as one
        RESP frame (bytes), the command redis-py would send for these arguments: the replies
        come back ``'joined'``, one string (see ``renew_many.lua``). An item's part is kept on
        it when it is a `RenewalItem` and used again while it comes back to this packer."""
        count = len(items)
        digits = b"%d" % count
        keys = [
            b"*%d\r\n$7\r\nEVALSHA\r\n$40\r\n%b\r\n$%d\r\n%b\r\n"
            % (4 + 3 * count, self._sha, len(digits), digits)
        ]
        args = []
        for item in items:
            wire: Any = getattr(item, "wire", None)
            if wire is None or wire[0] is not self:
                wire = self._wire(item)
                if isinstance(item, RenewalItem):
                    item.wire = wire
            keys.append(wire[1])
            args.append(wire[2])
        keys += args
        keys.append(b"$6\r\njoined\r\n")
        return b"".join(keys)


def frame(value: bytes) -> bytes:
    """``value`` as one RESP bulk string: ``$<length>\\r\\n<value>\\r\\n``."""
    return b"$%d\r\n%b\r\n" % (len(value), value)


_ASKS = {"primary": frame(b"primary"), "known": frame(b"known"), "": frame(b"")}


class PackedCalls:
    """``acquire.lua``'s and ``release.lua``'s commands for one backend, packed by the library
    (keys under ``prefix``, arguments encoded by ``encode``: the client's encoder's ``encode``).

    redis-py packs a command one argument at a time (about 17 us for an acquire's eleven); a
    key's four names (`fencedlease._redis.keys.lease_keys`) are framed once here and kept for
    the last `KEYS_CACHED` keys, so an acquire or a release frames only its owner token and
    its few other arguments. The bytes are the command redis-py would send for the same
    arguments (a unit test compares them)."""

    def __init__(
        self, acquire: Script, release: Script, prefix: str, encode: Callable[[Any], bytes]
    ) -> None:
        self._prefix, self._encode = prefix, encode
        self._acquire = frame(b"EVALSHA") + frame(acquire.sha.encode()) + frame(b"4")
        self._release = frame(b"EVALSHA") + frame(release.sha.encode()) + frame(b"4")
        self._keys: dict[str, bytes] = {}

    def _key_frames(self, key: str) -> bytes:
        frames = self._keys.get(key)
        if frames is None:
            if len(self._keys) >= KEYS_CACHED:
                self._keys.clear()  # an arbitrary set of keys: built again as they come back
            encode = self._encode
            frames = b"".join(frame(encode(name)) for name in lease_keys(self._prefix, key))
            self._keys[key] = frames
        return frames

    def acquire(
        self,
        key: str,
        owner_token: str,
        ttl_ms: int,
        fencing: str,
        queue: Sequence[object],
        *,
        trusted: bool = False,
    ) -> PrimaryReads:
        """``EVALSHA acquire.lua 4 <keys> <owner_token> <ttl_ms> <fencing> [<ask> <queue>...]``,
        the ask for the primary's id left to the connection it goes out on (`PrimaryReads`;
        ``trusted``: a grant takes the id the connection read, see there)."""
        encode = self._encode
        head = b"%b%b%b%b%b" % (
            self._acquire,
            self._key_frames(key),
            frame(encode(owner_token)),
            frame(b"%d" % ttl_ms),
            frame(encode(fencing)),
        )
        queued = [frame(encode(arg)) for arg in queue]
        return PrimaryReads(head, 10, ttl_ms, queued, trusted=trusted)

    def release(self, key: str, owner_token: str, mode_args: Sequence[str]) -> bytes:
        """``EVALSHA release.lua 4 <keys> <owner_token> [<mode>]`` as one RESP frame."""
        encode = self._encode
        tail = b"".join(frame(encode(arg)) for arg in mode_args)
        return b"*%d\r\n%b%b%b%b" % (
            8 + len(mode_args),
            self._release,
            self._key_frames(key),
            frame(encode(owner_token)),
            tail,
        )


_PRIMARY = "fencedlease_primary"


def primary_ask(conn: Any, trusted: bool) -> str:
    """``acquire.lua``'s ARGV[4] on ``conn``: ``'primary'`` when ``conn`` does not know the
    primary's id (its connect callback, `forget_primary`, registered then, so a reconnect
    forgets it again), else ``'known'`` when ``trusted`` (no INFO at all), else ``''`` (INFO on
    a grant only). See `PrimaryReads`."""
    if getattr(conn, _PRIMARY, None) is None:
        # kept once per callback by redis-py; its asyncio connections named it with an
        # underscore in older redis-py (5.0.1)
        register = getattr(conn, "register_connect_callback", None)
        (register or conn._register_connect_callback)(forget_primary)
        return "primary"
    return "known" if trusted else ""


def primary_reply(conn: Any, reply: Any, asked: bool, ttl_ms: int) -> Any:
    """``acquire.lua``'s ``reply`` on ``conn`` with the primary's id in its place: one the reply
    carries is kept on ``conn``; an empty one, when the script was not asked for it
    (``asked`` false), is the id ``conn`` knows. A token alone (a string: the common grant
    sent ``'known'``) is the grant ``[1, token, ttl_ms, id]``. Another shape is left to the
    decoding."""
    if isinstance(reply, (bytes, str)) and not asked:
        return [1, reply, ttl_ms, getattr(conn, _PRIMARY, "")]
    if not isinstance(reply, list) or len(reply) != 4:
        return reply
    if reply[3]:  # read by the script; '' when INFO is refused (an ACL): asked again
        setattr(conn, _PRIMARY, reply[3])
        return reply
    if asked:
        return reply
    return [*reply[:3], getattr(conn, _PRIMARY, "")]


class PrimaryReads:
    """``acquire.lua`` on a pooled connection, the primary's replication id read once per
    connection, and again on every grant unless ``trusted``.

    The script runs ``INFO replication`` (the dearest part of an acquire, some 2 to 6 us of
    Redis's time) when asked (``'primary'``): on a connection's first acquire, again after the
    connection was made anew (redis-py's connect callback) or answered an error (say
    ``READONLY``). Otherwise a refusal is answered with the id the connection knows, so a
    contended key's polls cost no INFO; and a grant (where a counter rolled back by a failover
    repeats a token) reads it anew (``''``), since a server demoted and promoted again by
    ``REPLICAOF`` or ``FAILOVER`` keeps its clients' connections open and answers no error on
    them (Redis 6.2 and 7.0). ``trusted`` (``'known'``): a grant too takes the id the connection
    read, for a store where no connection outlives a promotion of its server: Redis Sentinel
    promotes a replica with ``MULTI``, ``REPLICAOF NO ONE``, ``CONFIG REWRITE``, ``CLIENT KILL
    TYPE normal``, ``CLIENT KILL TYPE pubsub``, ``EXEC``, so every connection open on it is
    closed in the same step, and the next one reads the new id (that assumes the sentinels make
    every promotion, a ``REPLICAOF NO ONE`` by hand closes nothing, and that their user may run
    ``CLIENT``: a refused ``CLIENT KILL`` leaves the connections open). The id is kept on the
    connection (``fencedlease_primary``), updated by every reply that carries one. ``head``:
    the RESP frames of the command's first ``count`` parts (`PackedCalls.acquire`); ``ttl_ms``:
    the one the command asks for (a common grant sent ``'known'`` answers its token alone);
    ``queue``:
    the frames of the script's arguments after the ask (a refused caller's queueing), which
    then follow ``''`` where it is not asked."""

    def __init__(
        self,
        head: bytes,
        count: int,
        ttl_ms: int,
        queue: Sequence[bytes] = (),
        *,
        trusted: bool = False,
    ) -> None:
        self._head, self._count, self._ttl_ms = head, count, ttl_ms
        self._queue = b"".join(queue)
        self._queued = len(queue)
        self._trusted = trusted
        self._asked = False

    def command(self, conn: Any) -> bytes:
        """The command for ``conn``: asking for the primary's id unless ``conn`` knows it."""
        ask = primary_ask(conn, self._trusted)
        self._asked = ask == "primary"
        if not ask and not self._queued:
            return b"*%d\r\n%b" % (self._count, self._head)
        count = self._count + 1 + self._queued
        return b"*%d\r\n%b%b%b" % (count, self._head, _ASKS[ask], self._queue)

    def reply(self, conn: Any, reply: Any) -> Any:
        """``reply`` with the primary's id in its place (learnt from it, or the one ``conn``
        knows); another shape is left to the decoding."""
        return primary_reply(conn, reply, self._asked, self._ttl_ms)


class _Forget:
    """redis-py holds connect callbacks by weak reference to a bound method: this one's lives
    as long as the module."""

    def primary(self, conn: Any) -> None:
        """``conn`` (re)connected or answered an error: the primary it talks to is not known any
        more (its next acquire asks)."""
        conn.__dict__.pop(_PRIMARY, None)


forget_primary = _Forget().primary


def always() -> bool:
    """`run_packed`'s default ``again``: a broken connection's command is sent once more."""
    return True
