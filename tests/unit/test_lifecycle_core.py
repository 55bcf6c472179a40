"""The pure rules behind the managers' lifecycle: which errors mean "nothing was sent", how long a
hold's final release may wait, and what a lease made before a fork is in the child."""

from __future__ import annotations

import asyncio
import socket
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
import redis.asyncio
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import NoBackoff
from redis.retry import Retry

from fencedlease import BackendError, LeaseManager
from fencedlease._core import fork as _fork
from fencedlease._core.attempt import AcquireAttempt, is_ambiguous, never_sent
from fencedlease._core.state import RELEASE_FLOOR_MS, LeaseState, LossReason, release_bound_s
from fencedlease._handoff.waiters import NoQueueing, WaitRequest
from fencedlease._redis.errors import backend_error, backend_errors
from fencedlease.aio import AsyncLeaseManager
from fencedlease.backends import AsyncMemoryBackend, MemoryBackend
from fencedlease.testing import FakeClock
from fencedlease_lab.servers.redis import free_port

# -- which errors mean "nothing was sent" ----------------------------------------------------------


def _backend_error(call: Callable[[], object]) -> BackendError:
    with pytest.raises(BackendError) as caught, backend_errors("acquire 'k'"):
        call()
    return caught.value


def _async_backend_error(call: Callable[[], Any]) -> BackendError:
    async def main() -> BackendError:
        with pytest.raises(BackendError) as caught, backend_errors("acquire 'k'"):
            await call()
        return caught.value

    return asyncio.run(main())


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts connections (the kernel's backlog) and never answers."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        yield int(listener.getsockname()[1])


@pytest.fixture
def closing_port() -> Iterator[int]:
    """A port that accepts each connection and closes it at once (a reset after sending)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    stop = threading.Event()

    def serve() -> None:
        listener.settimeout(0.05)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            conn.recv(1024)
            conn.close()

    thread = threading.Thread(target=serve)
    thread.start()
    yield int(listener.getsockname()[1])
    stop.set()
    thread.join()
    listener.close()


def _client(port: int) -> redis.Redis:
    return redis.Redis(port=port, socket_timeout=0.2, retry=Retry(NoBackoff(), 0))


def _async_client(port: int) -> redis.asyncio.Redis:
    return redis.asyncio.Redis(port=port, socket_timeout=0.2, retry=AsyncRetry(NoBackoff(), 0))


def test_a_refused_connection_sent_nothing() -> None:
    """Both faces: a port nobody listens on is "never sent", so not ambiguous: no resend, no
    clean-up release."""
    port = free_port()
    for error in (
        _backend_error(lambda: _client(port).ping()),
        _async_backend_error(lambda: _async_client(port).ping()),
    ):
        assert isinstance(error.__cause__, redis.ConnectionError)
        assert (never_sent(error), is_ambiguous(error)) == (True, False)


def test_a_connection_that_never_answers_is_ambiguous(silent_port: int) -> None:
    """Both faces: connected, then no reply before the socket timeout: the command may have run."""
    for error in (
        _backend_error(lambda: _client(silent_port).ping()),
        _async_backend_error(lambda: _async_client(silent_port).ping()),
    ):
        assert isinstance(error.__cause__, redis.TimeoutError)
        assert (never_sent(error), is_ambiguous(error)) == (False, True)


def test_a_connection_closed_after_sending_is_ambiguous(closing_port: int) -> None:
    """Both faces: the server read the command and closed the connection: it may have run."""
    for error in (
        _backend_error(lambda: _client(closing_port).ping()),
        _async_backend_error(lambda: _async_client(closing_port).ping()),
    ):
        assert isinstance(error.__cause__, redis.ConnectionError)
        assert (never_sent(error), is_ambiguous(error)) == (False, True)


@pytest.mark.parametrize(
    ("cause", "sent"),
    [
        (redis.TimeoutError("Timeout connecting to server"), False),
        (redis.TimeoutError("Timeout reading from 127.0.0.1:6379"), True),
        (redis.exceptions.MaxConnectionsError("Too many connections"), False),
        (redis.ResponseError("ERR unknown command"), True),
    ],
)
def test_never_sent_by_cause(cause: Exception, sent: bool) -> None:
    """redis-py's connect timeout (both faces say "Timeout connecting") and an exhausted pool sent
    nothing; a read timeout and a refusal by Redis did send."""
    error = backend_error("acquire 'k'", cause)
    assert never_sent(error) is (not sent)
    assert error.sent == (
        "maybe" if isinstance(cause, redis.TimeoutError) and sent else "yes" if sent else "no"
    )


def test_an_acquire_refused_at_connect_is_not_uncertain() -> None:
    """The acquire loop's rule: after a refused connection the attempt does not resend and is
    not uncertain, so no clean-up release follows."""
    attempt = AcquireAttempt("k", 1_000, 0, 100, FakeClock())
    attempt.sending()
    error = _backend_error(lambda: _client(free_port()).ping())
    assert attempt.may_resend(error) is False
    assert attempt.uncertain is False


# -- the bound of the final release ------------------------------------------------------------


def _state(deadline: float | None, ttl_ms: int = 1_000) -> LeaseState:
    return LeaseState("k", "owner", 1, ttl_ms, deadline, None)


def test_release_bound_is_the_time_left_to_the_deadline() -> None:
    """Until the lease's local deadline; at least the floor; ttl_ms without a deadline."""
    assert release_bound_s(_state(10.0), 9.25) == 0.75
    assert release_bound_s(_state(10.0), 9.99) == RELEASE_FLOOR_MS / 1000
    assert release_bound_s(_state(10.0), 12.0) == RELEASE_FLOOR_MS / 1000
    assert release_bound_s(_state(None, ttl_ms=2_500), 0.0) == 2.5
    assert release_bound_s(_state(None, ttl_ms=5), 0.0) == RELEASE_FLOOR_MS / 1000


# -- fork ------------------------------------------------------------------------------------------


def test_a_lease_made_before_a_fork_is_lost_in_the_child(monkeypatch: pytest.MonkeyPatch) -> None:
    """In the child (a new generation) the lease is lost with the "forked" reason, its
    listeners (the parent's threads and loops) are not called, and a renewer's hook is dropped;
    a lease made in the child is its own."""
    before = _state(100.0)
    called: list[LeaseState] = []
    before.add_listener(called.append)
    before.deadline_moved = lambda: None
    monkeypatch.setattr(_fork, "generation", _fork.generation + 1)
    assert before.check_deadline(0.0) is True
    assert (before.lost, before.lost_reason) == (True, LossReason.FORKED)
    hook: object = before.deadline_moved
    assert (called, hook) == ([], None)
    after = _state(100.0)
    assert (after.inherited(), after.check_deadline(0.0), after.lost) == (False, False, False)


def test_a_released_lease_stays_released_in_the_child(monkeypatch: pytest.MonkeyPatch) -> None:
    """A lease released before the fork is not reported lost afterwards."""
    state = _state(100.0)
    state.released = True
    monkeypatch.setattr(_fork, "generation", _fork.generation + 1)
    assert state.inherited() is True
    assert (state.lost, state.lost_reason) == (False, None)


class _Resettable:
    def __init__(self, fail: bool = False) -> None:
        self.resets = 0
        self.fail = fail

    def _after_fork_in_child(self) -> None:
        self.resets += 1
        if self.fail:
            raise RuntimeError("broken")


def test_the_fork_hooks_reset_every_live_object_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The child hook bumps the generation, replaces the registry lock held across the fork, and
    resets each live registered object once, even when another one fails; a dead object is
    forgotten (weak references)."""
    live: weakref.WeakSet[Any] = weakref.WeakSet()
    monkeypatch.setattr(_fork, "_live", live)
    monkeypatch.setattr(_fork, "_lock", threading.Lock())
    monkeypatch.setattr(_fork, "generation", _fork.generation)
    kept, broken, dropped = _Resettable(), _Resettable(fail=True), _Resettable()
    _fork.register(kept)
    _fork.register(broken)
    _fork.register(dropped)
    del dropped
    assert len(live) == 2
    generation = _fork.generation
    _fork._before()
    held = _fork._lock
    assert held.locked()
    _fork._after_in_child()
    assert (_fork.generation, kept.resets, broken.resets) == (generation + 1, 1, 1)
    assert _fork._lock is not held and not _fork._lock.locked()
    _fork._before()
    _fork._after_in_parent()
    assert not _fork._lock.locked()


# -- a waiting acquire whose queueing command never left ------------------------------------------


class _FailingWaiter(NoQueueing):
    """A release waiter that queues (as the Redis hand-off does) and fails with ``error``."""

    queues = True

    def __init__(self, error: BackendError) -> None:
        self.error = error

    def wait(self, request: WaitRequest) -> None:
        raise self.error

    def close(self, until: float | None = None) -> None:
        pass

    def _after_fork_in_child(self) -> None:
        pass


class _AsyncFailingWaiter(NoQueueing):
    """The asyncio twin of :class:`_FailingWaiter`."""

    queues = True

    def __init__(self, error: BackendError) -> None:
        self.error = error

    async def wait(self, request: WaitRequest) -> None:
        raise self.error

    async def aclose(self) -> None:
        pass


def _spawns(leases: LeaseManager | AsyncLeaseManager) -> list[str]:
    """The names of the calls ``leases`` spawns from now on, as they are spawned."""
    spawned: list[str] = []
    spawn = leases._spawn

    def watch(name: str, fn: Any, *args: Any) -> Any:
        spawned.append(name)
        return spawn(name, fn, *args)

    leases._spawn = watch  # type: ignore[method-assign]
    return spawned


def _waiting_acquire_cleans_up(error: BackendError) -> tuple[bool, bool]:
    """Whether a waiting acquire (the key held by another owner) whose wait fails with ``error``
    spawns a clean-up release, on the sync face and on the asyncio face."""
    backend = MemoryBackend()
    assert backend.acquire("k", "other", 60_000).acquired
    leases = LeaseManager(backend)
    leases._release_waiter = _FailingWaiter(error)
    spawned = _spawns(leases)
    with pytest.raises(BackendError):
        leases.acquire("k", ttl_ms=1_000, wait_ms=1_000)
    leases.close()

    async def main() -> bool:
        aleases = AsyncLeaseManager(AsyncMemoryBackend(sync=backend))
        aleases._release_waiter = _AsyncFailingWaiter(error)
        aspawned = _spawns(aleases)
        with pytest.raises(BackendError):
            await aleases.acquire("k", ttl_ms=1_000, wait_ms=1_000)
        await aleases.close()
        return aspawned == ["fencedlease-cleanup"]

    return spawned == ["fencedlease-cleanup"], asyncio.run(main())


def test_a_wait_refused_at_connect_queued_nothing() -> None:
    """Both faces: the hand-off's queueing command failed on a refused connection, so the waiter
    was never queued and nothing is cleaned up; after a read timeout it may have been, and the
    clean-up release is sent (the control that shows the check can fail)."""
    refused = _backend_error(lambda: _client(free_port()).ping())
    assert _waiting_acquire_cleans_up(refused) == (False, False)
    cause = redis.TimeoutError("Timeout reading from 127.0.0.1:6379")
    timed_out = backend_error("wait for 'k'", cause)
    timed_out.__cause__ = cause
    assert _waiting_acquire_cleans_up(timed_out) == (True, True)
