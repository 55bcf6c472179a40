"""RedisFencedResource on a real Redis: the check and the access in one Lua call."""

from __future__ import annotations

import socket
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fencedlease import (
    BackendError,
    LeaseKeyMismatchError,
    LeaseManager,
    StaleTokenError,
    ValidationError,
    redis_keys,
)
from fencedlease._core.fencing import MAX_FENCING_TOKEN
from fencedlease.redis_fencing import RedisFencedResource

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))
from test_fencing_model import (
    OWNERS,
    Access,
    FakeLease,
    accesses,
    attempt,
    check_against_model,
    largest,
    lease,
)
from test_fencing_odd_values import names, odd, only_library_errors, scalars, tokens

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


# --- the fencing cases -------------------------------------------------------------------------


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
    """Data and fence keys are <base>:resource and <base>:resource:fence: they differ only after
    the closing brace (one Redis Cluster slot), and neither is a lease's key or counter."""
    res = RedisFencedResource(client, "order:42", prefix="app")
    assert (res.data_key, res.fence_key) == (
        "app:{order:42}:resource",
        "app:{order:42}:resource:fence",
    )
    assert (
        RedisFencedResource(client, "a{b}%", prefix="app").data_key == "app:{a%7Bb%7D%25}:resource"
    )


def test_resource_named_like_a_lease_under_its_prefix_does_not_collide(
    client: redis.Redis, name: str
) -> None:
    """A RedisFencedResource with the lease manager's prefix and the lease's own key as its name
    (the natural choice) touches neither the lease nor its counter: no WRONGTYPE, the lease still
    renews and releases, and the counter still issues the next token."""
    prefix = f"collide-{uuid.uuid4().hex[:8]}"
    leases = LeaseManager(client, prefix=prefix)
    try:
        held = leases.acquire(name, ttl_ms=30_000)
        assert held.acquired and held.lease is not None
        lease_now = held.lease
        assert lease_now.fencing_token is not None
        res = RedisFencedResource(client, name, prefix=prefix)
        res.set("string data", lease_now)
        res.accept(lease_now)
        assert res.get(lease_now) == as_reply(client, "string data")
        other = RedisFencedResource(client, name + ":hash", prefix=prefix)
        assert other.hset({"f": "v"}, lease_now.fencing_token) == 1
        assert lease_now.renew() is True
        info = leases.inspect(name)
        assert info is not None and info.fencing_token == lease_now.fencing_token
        assert lease_now.release() is True
        again = leases.acquire(name, ttl_ms=30_000)
        assert again.lease is not None
        assert again.lease.fencing_token == lease_now.fencing_token + 1
        assert res.get(again.lease) == as_reply(client, "string data")
        assert res.lease_key == redis_keys(prefix, name).fence == again.lease.fencing_scope
        assert again.lease.release() is True
    finally:
        leases.close()


# --- tokens are exact up to 2**63 - 1 ------------------------------------------------------------


def test_tokens_past_2_53_are_told_apart(client: redis.Redis, name: str) -> None:
    """2**53 + 1 then 2**53: refused (as Lua doubles they are equal); under strict 2**53 + 1 twice
    is refused; the fence holds the exact decimal."""
    res = RedisFencedResource(client, name)
    res.set("by-2**53+1", lease(2**53 + 1))
    with pytest.raises(StaleTokenError) as info:
        res.set("by-2**53", lease(2**53))  # the same lease: only the number refuses it
    assert (info.value.token, info.value.last_token) == (2**53, 2**53 + 1)
    with pytest.raises(StaleTokenError):
        res.get(2**53)
    strict = RedisFencedResource(client, name, strict=True)
    with pytest.raises(StaleTokenError, match="fences strictly"):
        strict.accept(2**53 + 1)
    assert strict.accept(2**53 + 2) == 2**53 + 2
    assert client.get(res.data_key) == as_reply(client, "by-2**53+1")
    assert client.hget(res.fence_key, "token") == as_reply(client, "9007199254740994")
    assert res.last_token == 9_007_199_254_740_994


def test_largest_token(client: redis.Redis, name: str) -> None:
    """2**63 - 1 is accepted and kept exactly; 2**63 - 2 after it is refused; 10 after 9 (a
    longer decimal) is accepted."""
    small = RedisFencedResource(client, name + ":small")
    small.accept(9)
    assert small.accept(10) == 10
    with pytest.raises(StaleTokenError):
        small.accept(9)
    res = RedisFencedResource(client, name)
    res.hset({"v": "max"}, lease(MAX_FENCING_TOKEN))
    with pytest.raises(StaleTokenError) as info:
        res.hset({"v": "late"}, lease(MAX_FENCING_TOKEN - 1))
    assert info.value.last_token == MAX_FENCING_TOKEN
    assert res.hset({"v": "max-again"}, lease(MAX_FENCING_TOKEN)) == 0
    assert res.last_token == 9_223_372_036_854_775_807
    assert client.hget(res.data_key, "v") == as_reply(client, "max-again")


@pytest.mark.parametrize("bad", [0, -1, 2**63, True, 3.5, lease(0), lease(2**63)])
def test_token_out_of_range_sends_nothing(client: redis.Redis, name: str, bad: object) -> None:
    """A token <= 0, > 2**63 - 1, a bool or not an int: ValidationError naming token_or_lease,
    and no key is created."""
    res = RedisFencedResource(client, name)
    for call in (lambda: res.set("x", bad), lambda: res.accept(bad), lambda: res.hgetall(bad)):  # type: ignore[arg-type]
        with pytest.raises(ValidationError) as info:
            call()
        assert info.value.argument == "token_or_lease"
    assert client.exists(res.data_key, res.fence_key) == 0


def test_a_fence_holding_no_canonical_token_is_a_backend_error(
    client: redis.Redis, name: str
) -> None:
    """A fence state whose token is not a canonical decimal ("1e3", "abc") is an error reply,
    never compared; nothing is written."""
    res = RedisFencedResource(client, name)
    for stored in ("1e3", "abc", "0010", "-5"):
        client.hset(res.fence_key, "token", stored)
        with pytest.raises(BackendError) as info:
            res.set("x", 2000)
        assert isinstance(info.value.__cause__, redis.ResponseError)
        assert "canonical" in str(info.value.__cause__)
        assert client.exists(res.data_key) == 0
        assert client.hget(res.fence_key, "token") == as_reply(client, stored)


def test_fence_state_of_the_earlier_shape_records_the_key(client: redis.Redis, name: str) -> None:
    """A fence hash without a key field (written before keys were recorded) keeps its token rule
    and records the key of the next lease."""
    res = RedisFencedResource(client, name)
    client.hset(res.fence_key, mapping={"token": "7", "fp": ""})
    with pytest.raises(StaleTokenError):
        res.accept(lease(6, key="order:42"))
    assert res.lease_key is None
    res.accept(lease(8, key="order:42"))
    assert res.lease_key == "order:42"


# --- one lease key per resource ------------------------------------------------------------------


def test_lease_of_another_key_is_refused(client: redis.Redis, name: str) -> None:
    """The fence records the first lease's key; a lease on another key is refused with
    LeaseKeyMismatchError naming both keys (no owner token), nothing written; a bare int and the
    recorded key go on."""
    res = RedisFencedResource(client, name)
    res.set("by-order:42", lease(34, key="order:42"))
    assert res.lease_key == "order:42"
    with pytest.raises(LeaseKeyMismatchError) as info:
        res.set("by-orders", lease(35, owner=1, key="orders"))
    exc = info.value
    assert (exc.resource, exc.token, exc.last_token) == (name, 35, 34)
    assert (exc.lease_key, exc.presented_key) == ("order:42", "orders")
    assert OWNERS[1] not in str(exc) and OWNERS[0] not in str(exc)
    with pytest.raises(LeaseKeyMismatchError):
        res.get(lease(36, owner=1, key="orders"))
    assert client.get(res.data_key) == as_reply(client, "by-order:42")
    assert res.last_token == 34
    res.set("by-int", 35)
    res.set("by-order:42-again", lease(36, key="order:42"))
    assert client.hget(res.fence_key, "key") == as_reply(client, "order:42")


def test_asyncio_client_is_refused() -> None:
    """redis.asyncio.Redis (or anything not a sync client) is a ValidationError naming client."""
    import redis.asyncio

    aclient = redis.asyncio.Redis()
    for bad in (aclient, object(), None, "redis://localhost"):
        with pytest.raises(ValidationError) as info:
            RedisFencedResource(bad, "r")  # type: ignore[arg-type]
        assert info.value.argument == "client"


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
    """For any sequence of accesses (strict per access: two resources on one name; tokens near 0,
    2**53 and 2**63 - 1; leases of two keys), the scripts accept what the model accepts and refuse
    for its reason."""
    name = f"model:{uuid.uuid4().hex}"
    with redis.Redis.from_url(redis_url) as client:
        lenient = RedisFencedResource(client, name)
        strict = RedisFencedResource(client, name, strict=True)

        def access(token_or_lease: int | FakeLease, is_strict: bool) -> None:
            (strict if is_strict else lenient).accept(token_or_lease)

        history = check_against_model(access, accesses)
        assert lenient.last_token == largest(history)


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    name=names,
    prefix=st.one_of(names, st.just("odd-values")),
    strict=st.one_of(st.booleans(), odd),
    token=tokens,
    value=st.one_of(odd, st.text(max_size=8)),
    mapping=st.one_of(
        odd, st.dictionaries(st.one_of(st.text(max_size=4), scalars), odd, max_size=3)
    ),
)
def test_odd_values_raise_only_library_errors(
    redis_url: str, name: Any, prefix: Any, strict: Any, token: Any, value: Any, mapping: Any
) -> None:
    """RedisFencedResource's constructor and every method, thrown odd values on a real Redis: a
    result or a library error (a ValidationError naming an argument), never another exception."""
    with redis.Redis.from_url(redis_url) as client:
        made: list[RedisFencedResource] = []
        error = only_library_errors(
            lambda: made.append(RedisFencedResource(client, name, strict=strict, prefix=prefix))
        )
        if error is not None:
            assert isinstance(error, ValidationError)
            assert error.argument in ("name", "strict", "prefix")
            return
        res = made[0]
        for call in (
            lambda: res.accept(token),
            lambda: res.set(value, token),
            lambda: res.get(token),
            lambda: res.hset(mapping, token),
            lambda: res.hgetall(token),
        ):
            error = only_library_errors(call)
            if isinstance(error, ValidationError):
                assert error.argument in ("token_or_lease", "value", "mapping")
