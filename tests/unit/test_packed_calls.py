"""An acquire and a release packed by the library (`PackedCalls`): the same bytes redis-py would
send for the same arguments, whether the connection is asked for the primary's id or not, with
and without a refused caller's queueing, in either fencing mode; a key's names framed once."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis

from fencedlease._async.wire import run_packed as run_packed_aio
from fencedlease._redis.errors import ConnectionLost
from fencedlease._redis.keys import KEYS_CACHED, lease_keys
from fencedlease._redis.scripts import ACQUIRE, RELEASE
from fencedlease._redis.wire import PackedCalls, forget_primary
from fencedlease._sync.wire import run_packed

CLIENTS = [redis.Redis(), redis.Redis(decode_responses=True), redis.Redis(encoding="latin-1")]
IDS = ["bytes", "str", "latin-1"]
KEYS = ["a", "naïve {x}%", ""]
QUEUE = ("10000", "250", "0123456789abcdef", "direct")


def redis_py(client: redis.Redis, *args: object) -> bytes:
    connection: Any = client.connection_pool.make_connection()  # redis-py: no annotations
    return b"".join(connection.pack_command(*args))


class Conn:
    """A pooled connection as `PrimaryReads` sees it: the primary's id noted on it, or not."""

    def register_connect_callback(self, callback: object) -> None:
        assert callback is forget_primary


@pytest.mark.parametrize("client", CLIENTS, ids=IDS)
@pytest.mark.parametrize("key", KEYS)
@pytest.mark.parametrize("queue", [(), QUEUE], ids=["alone", "queued"])
def test_a_packed_acquire_is_redis_pys_command(
    client: redis.Redis, key: str, queue: tuple[str, ...]
) -> None:
    packer = PackedCalls(ACQUIRE, RELEASE, "pre", client.get_encoder().encode)
    head = ("EVALSHA", ACQUIRE.sha, 4, *lease_keys("pre", key), "öwner", 2_147_483_647, "clock")
    asked = Conn()
    assert packer.acquire(key, "öwner", 2_147_483_647, "clock", queue).command(asked) == (
        redis_py(client, *head, "primary", *queue)
    )
    knows = Conn()
    knows.fencedlease_primary = "abc"  # type: ignore[attr-defined]
    tail = ("", *queue) if queue else ()
    assert packer.acquire(key, "öwner", 2_147_483_647, "clock", queue).command(knows) == (
        redis_py(client, *head, *tail)
    )


@pytest.mark.parametrize("client", CLIENTS, ids=IDS)
@pytest.mark.parametrize("queue", [(), QUEUE], ids=["alone", "queued"])
def test_a_trusted_acquire_says_known_on_a_connection_that_knows_the_primary(
    client: redis.Redis, queue: tuple[str, ...]
) -> None:
    """Over Sentinel a connection that knows the primary's id sends 'known' (no INFO, even on a
    grant) and answers the script's empty id, or a grant's lone token, with its own; one that
    does not asks for it."""
    packer = PackedCalls(ACQUIRE, RELEASE, "pre", client.get_encoder().encode)
    head = ("EVALSHA", ACQUIRE.sha, 4, *lease_keys("pre", "k"), "owner", 5_000, "counter")
    asked, knows = Conn(), Conn()
    knows.fencedlease_primary = "abc"  # type: ignore[attr-defined]
    reads = packer.acquire("k", "owner", 5_000, "counter", queue, trusted=True)
    assert reads.command(asked) == redis_py(client, *head, "primary", *queue)
    assert reads.reply(asked, [1, "1", 5_000, "def"]) == [1, "1", 5_000, "def"]
    assert asked.fencedlease_primary == "def"  # type: ignore[attr-defined]
    reads = packer.acquire("k", "owner", 5_000, "counter", queue, trusted=True)
    assert reads.command(knows) == redis_py(client, *head, "known", *queue)
    assert reads.reply(knows, [1, "2", 5_000, ""]) == [1, "2", 5_000, "abc"]
    assert reads.reply(knows, b"3") == [1, b"3", 5_000, "abc"]  # the common grant's token
    assert reads.reply(knows, [0, 0, 40, ""]) == [0, 0, 40, "abc"]
    forget_primary(knows)
    assert reads.command(knows) == redis_py(client, *head, "primary", *queue)


@pytest.mark.parametrize("client", CLIENTS, ids=IDS)
@pytest.mark.parametrize("key", KEYS)
@pytest.mark.parametrize("modes", [(), ("clock",)], ids=["counter", "clock"])
def test_a_packed_release_is_redis_pys_command(
    client: redis.Redis, key: str, modes: tuple[str, ...]
) -> None:
    packer = PackedCalls(ACQUIRE, RELEASE, "pre", client.get_encoder().encode)
    want = redis_py(client, "EVALSHA", RELEASE.sha, 4, *lease_keys("pre", key), "öwner", *modes)
    assert packer.release(key, "öwner", modes) == want
    assert packer.release(key, "öwner", modes) == want  # the key's names kept, used again


def test_a_keys_names_are_framed_once_and_the_cache_stays_bounded() -> None:
    encoded: list[object] = []
    encoder: Any = redis.Redis().get_encoder()  # redis-py: no annotations

    def encode(value: object) -> bytes:
        encoded.append(value)
        return bytes(encoder.encode(value))

    packer = PackedCalls(ACQUIRE, RELEASE, "pre", encode)
    packer.release("k", "o1", ())
    packer.release("k", "o2", ())
    assert encoded == [*lease_keys("pre", "k"), "o1", "o2"]
    for i in range(KEYS_CACHED + 1):
        packer.release(f"k{i}", "o", ())
    # "k" and k0..k1022 fill it; k1023 finds it full, clears it and is kept, then k1024
    assert set(packer._keys) == {f"k{KEYS_CACHED - 1}", f"k{KEYS_CACHED}"}


class BrokenPool:
    """A pool whose every connection breaks before its reply, counting the sends."""

    def __init__(self) -> None:
        self.sends = 0
        self.released = 0

    def get_connection(self) -> BrokenPool:
        return self

    def send_packed_command(self, packed: list[bytes]) -> None:
        self.sends += 1

    def read_response(self) -> object:
        raise redis.ConnectionError("Connection closed by server.")

    def disconnect(self, *args: object) -> None:  # redis-py's takes (and ignores) any
        pass

    def release(self, conn: object) -> None:
        self.released += 1


@pytest.mark.parametrize(("open_", "sends"), [(True, 2), (False, 1)], ids=["open", "closed"])
def test_a_broken_connections_command_is_sent_once_more_only_while_the_manager_is_open(
    open_: bool, sends: int
) -> None:
    """A command whose connection breaks goes out once more on a new connection, unless the
    manager was closed meanwhile: its caller then closes the client, and a connection made after
    that would be left open (redis-py 8.2 reports a pool closed under a read as that break)."""
    pool = BrokenPool()
    client: Any = type("Client", (), {"connection_pool": pool})()
    with pytest.raises(ConnectionLost) as lost:  # redis-py's, mapped (fencedlease._redis.errors)
        run_packed(client, b"*1\r\n$4\r\nPING\r\n", lambda: open_)
    assert type(lost.value.cause) is redis.ConnectionError
    assert (pool.sends, pool.released) == (sends, sends)


@pytest.mark.parametrize(("open_", "sends"), [(True, 2), (False, 1)], ids=["open", "closed"])
def test_the_asyncio_wire_sends_again_only_while_the_manager_is_open(
    open_: bool, sends: int
) -> None:
    """The same rule on the asyncio face."""

    class AioPool:
        sends = released = 0

        async def get_connection(self) -> AioPool:
            return self

        async def send_packed_command(self, packed: list[bytes]) -> None:
            self.sends += 1

        async def read_response(self) -> object:
            raise redis.ConnectionError("Connection closed by server.")

        async def disconnect(self, nowait: bool = False) -> None:
            pass

        async def release(self, conn: object) -> None:
            self.released += 1

    pool = AioPool()
    client: Any = type("Client", (), {"connection_pool": pool})()
    with pytest.raises(ConnectionLost) as lost:
        asyncio.run(run_packed_aio(client, b"*1\r\n$4\r\nPING\r\n", lambda: open_))
    assert type(lost.value.cause) is redis.ConnectionError
    assert (pool.sends, pool.released) == (sends, sends)
