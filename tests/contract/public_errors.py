"""Fuzzing every public entry point of both faces: whatever the arguments, only the library's
own errors (:class:`FencedLeaseError` subclasses) escape. Shared by the unit tests (memory://,
sqlite:///) and the live ones (a real Redis)."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

import redis.connection
from hypothesis import strategies as st

import fencedlease
from fencedlease import FencedLeaseError, LeaseManager
from fencedlease._async.redis_backend import AsyncRedisBackend
from fencedlease._core.clock import SYSTEM_CLOCK
from fencedlease._redis.options import redis_parameters
from fencedlease.aio import AsyncLeaseManager
from fencedlease.backends import (
    AsyncMemoryBackend,
    AsyncSqliteBackend,
    MemoryBackend,
    SqliteBackend,
)

_ZONES = st.sampled_from(
    [
        None,
        timezone.utc,
        timezone(timedelta(hours=23, minutes=59)),
        timezone(timedelta(hours=-23, minutes=-59)),
    ]
)

#: Values of every awkward kind: no type, wrong types, extremes, NUL and lone surrogates.
JUNK: st.SearchStrategy[Any] = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, -1, 2**31 - 1, 2**31, 2**63 - 1, 2**63, 2**64, -(2**63)]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([math.nan, math.inf, -math.inf, 0.5, 1e300]),
    st.text(st.characters(blacklist_categories=()), max_size=8),
    st.sampled_from(["", "\x00", "a\x00b", "\ud800", "\u0967\u0968", "k" * 600]),
    st.binary(max_size=8),
    st.datetimes(timezones=_ZONES),
    st.sampled_from(
        [
            datetime.min,
            datetime.max,
            datetime.min.replace(tzinfo=timezone.utc),
            datetime.max.replace(tzinfo=timezone.utc),
            datetime.min.replace(tzinfo=timezone(timedelta(hours=1))),
            datetime.max.replace(tzinfo=timezone(timedelta(hours=-1))),
        ]
    ),
    st.lists(st.integers(), max_size=2),
    st.just(object()),
)


async def async_one(lease: object) -> int:
    return 1


EXTREME_DATETIMES = st.sampled_from(
    [
        datetime.min.replace(tzinfo=timezone.utc),
        datetime.max.replace(tzinfo=timezone.utc),
        datetime.min.replace(tzinfo=timezone(timedelta(hours=1))),
        datetime.max.replace(tzinfo=timezone(timedelta(hours=-1))),
    ]
)
KEY = st.text(min_size=1, max_size=6)
MS = st.one_of(st.integers(min_value=1, max_value=5_000), st.just(2**31 - 1))


def _calls(valid: dict[str, st.SearchStrategy[Any]]) -> st.SearchStrategy[dict[str, Any]]:
    """Keyword arguments: the right kind for every argument (edge values included); or for all
    but one, which is junk; or any argument junk or not at random."""
    names = sorted(valid)
    one_bad = st.sampled_from(names).flatmap(
        lambda bad: st.fixed_dictionaries(
            {name: JUNK if name == bad else strategy for name, strategy in valid.items()}
        )
    )
    mixed = st.fixed_dictionaries(
        {name: st.one_of(strategy, JUNK) for name, strategy in valid.items()}
    )
    return st.one_of(st.fixed_dictionaries(valid), one_bad, mixed)


#: Entry point name -> keyword arguments (the wrong kind mixed in).
CALLS: dict[str, st.SearchStrategy[dict[str, Any]]] = {
    "init": _calls(
        {"client": st.sampled_from(["memory", "async-memory"]), "prefix": st.just("p"),
         "clock": st.just(SYSTEM_CLOCK), "renew_batch_size": MS}
    ),
    "from_url": _calls(
        {"url": st.sampled_from(
                [
                    "memory://",
                    "sqlite:///:memory:",
                    "sqlite:///x.db?x=1",
                    "sqlite:///a\x00b.db",
                    "sqlite:///x.db?busy_timeout_ms=\u00b2",
                    "redis://u:p@h:\u0967/",
                    "redis://h/?ssl_cert_reqs=none",
                    "rediss://h/?ssl_cert_reqs=none",
                    "redis://h/?colour=red",
                ]
            ),
         "prefix": st.just("p"), "options": st.just({})}
    ),
    "acquire": _calls(
        {"key": KEY, "ttl_ms": MS, "wait_ms": st.just(0), "retry_delay_ms": MS}
    ),
    "hold": _calls(
        {"key": KEY, "ttl_ms": MS, "wait_ms": st.just(0), "retry_delay_ms": MS,
         "heartbeat_ms": st.sampled_from([None, False, 1]), "on_renew_error": st.just(print)}
    ),
    "with_lease": _calls(
        {"key": KEY, "fn": st.sampled_from(["sync", "async"]), "ttl_ms": MS,
         "wait_ms": st.just(0), "heartbeat_ms": st.sampled_from([None, False])}
    ),
    "restore": _calls(
        {"key": KEY, "owner_token": KEY, "ttl_ms": MS,
         "expires_at": st.one_of(st.none(), EXTREME_DATETIMES, st.datetimes(timezones=_ZONES)),
         "fencing_token": st.none() | st.integers(min_value=-(2**65), max_value=2**65)}
    ),
    "inspect": _calls({"key": KEY}),
    "force_release": _calls({"key": KEY}),
    "lease": _calls(
        {"key": KEY, "renew_ttl_ms": st.none() | MS, "timeout_ms": st.just(0)}
    ),
}  # fmt: skip


def _sync_one(lease: object) -> int:
    return 1


#: Redis connection options with junk values: redis-py keeps them until it connects.
REDIS_OPTIONS = st.dictionaries(
    st.sampled_from(
        ["socket_timeout", "socket_connect_timeout", "health_check_interval", "encoding",
         "encoding_errors", "db", "decode_responses", "max_connections", "colour"]
    ),
    JUNK,
    max_size=2,
)  # fmt: skip


def _options(kw: dict[str, Any]) -> dict[str, Any]:
    """``kw`` with its ``options`` (a dict, or junk taken as no options) spread out."""
    options = kw.pop("options")
    return {**kw, **(options if isinstance(options, dict) else {})}


def _no_wait(timeout_ms: Any) -> Any:
    """A valid wait (None: until lost; a positive int) becomes 0; junk stays junk."""
    if timeout_ms is None or (type(timeout_ms) is int and timeout_ms > 0):
        return 0
    return timeout_ms


def _client(value: Any) -> Any:
    if value == "memory":
        return MemoryBackend()
    if value == "async-memory":
        return AsyncMemoryBackend()
    return value


def _fn(value: Any) -> Any:
    if value == "sync":
        return _sync_one
    if value == "async":
        return async_one
    return value


def call_sync(manager_factory: Callable[[], LeaseManager], name: str, kw: dict[str, Any]) -> None:
    """Call entry point ``name`` of a fresh sync manager with ``kw``; a library error is fine."""
    try:
        if name == "init":
            LeaseManager(_client(kw.pop("client")), **kw).close()
            return
        if name == "from_url":
            LeaseManager.from_url(kw.pop("url"), **_options(kw)).close()
            return
        with manager_factory() as leases:
            if name == "acquire":
                result = leases.acquire(**kw)
                if result.lease is not None:
                    result.lease.release()
            elif name == "hold":
                with leases.hold(**kw):
                    pass
            elif name == "with_lease":
                leases.with_lease(kw.pop("key"), _fn(kw.pop("fn")), **kw)
            elif name == "restore":
                leases.restore(**kw).release()
            elif name == "inspect":
                leases.inspect(**kw)
            elif name == "force_release":
                leases.force_release(**kw)
            else:
                lease = leases.acquire(kw["key"]).lease
                assert lease is not None
                try:
                    lease.renew(kw["renew_ttl_ms"])
                    lease.wait_lost(_no_wait(kw["timeout_ms"]))
                    lease.check()
                finally:
                    lease.release()
    except FencedLeaseError:
        pass


def call_async(
    manager_factory: Callable[[], AsyncLeaseManager], name: str, kw: dict[str, Any]
) -> None:
    """:func:`call_sync` for the asyncio face (one event loop per call)."""

    async def run() -> None:
        try:
            if name == "init":
                await AsyncLeaseManager(_client(kw.pop("client")), **kw).close()
                return
            if name == "from_url":
                await AsyncLeaseManager.from_url(kw.pop("url"), **_options(kw)).close()
                return
            async with manager_factory() as leases:
                if name == "acquire":
                    result = await leases.acquire(**kw)
                    if result.lease is not None:
                        await result.lease.release()
                elif name == "hold":
                    async with leases.hold(**kw):
                        pass
                elif name == "with_lease":
                    await leases.with_lease(kw.pop("key"), _fn(kw.pop("fn")), **kw)
                elif name == "restore":
                    await leases.restore(**kw).release()
                elif name == "inspect":
                    await leases.inspect(**kw)
                elif name == "force_release":
                    await leases.force_release(**kw)
                else:
                    lease = (await leases.acquire(kw["key"])).lease
                    assert lease is not None
                    try:
                        await lease.renew(kw["renew_ttl_ms"])
                        await lease.wait_lost(_no_wait(kw["timeout_ms"]))
                        lease.check()
                    finally:
                        await lease.release()
        except FencedLeaseError:
            pass

    asyncio.run(run())


#: Module-level entry points and backend constructors: name -> (the callable, its arguments).
PLAIN_CALLS: dict[str, tuple[Callable[..., Any], st.SearchStrategy[dict[str, Any]]]] = {
    "owner_fingerprint": (
        fencedlease.owner_fingerprint,
        st.fixed_dictionaries({"owner_token": st.one_of(KEY, JUNK)}),
    ),
    "redact_url": (fencedlease.redact_url, st.fixed_dictionaries({"url": st.one_of(KEY, JUNK)})),
    "redact_text": (
        fencedlease.redact_text,
        st.fixed_dictionaries(
            {
                "text": st.one_of(KEY, JUNK),
                "url": st.one_of(st.just("redis://:\ud800@h"), KEY, JUNK),
            }
        ),
    ),
    "SqliteBackend": (
        SqliteBackend,
        _calls({"path": st.just(":memory:"), "prefix": st.just("p"),
                "busy_timeout_ms": MS, "clock": st.just(SYSTEM_CLOCK)}),
    ),
    "AsyncSqliteBackend": (
        AsyncSqliteBackend,
        _calls({"path": st.just(":memory:"), "prefix": st.just("p"),
                "busy_timeout_ms": MS, "clock": st.just(SYSTEM_CLOCK)}),
    ),
    "MemoryBackend": (MemoryBackend, _calls({"clock": st.just(SYSTEM_CLOCK)})),
    "AsyncMemoryBackend": (AsyncMemoryBackend, _calls({"clock": st.just(SYSTEM_CLOCK)})),
    "RedisBackend": (
        fencedlease.RedisBackend,
        _calls({"client": st.just(None), "prefix": st.just("p")}),
    ),
    "AsyncRedisBackend": (
        AsyncRedisBackend,
        _calls({"client": st.just(None), "prefix": st.just("p")}),
    ),
}  # fmt: skip


def call_plain(name: str, kw: dict[str, Any]) -> None:
    """Call ``PLAIN_CALLS[name]`` with ``kw`` (closing what it made); a library error is fine."""
    fn, _ = PLAIN_CALLS[name]
    try:
        made = fn(**kw)
    except FencedLeaseError:
        return
    close = getattr(made, "close", None)
    if close is not None:
        result = close()
        if asyncio.iscoroutine(result):
            asyncio.run(result)


#: Every name a Redis URL's query could carry that redis-py knows of (its URL parsers, every
#: parameter of its clients, pools and connections), and an unknown one.
_URL_OPTION_NAMES = sorted(
    {*redis.connection.URL_QUERY_ARGUMENT_PARSERS, *redis_parameters(), "colour"}
)
#: A Redis URL query: one to three of those options with short values of any printable kind.
REDIS_URL_QUERIES: st.SearchStrategy[str] = st.lists(
    st.tuples(
        st.sampled_from(_URL_OPTION_NAMES),
        st.one_of(
            st.sampled_from(["1", "0", "x", "true", "false", "none", "-1", "1.5", "utf-8"]),
            st.text(st.characters(min_codepoint=33, max_codepoint=126, exclude_characters="&#"),
                     min_size=1, max_size=6),
        ),
    ),
    min_size=1,
    max_size=3,
).map(lambda pairs: "&".join(f"{name}={value}" for name, value in pairs))  # fmt: skip
