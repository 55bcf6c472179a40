"""Before a timed send, each face makes its client's next connection first, unless the pool's next
connection is already made: the asyncio connection says so by ``is_connected``, the sync one by
``is_connected`` on newer redis-py and by its socket (``_sock``) on redis-py 5.0.1."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis
import redis.asyncio

from fencedlease._async.scripts import connected as async_connected
from fencedlease._redis.pool import next_is_made
from fencedlease._sync.scripts import connected

FACES = ["sync", "asyncio"]


def _made(face: str, connection: Any) -> None:
    """Mark ``connection`` made as redis-py does when it connects (no I/O)."""
    if face == "sync":
        connection._sock = object()
    else:
        connection._reader = connection._writer = object()


class _Pool(redis.ConnectionPool):
    """A sync pool that records the connections taken and given back (no server)."""

    def __init__(self) -> None:
        super().__init__()
        self.steps: list[str] = []

    def get_connection(self, command_name: Any = None, *keys: Any, **options: Any) -> Any:
        self.steps.append("take")
        return self.make_connection()  # type: ignore[no-untyped-call, unused-ignore]

    def release(self, connection: Any) -> None:
        self.steps.append("give back")


class _AsyncPool(redis.asyncio.ConnectionPool):
    """An asyncio pool that records the connections taken and given back (no server)."""

    def __init__(self) -> None:
        super().__init__()
        self.steps: list[str] = []

    async def get_connection(self, command_name: Any = None, *keys: Any, **options: Any) -> Any:
        self.steps.append("take")
        return self.make_connection()  # type: ignore[no-untyped-call, unused-ignore]

    async def release(self, connection: Any) -> None:
        self.steps.append("give back")


def _connect(face: str, made: bool) -> list[str]:
    """What `connected` does to a client whose pool holds one idle connection, made or not."""
    if face == "sync":
        pool = _Pool()
        pool._available_connections.append(pool.make_connection())
        if made:
            _made(face, pool._available_connections[-1])
        connected(redis.Redis(connection_pool=pool))
        return pool.steps
    apool = _AsyncPool()
    apool._available_connections.append(apool.make_connection())  # type: ignore[no-untyped-call, unused-ignore]
    if made:
        _made(face, apool._available_connections[-1])
    asyncio.run(async_connected(redis.asyncio.Redis(connection_pool=apool)))
    return apool.steps


@pytest.mark.parametrize("face", FACES)
def test_a_made_next_connection_is_left_as_it_is(face: str) -> None:
    """A pool whose next connection is made is not asked for one."""
    assert _connect(face, made=True) == []


@pytest.mark.parametrize("face", FACES)
def test_an_unmade_next_connection_is_made_and_given_back(face: str) -> None:
    """A pool whose next connection is not made is asked for one, which is given back at once."""
    assert _connect(face, made=False) == ["take", "give back"]


@pytest.mark.parametrize("face", FACES)
def test_next_is_made_reads_each_face_connection(face: str) -> None:
    """The pool's last idle connection decides, read as its face's redis-py marks it made."""
    pool: Any = redis.ConnectionPool() if face == "sync" else redis.asyncio.ConnectionPool()
    assert next_is_made(pool) is False  # nothing idle
    first, last = pool.make_connection(), pool.make_connection()
    pool._available_connections.extend([first, last])
    _made(face, first)
    assert next_is_made(pool) is False  # the pool hands out the last one
    _made(face, last)
    assert next_is_made(pool) is True


def test_next_is_made_reads_the_socket_without_is_connected() -> None:
    """A sync connection of redis-py 5.0.1 (no ``is_connected``) is made once it has a socket."""

    class OldConnection:
        _sock: object | None = None

    pool: Any = redis.ConnectionPool()
    old = OldConnection()
    pool._available_connections.append(old)
    assert next_is_made(pool) is False
    old._sock = object()
    assert next_is_made(pool) is True


def test_next_is_made_is_false_for_a_pool_of_another_shape() -> None:
    """A pool with no idle list of redis-py's takes the general path."""
    assert next_is_made(object()) is False
