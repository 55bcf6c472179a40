"""The lean path's read (sync face) on a fake connection whose socket hands out bytes as a test
says: a reply split over many reads, an error reply as redis-py's class, bytes past the reply,
a closed socket, a timeout, the reader kept per socket, and a connection class with I/O of its
own left to redis-py."""

from __future__ import annotations

from typing import Any

import pytest
import redis
import redis.asyncio
import redis.asyncio.sentinel
import redis.sentinel
from redis._parsers import Encoder, _RESP2Parser

from fencedlease._redis.lean import LEAN, _redis_pys_own_io, reader_for
from fencedlease._sync.wire import exchange

pytest.importorskip("hiredis", reason="hiredis (the optional extra) is not installed")


class FakeSocket:
    """Gives ``chunks`` one per ``recv`` (an exception instance is raised), notes what is sent."""

    def __init__(self, *chunks: bytes | BaseException) -> None:
        self.chunks = list(chunks)
        self.sent: list[bytes] = []

    def sendall(self, data: bytes) -> None:
        self.sent.append(data)

    def recv(self, size: int) -> bytes:
        chunk = self.chunks.pop(0)
        if isinstance(chunk, BaseException):
            raise chunk
        return chunk


class FakeConnection(redis.Connection):
    """A redis-py connection that never connects: its socket is a `FakeSocket`."""

    def __init__(self, sock: FakeSocket, decode: bool = False) -> None:
        self._sock: Any = sock
        self._parser = _RESP2Parser(socket_read_size=65536)  # type: ignore[no-untyped-call, unused-ignore]
        self.encoder = Encoder("utf-8", "strict", decode)  # type: ignore[no-untyped-call, unused-ignore]
        self.health_check_interval = 0
        self.socket_timeout = None
        self.host, self.port = "fake", 1
        self.dropped = 0

    def disconnect(self, *args: Any) -> None:
        self.dropped += 1
        self._sock = None


@pytest.fixture(autouse=True)
def _lean(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(LEAN, "enabled", True)


def test_a_reply_split_over_many_reads_is_put_together() -> None:
    """An array reply that comes a few bytes a read is answered whole, the command sent as is."""
    wire = b"*4\r\n:1\r\n:10000\r\n$0\r\n\r\n$4\r\nabcd\r\n"
    sock = FakeSocket(*(wire[i : i + 3] for i in range(0, len(wire), 3)))
    conn = FakeConnection(sock)
    assert exchange(conn, b"*1\r\n$4\r\nPING\r\n") == [1, 10000, b"", b"abcd"]
    assert sock.sent == [b"*1\r\n$4\r\nPING\r\n"]
    assert conn.dropped == 0


def test_decoded_as_the_clients_encoder_says() -> None:
    """With decode_responses the strings come back as str, as redis-py gives them."""
    conn = FakeConnection(FakeSocket(b"*2\r\n$2\r\nok\r\n:3\r\n"), decode=True)
    assert exchange(conn, b"x") == ["ok", 3]


def test_an_error_reply_is_raised_as_redis_pys_class() -> None:
    """NOSCRIPT is redis-py's NoScriptError (the fallback's cue) with redis-py's text."""
    conn = FakeConnection(FakeSocket(b"-NOSCRIPT No matching script. Please use EVAL.\r\n"))
    with pytest.raises(redis.exceptions.NoScriptError) as refused:
        exchange(conn, b"x")
    assert str(refused.value) == "No matching script. Please use EVAL."
    assert conn.dropped == 0  # a whole reply: the connection is in step


def test_bytes_past_the_reply_drop_the_connection() -> None:
    """A reply followed by bytes nobody asked for is answered, and the connection closed."""
    conn = FakeConnection(FakeSocket(b":1\r\n:2\r\n"))
    assert exchange(conn, b"x") == 1
    assert conn.dropped == 1


@pytest.mark.parametrize(
    ("chunk", "kind", "text"),
    [
        (b"", redis.ConnectionError, "Connection closed by server."),
        (TimeoutError("timed out"), redis.TimeoutError, "Timeout reading from fake:1"),
        (BlockingIOError(11, "again"), redis.TimeoutError, "Timeout reading from fake:1"),
        (
            ConnectionResetError(104, "reset"),
            redis.ConnectionError,
            "Error while reading from fake:1 : (104, 'reset')",
        ),
    ],
)
def test_a_failed_read_is_raised_as_redis_py_raises_it(
    chunk: bytes | BaseException, kind: type[Exception], text: str
) -> None:
    """A closed socket, a timeout, no bytes at all and a reset are redis-py's exceptions."""
    conn = FakeConnection(FakeSocket(b"*2\r\n:1\r\n", chunk))
    with pytest.raises(kind) as failed:
        exchange(conn, b"x")
    assert str(failed.value) == text


def test_the_reader_is_kept_for_the_socket_it_reads() -> None:
    """The same socket gets the same reader; a new socket (a reconnect) a new one."""
    conn = FakeConnection(FakeSocket())
    first = reader_for(conn)
    assert first is not None and reader_for(conn) is first
    conn._sock = FakeSocket()
    assert reader_for(conn) is not first


def test_a_class_with_a_read_of_its_own_keeps_it() -> None:
    """A connection class that overrides read_response is read by it: no lean path."""

    class Instrumented(FakeConnection):
        def read_response(self, *args: Any, **kwargs: Any) -> Any:
            return "its own"

    assert reader_for(Instrumented(FakeSocket())) is None
    assert reader_for(FakeConnection(FakeSocket())) is not None


def test_sentinels_connections_keep_redis_pys_read() -> None:
    """A Sentinel-managed connection (READONLY: a dropped connection, a new primary) takes
    redis-py's path on both faces; the plain, TLS and unix socket ones take the lean path."""
    assert not _redis_pys_own_io(redis.sentinel.SentinelManagedConnection)
    assert not _redis_pys_own_io(redis.asyncio.sentinel.SentinelManagedConnection)
    for kind in (redis.Connection, redis.SSLConnection, redis.UnixDomainSocketConnection):
        assert _redis_pys_own_io(kind)
    for akind in (redis.asyncio.Connection, redis.asyncio.SSLConnection):
        assert _redis_pys_own_io(akind)
