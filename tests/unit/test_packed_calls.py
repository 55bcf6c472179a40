"""An acquire and a release packed by the library (`PackedCalls`): the same bytes redis-py would
send for the same arguments, whether the connection is asked for the primary's id or not, with
and without a refused caller's queueing, in either fencing mode; a key's names framed once."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from fencedlease._redis.keys import KEYS_CACHED, lease_keys
from fencedlease._redis.scripts import ACQUIRE, RELEASE
from fencedlease._redis.wire import PackedCalls, forget_primary

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
