"""The lean path of the hot commands (the library's own send, hiredis's reader) against redis-py's,
on a real Redis, both faces: the same bytes on the wire and the same results and errors for an
acquire, a refusal, a renewal batch, two releases, a script's error reply and a ``NOSCRIPT``
reload; the same timeout on a paused server, and the timed-out connection never used again."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any, ClassVar

import pytest
import redis
import redis.asyncio

from fencedlease import BackendError, RedisBackend
from fencedlease._async import wire as async_wire
from fencedlease._redis import scripts
from fencedlease._redis.lean import LEAN
from fencedlease._sync import wire as sync_wire
from fencedlease.aio import AsyncRedisBackend
from fencedlease_lab.servers.redis import RedisServer

pytestmark = pytest.mark.live

PREFIX = "lw"


class _Recording:
    """A socket or stream writer that notes every byte written through it."""

    def __init__(self, inner: Any, written: list[bytes]) -> None:
        self._inner, self._written = inner, written

    def sendall(self, data: bytes) -> None:
        self._written.append(bytes(data))
        self._inner.sendall(data)

    def write(self, data: bytes) -> None:
        self._written.append(bytes(data))
        self._inner.write(data)

    def writelines(self, chunks: list[bytes]) -> None:
        for chunk in chunks:
            self.write(chunk)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):  # not made yet (a copy, a collector): no recursion
            raise AttributeError(name)
        return getattr(self._inner, name)


class SyncRecorder(redis.Connection):
    """A connection whose socket notes what is written (``written``); its send and read stay
    redis-py's (a class that overrides them keeps them: no lean path)."""

    written: ClassVar[list[bytes]] = []

    def _connect(self) -> Any:
        return _Recording(super()._connect(), self.written)  # type: ignore[no-untyped-call, unused-ignore]


class AsyncRecorder(redis.asyncio.Connection):
    """`SyncRecorder` for the asyncio face: its stream writer notes what is written."""

    written: ClassVar[list[bytes]] = []

    async def _connect(self) -> None:
        await super()._connect()  # type: ignore[no-untyped-call, unused-ignore]
        self._writer = _Recording(self._writer, self.written)  # type: ignore[assignment]


def _counting_lean_reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The number of replies the lean path reads, counted from here on (both faces)."""
    count = [0]
    for module in (sync_wire, async_wire):
        read = module.read_lean

        def counted(*args: Any, _read: Any = read) -> Any:
            count[0] += 1
            return _read(*args)

        monkeypatch.setattr(module, "read_lean", counted)
    return count


HOT_REPLIES = 7
"""Replies the scenario's hot commands get, all read by the lean path: two acquires (the first
answered ``NOSCRIPT``: a new script cache, whose fallback loads the other scripts too), a batch,
two releases, an acquire answered an error, and the ``NOSCRIPT`` of the acquire after
``SCRIPT FLUSH``."""


def _outcome(value: Any) -> Any:
    """What a result says, without the holder's remaining TTL (it runs down meanwhile)."""
    if isinstance(value, BaseException):
        return (type(value).__name__, str(value))
    if hasattr(value, "acquired"):
        return (value.acquired, value.fencing_token, value.retried, value.primary_id)
    return value


def _scenario(call: Callable[[str, tuple[Any, ...]], Any], admin: redis.Redis) -> list[Any]:
    """The hot commands through ``call(method, args)`` (a backend's method, run to its end)."""
    admin.set(f"{PREFIX}:{{bad}}:fence", "not a number")
    steps: list[tuple[str, tuple[Any, ...]]] = [
        ("acquire", ("k", "o1", 10_000)),
        ("acquire", ("k", "o2", 10_000)),
        ("renew_many", ([("k", "o1", 10_000), ("gone", "o9", 10_000)],)),
        ("release", ("k", "o2")),
        ("release", ("k", "o1")),
        ("acquire", ("bad", "o3", 10_000)),
    ]
    out = []
    for method, args in steps:
        try:
            result = call(method, args)
        except BackendError as exc:
            result = exc
        out.append([_outcome(r) for r in result] if isinstance(result, list) else _outcome(result))
    admin.script_flush()
    out.append(_outcome(call("acquire", ("reloaded", "o4", 10_000))))
    return out


def _run_face(face: str, url: str, lean_reads: list[int]) -> tuple[list[Any], list[bytes], int]:
    """The scenario on ``face`` with a new client: outcomes, bytes written, the lean path's
    reads (``lean_reads``, counted by `_counting_lean_reads`)."""
    lean_reads[0] = 0
    admin = redis.Redis.from_url(url)
    admin.flushdb()
    admin.script_flush()  # both runs start with the scripts to load
    if face == "sync":
        SyncRecorder.written.clear()
        pool = redis.ConnectionPool.from_url(url, connection_class=SyncRecorder)
        client = redis.Redis(connection_pool=pool)
        backend = RedisBackend(client, PREFIX)
        out = _scenario(lambda method, args: getattr(backend, method)(*args), admin)
        backend.close()
        client.close()
        written = list(SyncRecorder.written)
    else:
        AsyncRecorder.written.clear()
        loop = asyncio.new_event_loop()
        apool = redis.asyncio.ConnectionPool.from_url(url, connection_class=AsyncRecorder)
        aclient = redis.asyncio.Redis(connection_pool=apool)
        abackend = AsyncRedisBackend(aclient, PREFIX)
        try:
            out = _scenario(
                lambda method, args: loop.run_until_complete(getattr(abackend, method)(*args)),
                admin,
            )
        finally:
            loop.run_until_complete(abackend.close())
            loop.run_until_complete(aclient.aclose())
            loop.close()
        written = list(AsyncRecorder.written)
    admin.close()
    # the scripts' calls; a connection's handshake and the background INFO memory go out on
    # other connections at moments of their own
    return out, [chunk for chunk in written if b"EVAL" in chunk[:20]], lean_reads[0]


@pytest.mark.parametrize("face", ["sync", "asyncio"])
def test_both_paths_write_the_same_bytes_and_answer_the_same(
    face: str, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lean path writes byte for byte what redis-py's writes and answers the same results
    and errors, reading every hot command's reply itself."""
    if not LEAN.available():
        pytest.skip("hiredis (the optional extra) is not installed: redis-py's path only")
    # the NOSCRIPT fallback's no-op release is by a new owner token: the same one in both runs
    monkeypatch.setattr(scripts, "new_owner_token", lambda: "nobody")
    reads = _counting_lean_reads(monkeypatch)
    monkeypatch.setattr(LEAN, "enabled", True)
    lean_out, lean_bytes, lean_reads = _run_face(face, redis_url, reads)
    monkeypatch.setattr(LEAN, "enabled", False)
    plain_out, plain_bytes, plain_reads = _run_face(face, redis_url, reads)
    assert lean_out == plain_out
    assert lean_bytes == plain_bytes
    assert (lean_reads, plain_reads) == (HOT_REPLIES, 0)
    granted = lean_out[0]
    assert granted[:3] == (True, 1, False)
    assert lean_out[1][:2] == (False, 0)
    assert lean_out[2] == [1, 0]
    assert lean_out[3:5] == [False, True]
    assert lean_out[5][0] == "BackendError"
    assert "not an integer" in lean_out[5][1]
    assert lean_out[6][:3] == (True, 1, False)


@pytest.mark.parametrize("face", ["sync", "asyncio"])
def test_a_paused_server_times_out_alike_and_the_connection_is_dropped(
    face: str, wire_path: str, own_redis: RedisServer
) -> None:
    """socket_timeout=0.2 s on a paused Redis: the acquire raises the same timed-out
    BackendError on both paths, and the next one, once Redis answers again, goes out on a new
    connection (the late reply is never read as its answer)."""
    if face == "sync":
        client = redis.Redis.from_url(own_redis.url, socket_timeout=0.2)
        backend = RedisBackend(client, PREFIX)

        def call(method: str, *args: Any) -> Any:
            return getattr(backend, method)(*args)

        def conns() -> list[Any]:
            pool: Any = client.connection_pool
            return list(pool._available_connections)

        def stream(conn: Any) -> Any:
            return conn._sock

    else:
        loop = asyncio.new_event_loop()
        aclient = redis.asyncio.Redis.from_url(own_redis.url, socket_timeout=0.2)
        abackend = AsyncRedisBackend(aclient, PREFIX)

        def call(method: str, *args: Any) -> Any:
            return loop.run_until_complete(getattr(abackend, method)(*args))

        def conns() -> list[Any]:
            return list(aclient.connection_pool._available_connections)

        def stream(conn: Any) -> Any:
            return conn._reader

    try:
        assert call("acquire", "k", "o1", 10_000).fencing_token == 1
        (first,) = conns()
        own_redis.pause()
        try:
            started = time.monotonic()
            with pytest.raises(BackendError) as failed:
                call("release", "k", "o1")
            took = time.monotonic() - started
        finally:
            own_redis.resume()
        assert failed.value.timed_out is True
        assert str(failed.value).startswith("release 'k': TimeoutError: Timeout reading from ")
        assert took < 3.0  # the socket's timeout, with slack for two busy cores
        assert stream(first) is None  # dropped: the release's reply was not read
        # the late reply (the release's integer) is not this acquire's answer
        assert _outcome(call("acquire", "k2", "o5", 10_000))[:3] == (True, 1, False)
        (second,) = conns()
        assert second is first and stream(first) is not None  # made anew
    finally:
        if face == "sync":
            backend.close()
            client.close()
        else:
            loop.run_until_complete(abackend.close())
            loop.run_until_complete(aclient.aclose())
            loop.close()
