"""RedisFencedResource on a real Redis: the check and the access in one Lua call."""

from __future__ import annotations

import socket
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from hypothesis import HealthCheck, given, settings

from fencedlease import BackendError, StaleTokenError, ValidationError
from fencedlease.redis_fencing import RedisFencedResource

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))
from test_fencing_model import Access, accesses, attempt, lease, model_accepts, present

pytestmark = pytest.mark.live


@pytest.fixture
def client(redis_url: str, decode_responses: bool) -> Iterator[redis.Redis]:
    """A client in the decode_responses mode of the test's parameter."""
    c = redis.Redis.from_url(redis_url, decode_responses=decode_responses)
    yield c
    c.close()


@pytest.fixture
def name() -> str:
    return f"test:{uuid.uuid4().hex}"


def as_reply(client: redis.Redis, text: str) -> str | bytes:
    """``text`` as this client returns it."""
    return text if client.get_encoder().decode_responses else text.encode()


# --- values come back as the client returns them -------------------------------------------------


def test_fenced_set_and_get(client: redis.Redis, name: str) -> None:
    """A fenced SET stores the value; a fenced GET returns it (str or bytes, as the client does)."""
    res = RedisFencedResource(client, name)
    assert res.get(1) is None
    res.set("shipped", 1)
    assert res.get(lease(1)) == as_reply(client, "shipped")
    assert client.get(res.data_key) == as_reply(client, "shipped")
    assert res.last_token == 1


def test_fenced_hset_and_hgetall(client: redis.Redis, name: str) -> None:
    """A fenced HSET counts new fields; a fenced HGETALL returns the hash as a dict."""
    res = RedisFencedResource(client, name)
    assert res.hgetall(1) == {}
    assert res.hset({"status": "paid", "amount": 12}, 2) == 2
    assert res.hset({"status": "shipped"}, 2) == 0
    assert res.hgetall(3) == {
        as_reply(client, "status"): as_reply(client, "shipped"),
        as_reply(client, "amount"): as_reply(client, "12"),
    }
    assert res.last_token == 3


# --- the cases of issue 3 ------------------------------------------------------------------------


def test_older_token_refused_and_nothing_written(client: redis.Redis, name: str) -> None:
    """34 then 33: StaleTokenError with last_token 34, and the value is not changed."""
    res = RedisFencedResource(client, name)
    res.set("by-34", 34)
    with pytest.raises(StaleTokenError) as info:
        res.set("by-33", 33)
    assert (info.value.resource, info.value.token, info.value.last_token) == (name, 33, 34)
    with pytest.raises(StaleTokenError):
        res.get(33)
    assert client.get(res.data_key) == as_reply(client, "by-34")


def test_same_lease_twice_and_strict(client: redis.Redis, name: str) -> None:
    """The same lease with 34 twice is accepted; strict refuses the second."""
    res = RedisFencedResource(client, name)
    res.set("a", lease(34))
    res.set("b", lease(34))
    strict = RedisFencedResource(client, name, strict=True)
    with pytest.raises(StaleTokenError, match="fences strictly") as info:
        strict.set("c", lease(34))
    assert info.value.last_token == 34
    assert client.get(res.data_key) == as_reply(client, "b")


def test_two_leases_with_the_same_token(client: redis.Redis, name: str) -> None:
    """A second lease carrying 34 is refused (a duplicate grant); the first keeps working."""
    res = RedisFencedResource(client, name)
    res.hset({"v": 1}, lease(34, owner=0))
    with pytest.raises(StaleTokenError, match="different lease") as info:
        res.hset({"v": 2}, lease(34, owner=1))
    assert info.value.last_token == 34
    assert res.hset({"v": 3}, lease(34, owner=0)) == 0
    assert res.accept(34) == 34  # a bare int is an unknown lease
    assert client.hget(res.data_key, "v") == as_reply(client, "3")


# --- the lost update -----------------------------------------------------------------------------


def test_lost_update_with_write_only_fencing(client: redis.Redis, name: str) -> None:
    """A plain read by the new holder lets the stale holder's accepted write be overwritten."""
    res = RedisFencedResource(client, name)
    res.set(10, 33)
    plain = client.get(res.data_key)  # the new holder (34) reads without fencing
    assert plain is not None
    balance = int(plain)
    res.set(15, 33)  # the stale holder adds 5: accepted
    res.set(balance + 1, 34)
    assert client.get(res.data_key) == as_reply(client, "11")  # the +5 is lost


def test_fenced_read_prevents_the_lost_update(client: redis.Redis, name: str) -> None:
    """A fenced GET moves the fence, so the stale holder's write is refused, not lost."""
    res = RedisFencedResource(client, name)
    res.set(10, 33)
    balance = int(res.get(34))
    with pytest.raises(StaleTokenError) as info:
        res.set(15, 33)
    assert info.value.last_token == 34
    res.set(balance + 1, 34)
    assert client.get(res.data_key) == as_reply(client, "11")


# --- failures ------------------------------------------------------------------------------------


def test_noscript_after_script_flush_reloads(client: redis.Redis, name: str) -> None:
    """After SCRIPT FLUSH the script is loaded again and the access goes through."""
    res = RedisFencedResource(client, name)
    res.set("a", 1)
    client.script_flush()
    res.set("b", 2)
    assert res.get(3) == as_reply(client, "b")
    assert res.last_token == 3


def test_wrong_type_is_a_backend_error_and_moves_no_fence(client: redis.Redis, name: str) -> None:
    """HSET on a string key: BackendError caused by Redis's ResponseError; the fence stays."""
    res = RedisFencedResource(client, name)
    res.set("a string", 5)
    with pytest.raises(BackendError) as info:
        res.hset({"f": 1}, 6)
    assert isinstance(info.value.__cause__, redis.ResponseError)
    assert "WRONGTYPE" in str(info.value.__cause__)
    assert res.last_token == 5


def test_unreachable_redis_is_a_backend_error() -> None:
    """No server on the port: BackendError caused by redis's ConnectionError."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, not listening: connections are refused
        client = redis.Redis(port=port, socket_connect_timeout=2)
        res = RedisFencedResource(client, "nowhere")
        with pytest.raises(BackendError) as info:
            res.set("x", 1)
        assert isinstance(info.value.__cause__, redis.ConnectionError)
        with pytest.raises(BackendError):
            _ = res.last_token


def test_bad_arguments_send_nothing(client: redis.Redis, name: str) -> None:
    """A bool token, an empty mapping, a bad value: ValidationError, and no key is created."""
    res = RedisFencedResource(client, name)
    with pytest.raises(ValidationError) as info:
        res.set("x", True)
    assert info.value.argument == "token_or_lease"
    with pytest.raises(ValidationError) as info:
        res.hset({}, 1)
    assert info.value.argument == "mapping"
    with pytest.raises(ValidationError) as info:
        res.set(None, 1)  # type: ignore[arg-type]
    assert info.value.argument == "value"
    assert client.exists(res.data_key, res.fence_key) == 0
    with pytest.raises(ValidationError):
        RedisFencedResource(client, "")


def test_keys_share_a_hash_slot(client: redis.Redis) -> None:
    """Data and fence keys differ only after the closing brace (one Redis Cluster slot), and
    neither is a lease's key or counter (``app:{order:42}``, ``app:{order:42}:fence``)."""
    res = RedisFencedResource(client, "order:42", prefix="app")
    assert (res.data_key, res.fence_key) == (
        "app:{order:42}:resource",
        "app:{order:42}:resource:fence",
    )


# --- concurrency and the model -------------------------------------------------------------------

WRITERS = 4
ROUNDS = 100


def test_concurrent_writers_interleaved_tokens(redis_url: str, name: str) -> None:
    """Four clients race each round (one barrier per round): the round's largest token always
    wins, every refusal names a larger accepted token, and the value ends at the last winner's."""
    barrier = threading.Barrier(WRITERS)
    accepted: list[list[int]] = [[] for _ in range(WRITERS)]
    refused: list[list[tuple[int, int | None]]] = [[] for _ in range(WRITERS)]
    errors: list[BaseException] = []

    def writer(index: int) -> None:
        client = redis.Redis.from_url(redis_url)
        res = RedisFencedResource(client, name)
        try:
            for n in range(ROUNDS):
                barrier.wait(30)
                token = n * WRITERS + index + 1
                got, last = attempt(res.set, token, token)
                if got:
                    accepted[index].append(token)
                else:
                    refused[index].append((token, last))
        except BaseException as exc:
            errors.append(exc)
            barrier.abort()
        finally:
            client.close()

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(WRITERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert errors == []
    assert accepted[WRITERS - 1] == [n * WRITERS + WRITERS for n in range(ROUNDS)]
    every = {t for row in accepted for t in row}
    for row in refused:
        for token, last in row:
            assert last is not None
            assert last > token
            assert last in every
    with redis.Redis.from_url(redis_url) as client:
        res = RedisFencedResource(client, name)
        assert client.get(res.data_key) == str(WRITERS * ROUNDS).encode()
        assert res.last_token == WRITERS * ROUNDS


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(accesses=accesses)
def test_scripts_accept_what_the_model_accepts(redis_url: str, accesses: list[Access]) -> None:
    """For any sequence of accesses (strict per access: two resources on one name), the scripts
    accept what the model accepts."""
    name = f"model:{uuid.uuid4().hex}"
    with redis.Redis.from_url(redis_url) as client:
        lenient = RedisFencedResource(client, name)
        strict = RedisFencedResource(client, name, strict=True)
        history: list[tuple[int, int | None]] = []
        for token, who, is_strict in accesses:
            res = strict if is_strict else lenient
            got, last = attempt(res.accept, present(who, token))
            assert got == model_accepts(history, token, who, is_strict)
            if got:
                history.append((token, who))
            else:
                assert last == max(t for t, _ in history)
        assert lenient.last_token == (max(t for t, _ in history) if history else None)
