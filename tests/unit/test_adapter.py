"""The Redis adapter (fencedlease._redis) as the rest of the library sees it: the classification
it sets on BackendError, the release waiter a backend provides, and the two hand-off faces built
the same way and dying the same way."""

from __future__ import annotations

import asyncio
import logging
import pickle
import threading
import time
from typing import Any

import pytest
import redis
import redis.asyncio
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from fencedlease import BackendError, LeaseManager, MemoryBackend, RedisBackend, SqliteBackend
from fencedlease._async.handoff import AsyncHandoff, AsyncSleepWaiter, async_release_waiter_for
from fencedlease._handoff.waiters import WaitRequest
from fencedlease._redis.errors import (
    CommandRefused,
    RedisCallError,
    ScriptNotLoaded,
    acl_denial,
    backend_error,
    map_exceptions,
    store_error,
)
from fencedlease._redis.scripts import ACQUIRE
from fencedlease._sync.handoff import Handoff, SleepWaiter, release_waiter_for
from fencedlease._sync.scripts import run_script
from fencedlease.aio import AsyncLeaseManager, AsyncRedisBackend
from fencedlease.backends import AsyncMemoryBackend


@pytest.mark.parametrize(
    ("cause", "sent", "wrote", "timed_out"),
    [
        (RedisConnectionError("Connection reset by peer"), "maybe", "maybe", False),
        (RedisTimeoutError("Timeout reading from 127.0.0.1:6379"), "maybe", "maybe", True),
        (RedisTimeoutError("Timeout connecting to server"), "no", "no", False),
        (RedisConnectionError("No connection available."), "no", "no", False),
        (ResponseError("fencedlease acquire: the lease key k holds a malformed value"), "yes", "no",
         False),
        (ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value script"),
         "yes", "maybe", False),
        (NoScriptError("No matching script. Please use EVAL."), "yes", "no", False),
        (ValueError("not redis"), "yes", "no", False),
    ],
)  # fmt: skip
def test_the_adapter_classifies_what_a_failed_command_may_have_done(
    cause: Exception, sent: str, wrote: str, timed_out: bool
) -> None:
    error = backend_error("acquire 'k'", cause)
    assert (error.sent, error.wrote, error.timed_out) == (sent, wrote, timed_out)
    assert str(error) == f"acquire 'k': {type(cause).__name__}: {cause}"
    copy = pickle.loads(pickle.dumps(error))
    assert (copy.sent, copy.wrote, copy.timed_out, str(copy)) == (
        sent,
        wrote,
        timed_out,
        str(error),
    )


def test_a_backend_error_of_an_atomic_store_says_it_answered_and_wrote_nothing() -> None:
    """Memory and SQLite raise BackendError without classification: the defaults say so."""
    error = BackendError("renew 'k': database is locked")
    assert (error.sent, error.wrote, error.timed_out) == ("yes", "no", False)


class _Calls:
    """A client that records script calls; EVALSHA answers NOSCRIPT ``noscript`` times."""

    def __init__(self, noscript: int) -> None:
        self.noscript = noscript
        self.calls: list[tuple[str, str]] = []

    def evalsha(self, sha: str, numkeys: int, *rest: Any) -> Any:
        self.calls.append(("EVALSHA", sha))
        if self.noscript:
            self.noscript -= 1
            raise NoScriptError("No matching script. Please use EVAL.")
        return [1, "7", 1000]

    def eval(self, source: str, numkeys: int, *rest: Any) -> Any:
        self.calls.append(("EVAL", source))
        return [1, "7", 1000]


def test_one_noscript_policy_evalsha_then_one_eval_of_the_source() -> None:
    client = _Calls(noscript=1)
    assert run_script(client, ACQUIRE, ("k",), ("o", 1000)) == [1, "7", 1000]  # type: ignore[arg-type]
    assert client.calls == [("EVALSHA", ACQUIRE.sha), ("EVAL", ACQUIRE.source)]
    warm = _Calls(noscript=0)
    run_script(warm, ACQUIRE, ("k",), ("o", 1000))  # type: ignore[arg-type]
    assert warm.calls == [("EVALSHA", ACQUIRE.sha)]


def test_the_backend_provides_the_release_waiter(tmp_path: Any) -> None:
    """Redis backends hand out their hand-off, built from the same kind of arguments on both
    faces (client, prefix); other stores get the polling waiter."""
    client = redis.Redis(port=1)  # never connected: nothing here does I/O
    waiter = release_waiter_for(RedisBackend(client, "p"))
    assert isinstance(waiter, Handoff)
    assert (waiter._client, waiter._prefix) == (client, "p")
    aclient = redis.asyncio.Redis(port=1)
    awaiter = async_release_waiter_for(AsyncRedisBackend(aclient, "p"))
    assert isinstance(awaiter, AsyncHandoff)
    assert (awaiter._client, awaiter._prefix) == (aclient, "p")
    assert type(release_waiter_for(MemoryBackend())) is SleepWaiter
    sqlite = SqliteBackend(str(tmp_path / "l.db"))
    try:
        assert type(release_waiter_for(sqlite)) is SleepWaiter
    finally:
        sqlite.close()
    assert type(async_release_waiter_for(AsyncMemoryBackend())) is AsyncSleepWaiter
    with LeaseManager(MemoryBackend()) as leases:
        assert type(leases._release_waiter) is SleepWaiter


def test_the_async_manager_takes_its_waiter_from_the_backend() -> None:
    async def main() -> type:
        aclient = redis.asyncio.Redis(port=1)
        async with AsyncLeaseManager(aclient, prefix="p") as leases:
            return type(leases._release_waiter)

    assert asyncio.run(main()) is AsyncHandoff


class _DeadPubSub:
    """A pub/sub whose first SUBSCRIBE fails with an error that is not Redis's."""

    def subscribe(self, *channels: str) -> None:
        raise RuntimeError("listener bug")

    def close(self) -> None:
        pass


class _AsyncDeadPubSub:
    async def subscribe(self, *channels: str) -> None:
        raise RuntimeError("listener bug")

    async def aclose(self) -> None:
        pass


class _FakeClient:
    """Enough of a client for a listener: its own pool kind, so no dedicated pool is made."""

    connection_pool = object()

    def __init__(self, pubsub: object) -> None:
        self._pubsub = pubsub

    def pubsub(self) -> object:
        return self._pubsub


_DIED = "fencedlease hand-off listener stopped; waiters fall back to polling"


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_both_listeners_log_their_death_the_same_way(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR, logger="fencedlease.handoff")
    handoff = Handoff(_FakeClient(_DeadPubSub()), "p")  # type: ignore[arg-type]
    handoff.wait(WaitRequest("k", "o" * 32, 1_000, 0.0))
    assert handoff._listening._thread is not None
    handoff._listening._thread.join()
    handoff.close()

    async def main() -> None:
        ahandoff = AsyncHandoff(_FakeClient(_AsyncDeadPubSub()), "p")  # type: ignore[arg-type]
        await ahandoff.wait(WaitRequest("k", "o" * 32, 1_000, 0.0))
        task = ahandoff._listening._task
        assert task is not None
        await asyncio.wait({task})
        assert isinstance(task.exception(), RuntimeError)
        await ahandoff.aclose()  # the death was logged: closing does not raise it again

    asyncio.run(main())
    died = [r for r in caplog.records if r.getMessage() == _DIED]
    assert len(died) == 2
    assert [type(r.exc_info[1]) for r in died if r.exc_info] == [RuntimeError, RuntimeError]


class _ClosedUnderIt:
    """A pub/sub whose socket another thread closed: every call fails as redis-py's does then."""

    closed = 0

    def subscribe(self, *channels: str) -> None:
        raise ValueError("I/O operation on closed file.")

    def close(self) -> None:
        type(self).closed += 1


class _Healthy:
    """A pub/sub that subscribes and then hears nothing."""

    def __init__(self, subscribed: threading.Event) -> None:
        self.subscribed = subscribed
        self.channels: list[str] = []

    def subscribe(self, *channels: str) -> None:
        self.channels += channels
        self.subscribed.set()

    def unsubscribe(self, *channels: str) -> None:
        pass

    def get_message(self, timeout: float) -> None:
        time.sleep(min(timeout, 0.01))

    def close(self) -> None:
        pass


def test_the_sync_listener_takes_a_fresh_pubsub_when_its_socket_was_closed_under_it() -> None:
    """The listener neither dies nor spins on the dead pub/sub: it closes it, makes a new one and
    subscribes its control channel again there."""
    subscribed = threading.Event()
    healthy = _Healthy(subscribed)
    made = iter([_ClosedUnderIt(), healthy])

    class _Client(_FakeClient):
        def pubsub(self) -> object:
            return next(made)

    handoff = Handoff(_Client(None), "p")  # type: ignore[arg-type]
    handoff.wait(WaitRequest("k", "o" * 32, 1, 0.0))
    assert subscribed.wait(10.0)
    assert handoff._listening._thread is not None and handoff._listening._thread.is_alive()
    handoff.close()
    assert _ClosedUnderIt.closed == 1
    assert healthy.channels[0] == handoff._control  # the control channel, subscribed anew


def test_map_exceptions_raises_the_kind_asked_for_and_passes_the_others() -> None:
    """Inside map_exceptions, a redis-py error of a listed kind is raised as that kind (redis-py's
    in cause and __cause__, the same text); an unlisted one passes through unchanged."""
    missing = NoScriptError("No matching script. Please use EVAL.")
    with pytest.raises(ScriptNotLoaded) as mapped, map_exceptions(ScriptNotLoaded):
        raise missing
    assert (mapped.value.cause, mapped.value.__cause__, str(mapped.value)) == (
        missing,
        missing,
        "No matching script. Please use EVAL.",
    )
    refused = ResponseError("NOPERM User u has no permissions to run the 'info' command")
    with pytest.raises(ResponseError) as passed, map_exceptions(ScriptNotLoaded):
        raise refused
    assert passed.value is refused
    with pytest.raises(CommandRefused) as chosen, map_exceptions(ScriptNotLoaded, CommandRefused):
        raise refused
    assert chosen.value.cause is refused
    lost = RedisConnectionError("Connection reset by peer")
    with pytest.raises(RedisCallError) as any_error, map_exceptions(RedisCallError):
        raise lost
    assert (type(any_error.value), any_error.value.cause) == (RedisCallError, lost)


@pytest.mark.parametrize(
    "cause",
    [
        RedisConnectionError("Connection reset by peer"),
        RedisTimeoutError("Timeout reading from 127.0.0.1:6379"),
        ResponseError("NOPERM User u has no permissions to run the 'publish' command"),
    ],
)
def test_a_mapped_error_maps_to_the_backend_error_of_redis_pys_own(cause: Exception) -> None:
    """store_error and acl_denial read a RedisCallError as the redis-py error it stands for: the
    same message, classification and ACL words, with redis-py's exception in __cause__."""
    direct, mapped = (
        store_error("acquire 'k'", cause),
        store_error("acquire 'k'", RedisCallError(cause)),
    )
    assert isinstance(direct, BackendError) and isinstance(mapped, BackendError)
    assert (str(mapped), mapped.sent, mapped.wrote, mapped.timed_out, mapped.__cause__) == (
        str(direct),
        direct.sent,
        direct.wrote,
        direct.timed_out,
        cause,
    )
    assert acl_denial(RedisCallError(cause)) == acl_denial(cause)


class _AsyncClosedUnderIt:
    """`_ClosedUnderIt` for the asyncio listener."""

    closed = 0

    async def subscribe(self, *channels: str) -> None:
        raise ValueError("I/O operation on closed file.")

    async def aclose(self) -> None:
        type(self).closed += 1


class _AsyncHealthy:
    """`_Healthy` for the asyncio listener: it subscribes and then hears nothing."""

    def __init__(self) -> None:
        self.subscribed = asyncio.Event()
        self.channels: list[str] = []

    async def subscribe(self, *channels: str) -> None:
        self.channels += channels
        self.subscribed.set()

    async def unsubscribe(self, *channels: str) -> None:
        pass

    async def get_message(self, timeout: float) -> None:
        await asyncio.sleep(min(timeout, 0.01))

    async def aclose(self) -> None:
        pass


def test_the_asyncio_listener_takes_a_fresh_pubsub_when_its_socket_was_closed_under_it() -> None:
    """As on the sync face, the asyncio listener survives a pub/sub whose socket was closed under
    it (an OSError or ValueError, not a RedisError): it closes it, makes a new one and subscribes
    its control channel again there, instead of dying."""

    async def main() -> tuple[bool, list[str], str]:
        healthy = _AsyncHealthy()
        made = iter([_AsyncClosedUnderIt(), healthy])

        class _Client(_FakeClient):
            def pubsub(self) -> object:
                return next(made)

        handoff = AsyncHandoff(_Client(None), "p")  # type: ignore[arg-type]
        await handoff.wait(WaitRequest("k", "o" * 32, 1, 0.0))
        await asyncio.wait_for(healthy.subscribed.wait(), 10.0)
        task = handoff._listening._task
        alive = task is not None and not task.done()
        await handoff.aclose()
        return alive, healthy.channels, handoff._control

    alive, channels, control = asyncio.run(main())
    assert alive is True
    assert _AsyncClosedUnderIt.closed == 1
    assert channels[0] == control  # the control channel, subscribed anew
