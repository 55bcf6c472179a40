"""On a real Redis: only the library's own errors escape a public entry point (the fuzz of
``tests/unit/test_public_errors.py``, fewer examples), and a password in the URL is shown as
``***`` in every error, while the right one still works."""

from __future__ import annotations

import asyncio
import functools
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contract.public_errors import CALLS, REDIS_OPTIONS, REDIS_URL_QUERIES, call_async, call_sync
from fencedlease import BackendError, LeaseManager, ValidationError
from fencedlease.aio import AsyncLeaseManager
from fencedlease_lab.servers.redis import RedisServer

pytestmark = pytest.mark.live


@pytest.mark.parametrize("name", sorted(CALLS))
def test_sync_entry_points_raise_only_library_errors_on_redis(redis_url: str, name: str) -> None:
    """LeaseManager on a real Redis: any argument, only FencedLeaseError."""

    @settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.data())
    def run(data: st.DataObject) -> None:
        prefix = f"fuzz-{uuid.uuid4().hex[:8]}"  # each example on keys of its own
        factory = functools.partial(LeaseManager.from_url, redis_url, prefix=prefix)
        call_sync(factory, name, data.draw(CALLS[name]))

    run()


@pytest.mark.parametrize("name", sorted(CALLS))
def test_async_entry_points_raise_only_library_errors_on_redis(redis_url: str, name: str) -> None:
    """AsyncLeaseManager on a real Redis: any argument, only FencedLeaseError."""

    @settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.data())
    def run(data: st.DataObject) -> None:
        prefix = f"fuzz-{uuid.uuid4().hex[:8]}"  # each example on keys of its own
        factory = functools.partial(AsyncLeaseManager.from_url, redis_url, prefix=prefix)
        call_async(factory, name, data.draw(CALLS[name]))

    run()


def test_redis_options_raise_only_library_errors_at_from_url_or_first_command(
    redis_url: str,
) -> None:
    """Any junk value for redis-py's connection options: refused by from_url or, when taken,
    the first acquire works or fails as BackendError; never a TypeError/ValueError/LookupError
    from inside redis-py, on both faces."""
    prefix = f"fuzz-{uuid.uuid4().hex[:8]}"

    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(REDIS_OPTIONS)
    def run(options: dict[str, Any]) -> None:
        kw = {"key": "k", "ttl_ms": 1_000, "wait_ms": 0, "retry_delay_ms": 1}
        factory = functools.partial(LeaseManager.from_url, redis_url, prefix=prefix, **options)
        call_sync(factory, "acquire", dict(kw))
        async_factory = functools.partial(
            AsyncLeaseManager.from_url, redis_url, prefix=prefix, **options
        )
        call_async(async_factory, "acquire", dict(kw))

    run()


def test_redis_url_options_raise_only_library_errors_on_redis(redis_url: str) -> None:
    """Any option redis-py knows of (or not) with a short value in the URL of a real Redis:
    refused by from_url (an option redis-py would keep as a string where it takes an object is
    named), or the first acquire works or fails as BackendError, on both faces."""
    prefix = f"fuzz-{uuid.uuid4().hex[:8]}"
    joiner = "&" if "?" in redis_url else "?"

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(REDIS_URL_QUERIES)
    def run(query: str) -> None:
        kw = {"key": "k", "ttl_ms": 1_000, "wait_ms": 0, "retry_delay_ms": 1}
        url = f"{redis_url}{joiner}{query}"
        options: dict[str, Any] = {"socket_timeout": 5, "socket_connect_timeout": 5}
        call_sync(
            functools.partial(LeaseManager.from_url, url, prefix=prefix, **options),
            "acquire",
            dict(kw),
        )
        call_async(
            functools.partial(AsyncLeaseManager.from_url, url, prefix=prefix, **options),
            "acquire",
            dict(kw),
        )

    run()


@pytest.fixture
def acl_redis() -> Iterator[int]:
    """A redis-server of our own with an ACL user ``user`` / ``s3cret``; its port."""
    with RedisServer() as server:
        admin = redis.Redis(port=server.port)
        admin.execute_command(  # type: ignore[no-untyped-call]
            "ACL", "SETUSER", "user", "on", ">s3cret", "~*", "&*", "+@all"
        )
        admin.close()
        yield server.port


def _chain(exc: BaseException | None) -> str:
    texts = []
    while exc is not None:
        texts.append(f"{type(exc).__name__}: {exc} {exc.args!r}")
        exc = exc.__cause__ or exc.__context__
    return "\n".join(texts)


def test_a_password_url_works_and_its_errors_never_show_it(acl_redis: int) -> None:
    """The right password acquires; a wrong one fails with BackendError (redis-py's error in
    __cause__) whose chain does not hold it; a bad option beside it is refused naming the option,
    without it; both faces."""
    good = f"redis://user:s3cret@127.0.0.1:{acl_redis}/0"
    with LeaseManager.from_url(good) as leases:
        result = leases.acquire("k")
        assert result.lease is not None
        assert result.lease.release() is True

    async def good_async() -> None:
        async with AsyncLeaseManager.from_url(good) as leases:
            result = await leases.acquire("k")
            assert result.lease is not None
            assert await result.lease.release() is True

    asyncio.run(good_async())

    wrong = f"redis://user:wr0ng-s3cret@127.0.0.1:{acl_redis}/0"
    with LeaseManager.from_url(wrong) as leases, pytest.raises(BackendError) as info:
        leases.acquire("k")
    assert isinstance(info.value.__cause__, redis.AuthenticationError)
    assert "wr0ng-s3cret" not in _chain(info.value)

    async def wrong_async() -> BackendError:
        async with AsyncLeaseManager.from_url(wrong) as leases:
            with pytest.raises(BackendError) as info:
                await leases.acquire("k")
            return info.value

    error = asyncio.run(wrong_async())
    assert isinstance(error.__cause__, redis.AuthenticationError)
    assert "wr0ng-s3cret" not in _chain(error)

    faces: list[Callable[..., object]] = [LeaseManager.from_url, AsyncLeaseManager.from_url]
    for face in faces:
        with pytest.raises(ValidationError) as refused:
            face(good + "?ssl_cert_reqs=none")
        assert refused.value.argument == "ssl_cert_reqs"
        assert "s3cret" not in _chain(refused.value)


def test_a_setting_redis_py_trips_on_mid_command_is_a_backend_error(redis_url: str) -> None:
    """A client made with a setting redis-py takes as given and fails on only in the middle of a
    command (socket_read_size=-1: recv refuses a negative size) gives a BackendError that may
    have run (the manager then releases with the owner token), never a raw ValueError. redis-py
    up to 8.1 lets recv's ValueError out; 8.2 turns it into its own ConnectionError ("Connection
    closed by server."): either way the BackendError names the class redis-py raised. (The
    asyncio client reads through asyncio streams, which do not use that setting.)"""
    port = int(redis_url.rsplit(":", 1)[1].split("/")[0])
    client = redis.Redis(connection_pool=redis.ConnectionPool(port=port, socket_read_size=-1))
    leases = LeaseManager(client, prefix="odd-setting")
    try:
        with pytest.raises(BackendError) as info:
            leases.acquire("k", ttl_ms=1_000)
        cause = info.value.__cause__
        assert type(cause) in (ValueError, redis.ConnectionError)
        assert f"{type(cause).__name__}: " in str(info.value)
        assert (info.value.sent, info.value.wrote) == ("maybe", "maybe")
    finally:
        leases.close()
        client.close()
