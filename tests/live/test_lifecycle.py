"""The managers' lifecycle on a real Redis, both faces: fork, close() while holding, a connection
that is never established, and the bounded final release of ``hold``.

Fork scenarios run in a fresh interpreter (``python -c``) so that a forked child can leave the way
a real one does (returning, ``os._exit``, ``sys.exit`` with atexit) without unwinding pytest.
"""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from typing import Any

import pytest
import redis
import redis.asyncio

from conftest import needs_caller_releases, wait_until
from fencedlease import BackendError, Lease, LeaseLostError, LeaseManager, ValidationError
from fencedlease._core.state import RELEASE_FLOOR_MS, LossReason
from fencedlease.aio import AsyncLease, AsyncLeaseManager
from fencedlease_lab.servers.redis import RedisServer, free_port

pytestmark = pytest.mark.live

TTL_MS = 600  # the leases' TTL in the fork scenarios

# -- fork -----------------------------------------------------------------------------------------

_FORK_SYNC = textwrap.dedent(
    """
    import atexit, json, multiprocessing, os, sys, threading, time
    import redis
    from fencedlease import LeaseLostError, LeaseManager

    url, prefix, how, facts_path = sys.argv[1:5]
    TTL = int(sys.argv[5])
    facts = {}

    def save():
        with open(facts_path, "w") as f:
            json.dump(facts, f)

    leases = LeaseManager(redis.Redis.from_url(url, socket_timeout=10), prefix=prefix)

    def close_at_exit():  # inherited by the child: sys.exit there runs it
        leases.close()
        if facts:  # the child's
            facts["closed_at_exit"] = True
            save()

    atexit.register(close_at_exit)

    def handoff_round():
        # A waiter woken by a release's hand-off: the listener thread and its pool must run.
        first = leases.acquire("h", ttl_ms=TTL).lease
        timer = threading.Timer(0.2, first.release)
        timer.start()
        before = leases._release_waiter.notified
        got = leases.acquire("h", ttl_ms=TTL, wait_ms=5_000, retry_delay_ms=4_000)
        timer.join()
        woken = leases._release_waiter.notified - before
        got.lease.release()
        return got.acquired, woken

    def child_work(lease):
        facts["lost"] = lease.lost
        facts["reason"] = lease.lost_reason
        facts["renew"] = lease.renew()
        facts["release"] = lease.release()
        with leases.hold("child", ttl_ms=TTL, heartbeat_ms=TTL // 6) as mine:
            facts["child_lost_after_3_ttl"] = mine.wait_lost(timeout_ms=3 * TTL)
            facts["child_threads"] = sorted(
                {t.name.rstrip("_0123456789") for t in threading.enumerate()
                 if t.name.startswith("fencedlease")}
            )
        facts["child_key_after"] = redis.Redis.from_url(url).exists(prefix + ":{child}")
        facts["handoff"] = handoff_round()
        save()

    def mp_child(lease, leave):
        child_work(lease)
        if leave == "sys.exit":
            sys.exit(0)

    def wait_child(pid):
        give_up = time.monotonic() + 60
        while (done := os.waitpid(pid, os.WNOHANG))[0] == 0:
            if time.monotonic() > give_up:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
                return "hung"
            time.sleep(0.01)
        return os.waitstatus_to_exitcode(done[1])

    def fork_child(lease):
        # The child's exit code, in the parent; None in an os.fork child leaving by "return".
        if how.startswith("mp"):
            proc = multiprocessing.get_context("fork").Process(
                target=mp_child, args=(lease, how.split(":")[1])
            )
            proc.start()
            proc.join(60)
            if proc.exitcode is None:
                proc.kill()
                return "hung"
            return proc.exitcode
        pid = os.fork()
        if pid:
            return wait_child(pid)
        child_work(lease)
        if how == "os._exit":
            os._exit(0)
        if how == "sys.exit":
            sys.exit(0)  # unwinds the parent's hold here, then atexit closes
        return None  # "return": leave the parent's hold block as its body would

    def scenario():
        with leases.hold("parent", ttl_ms=TTL, heartbeat_ms=20) as lease:
            while leases.renewer.round_trips < 3:  # the renewer is busy when the fork lands
                time.sleep(0.005)
            code = fork_child(lease)
            if code is None:
                return
            round_trips = leases.renewer.round_trips
            alive = not lease.wait_lost(timeout_ms=2 * TTL)
            info = leases.inspect("parent")
            print(json.dumps({
                "code": code,
                "alive": alive,
                "owner_same": info.owner_fingerprint == lease.owner_fingerprint,
                "token_same": info.fencing_token == lease.fencing_token,
                "ttl_left": info.ttl_ms > 0,
                "renewed_since": leases.renewer.round_trips - round_trips,
            }))

    handoff_round()  # the parent's hand-off listener is up at the fork
    try:
        scenario()
    except LeaseLostError as exc:  # only a child that left the parent's hold gets here
        facts["hold_exit"] = str(exc)
        save()
    """
)


def _run_fork_script(
    script: str, url: str, how: str, tmp_path: Any
) -> tuple[dict[str, Any], dict[str, Any]]:
    prefix = f"fork-{uuid.uuid4().hex[:8]}"
    facts_path = tmp_path / "child.json"
    done = subprocess.run(
        [sys.executable, "-c", script, url, prefix, how, str(facts_path), str(TTL_MS)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    parent_lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    assert done.returncode == 0 and len(parent_lines) == 1, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr  # nothing failed, atexit close() included
    return json.loads(parent_lines[0]), json.loads(facts_path.read_text())


def _assert_parent_kept_its_lease(parent: dict[str, Any]) -> None:
    """The parent's lease outlived the child and two more TTLs, renewed, same owner and token."""
    assert parent["code"] == 0
    assert parent["alive"] is True
    assert parent["owner_same"] is True
    assert parent["token_same"] is True
    assert parent["ttl_left"] is True
    assert parent["renewed_since"] >= 2


def _assert_child_sync(child: dict[str, Any]) -> None:
    assert child["lost"] is True
    assert child["reason"] == LossReason.FORKED
    assert child["renew"] is False
    assert child["release"] is False
    assert child["child_lost_after_3_ttl"] is False  # renewed past three TTLs by fresh threads
    assert child["child_threads"] == ["fencedlease-renew-io", "fencedlease-renewer"]
    assert child["child_key_after"] == 0  # the child's own lease was released by the child
    assert child["handoff"] == [True, 1]  # woken by the release, not by its 2-6 s retry delay


@pytest.mark.parametrize("how", ["return", "os._exit", "sys.exit"])
def test_os_fork_child_leaves_the_parents_lease_alone(
    redis_url: str, how: str, tmp_path: Any
) -> None:
    """os.fork inside a hold with a busy renewer and a running hand-off listener: the child sees
    the inherited lease lost ("forked"), renew/release send nothing, its own lease is renewed past
    its TTL by fresh threads and its hand-off wakes; however it leaves (the hold's end, os._exit,
    sys.exit running atexit close()), the parent's key keeps being renewed, same owner and token.
    """
    parent, child = _run_fork_script(_FORK_SYNC, redis_url, how, tmp_path)
    _assert_parent_kept_its_lease(parent)
    _assert_child_sync(child)
    if how in ("return", "sys.exit"):
        assert child["closed_at_exit"] is True  # close() in the child returned, no deadlock
    else:
        assert "closed_at_exit" not in child
    if how == "return":  # leaving the parent's hold: lost, reported, nothing released
        assert (
            child["hold_exit"] == f"lease 'parent' (fencing token 1) was lost: {LossReason.FORKED}"
        )
    else:
        assert "hold_exit" not in child


@pytest.mark.parametrize("how", ["mp:return", "mp:sys.exit"])
def test_multiprocessing_fork_child_leaves_the_parents_lease_alone(
    redis_url: str, how: str, tmp_path: Any
) -> None:
    """The same with multiprocessing's fork context (the child returns from its target, or calls
    sys.exit; multiprocessing then leaves with os._exit)."""
    parent, child = _run_fork_script(_FORK_SYNC, redis_url, how, tmp_path)
    _assert_parent_kept_its_lease(parent)
    _assert_child_sync(child)
    assert "closed_at_exit" not in child and "hold_exit" not in child


_FORK_AIO = textwrap.dedent(
    """
    import asyncio, json, multiprocessing, os, sys, threading, time, traceback
    from fencedlease.aio import AsyncLeaseManager

    url, prefix, how, facts_path = sys.argv[1:5]
    TTL = int(sys.argv[5])
    facts = {}

    def save():
        with open(facts_path, "w") as f:
            json.dump(facts, f)

    async def child_main(leases, lease):
        # The inherited manager and lease: no I/O, the manager is inert.
        facts["lost"] = lease.lost
        facts["reason"] = lease.lost_reason
        facts["renew"] = await lease.renew()
        facts["release"] = await lease.release()
        try:
            await leases.acquire("x")
        except RuntimeError as exc:
            facts["inherited_use"] = str(exc)
        await leases.close()
        async with AsyncLeaseManager.from_url(url, prefix=prefix) as mine:
            async with mine.hold("child", ttl_ms=TTL, heartbeat_ms=TTL // 6) as own:
                facts["child_lost_after_3_ttl"] = await own.wait_lost(timeout_ms=3 * TTL)
            facts["child_key_after"] = await mine.inspect("child") is None

    def child(leases, lease, leave):
        asyncio.run(child_main(leases, lease))
        save()
        if leave == "sys.exit":
            sys.exit(0)
        if leave == "os._exit":
            os._exit(0)

    def fork_child(leases, lease):
        # From the main thread while the loop runs in another one (multiprocessing cannot fork
        # cleanly from a worker thread: its child's exit code is then 1).
        if how.startswith("mp"):
            proc = multiprocessing.get_context("fork").Process(
                target=child, args=(leases, lease, how.split(":")[1])
            )
            proc.start()
            proc.join(60)
            if proc.exitcode is None:
                proc.kill()
                return "hung"
            return proc.exitcode
        pid = os.fork()
        if pid == 0:
            try:
                child(leases, lease, how)  # leaves by os._exit, or by sys.exit: SystemExit
            except Exception:  # goes on up to the interpreter's exit
                traceback.print_exc()
                os._exit(1)
        give_up = time.monotonic() + 60
        while (done := os.waitpid(pid, os.WNOHANG))[0] == 0:
            if time.monotonic() > give_up:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
                return "hung"
            time.sleep(0.01)
        return os.waitstatus_to_exitcode(done[1])

    held = {}
    forked = threading.Event()
    ready = threading.Event()

    async def main():
        async with AsyncLeaseManager.from_url(url, prefix=prefix) as leases:
            async with leases.hold("parent", ttl_ms=TTL, heartbeat_ms=20) as lease:
                while leases.renewer.round_trips < 3:  # the renewal task is busy at the fork
                    await asyncio.sleep(0.005)
                held["it"] = leases, lease
                ready.set()
                await asyncio.get_running_loop().run_in_executor(None, forked.wait)
                round_trips = leases.renewer.round_trips
                alive = not await lease.wait_lost(timeout_ms=2 * TTL)
                info = await leases.inspect("parent")
                print(json.dumps({
                    "code": held["code"],
                    "alive": alive,
                    "owner_same": info.owner_fingerprint == lease.owner_fingerprint,
                    "token_same": info.fencing_token == lease.fencing_token,
                    "ttl_left": info.ttl_ms > 0,
                    "renewed_since": leases.renewer.round_trips - round_trips,
                }))

    loop_thread = threading.Thread(target=asyncio.run, args=(main(),))
    loop_thread.start()
    ready.wait()
    held["code"] = fork_child(*held["it"])
    forked.set()
    loop_thread.join()
    """
)


@pytest.mark.parametrize("how", ["os._exit", "sys.exit", "mp:return", "mp:sys.exit"])
def test_aio_fork_child_leaves_the_parents_lease_alone(
    redis_url: str, how: str, tmp_path: Any
) -> None:
    """The asyncio face: a child forked while the loop (in another thread) holds a lease with a
    busy renewal task finds the inherited manager inert and its lease lost ("forked"), sends
    nothing for it, makes its own manager in its own loop whose lease is renewed past its TTL;
    the parent's key keeps being renewed, same owner and token."""
    parent, child = _run_fork_script(_FORK_AIO, redis_url, how, tmp_path)
    _assert_parent_kept_its_lease(parent)
    assert child["lost"] is True
    assert child["reason"] == LossReason.FORKED
    assert (child["renew"], child["release"]) == (False, False)
    assert child["inherited_use"] == (
        "this lease manager belongs to the parent process (fork): make a new one here"
    )
    assert child["child_lost_after_3_ttl"] is False
    assert child["child_key_after"] is True


# -- close() while holding ------------------------------------------------------------------------

SLACK_S = 3.0
"""Scheduling slack on two busy cores for the bound tests. The clients' socket timeout is 30 s,
so an unbounded wait (the fault) is ten times past it."""

SOCKET_TIMEOUT_S = 30


def _hold_in_thread(
    leases: LeaseManager, key: str, heartbeat_ms: int | bool | None, seen: dict[str, Any]
) -> tuple[threading.Thread, threading.Event]:
    """A body in a thread that holds ``key`` and waits for the loss; ``seen`` gets what it saw."""
    entered = threading.Event()

    def body() -> None:
        try:
            with leases.hold(key, ttl_ms=60_000, heartbeat_ms=heartbeat_ms) as lease:
                entered.set()
                seen[f"{key}.wait_lost"] = lease.wait_lost()
                seen[f"{key}.reason"] = lease.lost_reason
        except LeaseLostError as exc:
            seen[f"{key}.exit"] = str(exc)
        except BaseException as exc:  # anything else is the test's failure
            seen[f"{key}.exit"] = repr(exc)

    thread = threading.Thread(target=body)
    thread.start()
    return thread, entered


def test_close_releases_held_leases_and_tells_the_bodies(
    redis_url: str, redis_client: redis.Redis
) -> None:
    """Sync close() while two bodies hold (renewed, and heartbeat_ms=False): both keys are gone
    when close() returns, each body's wait_lost() returns True with the "closed" reason, and each
    hold ends in LeaseLostError saying so."""
    leases = LeaseManager(redis.Redis.from_url(redis_url), prefix="cl")
    seen: dict[str, Any] = {}
    bodies = [_hold_in_thread(leases, "a", None, seen), _hold_in_thread(leases, "b", False, seen)]
    for _, entered in bodies:
        assert entered.wait(10)
    assert redis_client.exists("cl:{a}", "cl:{b}") == 2
    leases.close()
    assert redis_client.exists("cl:{a}", "cl:{b}") == 0
    for thread, _ in bodies:
        thread.join(10)
    for key in ("a", "b"):
        assert seen[f"{key}.wait_lost"] is True
        assert seen[f"{key}.reason"] == LossReason.CLOSED
        assert (
            seen[f"{key}.exit"] == f"lease {key!r} (fencing token 1) was lost: {LossReason.CLOSED}"
        )


def test_aio_close_releases_held_leases_and_tells_the_bodies(
    redis_url: str, redis_client: redis.Redis
) -> None:
    """The asyncio face, the same way: keys gone when close() returns, the bodies are cancelled,
    their leases lost with the "closed" reason, each hold ends in LeaseLostError saying so."""

    async def main() -> dict[str, Any]:
        leases = AsyncLeaseManager(redis.asyncio.Redis.from_url(redis_url), prefix="acl")
        seen: dict[str, Any] = {}
        entered = {key: asyncio.Event() for key in ("a", "b")}

        async def body(key: str, heartbeat_ms: int | bool | None) -> None:
            held = None
            try:
                async with leases.hold(key, ttl_ms=60_000, heartbeat_ms=heartbeat_ms) as lease:
                    held = lease
                    entered[key].set()
                    await lease.wait_lost()
            except LeaseLostError as exc:
                seen[f"{key}.exit"] = str(exc)
            assert held is not None
            seen[f"{key}.lost"], seen[f"{key}.reason"] = held.lost, held.lost_reason

        tasks = [asyncio.create_task(body("a", None)), asyncio.create_task(body("b", False))]
        for event in entered.values():
            await event.wait()
        seen["before"] = redis_client.exists("acl:{a}", "acl:{b}")
        await leases.close()
        seen["after"] = redis_client.exists("acl:{a}", "acl:{b}")
        await asyncio.gather(*tasks)
        return seen

    seen = asyncio.run(main())
    assert (seen["before"], seen["after"]) == (2, 0)
    for key in ("a", "b"):
        assert (seen[f"{key}.lost"], seen[f"{key}.reason"]) == (True, LossReason.CLOSED)
        assert (
            seen[f"{key}.exit"] == f"lease {key!r} (fencing token 1) was lost: {LossReason.CLOSED}"
        )


def test_close_is_bounded_on_a_hung_redis(
    own_redis: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    """A stopped Redis (SIGSTOP: connections open, nothing answers) and a 30 s socket timeout,
    with the renewer and the hand-off listener running: close(timeout_ms=300) returns within its
    bound plus scheduling slack, the body is told ("closed"), and the release it could not make
    is logged; the lease lapses at its TTL."""
    leases = LeaseManager(
        redis.Redis.from_url(own_redis.url, socket_timeout=SOCKET_TIMEOUT_S), prefix="hc"
    )
    seen: dict[str, Any] = {}
    thread, entered = _hold_in_thread(leases, "k", 100, seen)
    assert entered.wait(10)
    with LeaseManager.from_url(own_redis.url, prefix="hc") as other:  # a hand-off starts the
        held = other.acquire("busy", ttl_ms=60_000).lease  # listener
        assert held is not None
        timer = threading.Timer(0.1, held.release)
        timer.start()
        got = leases.acquire("busy", ttl_ms=60_000, wait_ms=10_000)
        timer.join()
    assert got.lease is not None and got.lease.release()
    assert leases._release_waiter.listening  # type: ignore[attr-defined]
    own_redis.pause()
    try:
        started = time.monotonic()
        leases.close(timeout_ms=300)
        took = time.monotonic() - started
    finally:
        own_redis.resume()
    thread.join(10)
    assert took < 0.3 + SLACK_S
    assert seen["k.reason"] == LossReason.CLOSED
    assert seen["k.exit"] == f"lease 'k' (fencing token 1) was lost: {LossReason.CLOSED}"
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert warnings == [
        "fencedlease: close() could not release 'k' (it lapses at its ttl): no reply within 300 ms"
    ]


def test_aio_close_is_bounded_on_a_hung_redis(
    own_redis: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    """The asyncio face: close(timeout_ms=300) on a stopped Redis returns within its bound plus
    slack; the body ends in LeaseLostError ("closed"); the release it could not make is logged."""

    async def main() -> tuple[float, str]:
        client = redis.asyncio.Redis.from_url(own_redis.url, socket_timeout=SOCKET_TIMEOUT_S)
        leases = AsyncLeaseManager(client, prefix="hc")
        entered = asyncio.Event()

        async def body() -> str:
            try:
                async with leases.hold("k", ttl_ms=60_000, heartbeat_ms=100) as lease:
                    entered.set()
                    await lease.wait_lost()
            except LeaseLostError as exc:
                return str(exc)
            return "no loss"

        task = asyncio.create_task(body())
        await entered.wait()
        async with AsyncLeaseManager.from_url(own_redis.url, prefix="hc") as other:
            held = (await other.acquire("busy", ttl_ms=60_000)).lease  # a hand-off starts the
            assert held is not None  # listener
            asyncio.get_running_loop().call_later(0.1, asyncio.ensure_future, held.release())
            got = (await leases.acquire("busy", ttl_ms=60_000, wait_ms=10_000)).lease
        assert got is not None and await got.release()
        assert any(t.get_name() == "fencedlease-handoff" for t in asyncio.all_tasks())
        own_redis.pause()
        try:
            started = time.monotonic()
            await leases.close(timeout_ms=300)
            took = time.monotonic() - started
        finally:
            own_redis.resume()
        exit_error = await task
        await client.aclose()
        return took, exit_error

    took, exit_error = asyncio.run(main())
    assert took < 0.3 + SLACK_S
    assert exit_error == f"lease 'k' (fencing token 1) was lost: {LossReason.CLOSED}"
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert warnings == [
        "fencedlease: close() could not release 'k' (it lapses at its ttl): no reply within 300 ms"
    ]


def test_close_timeout_is_validated(redis_url: str) -> None:
    """close(timeout_ms=...) takes an int of milliseconds; anything else is a ValidationError and
    the manager stays open."""
    leases = LeaseManager.from_url(redis_url, prefix="v")
    for bad in (-1, 1.5, True, "5"):  # None: the manager's own bound
        with pytest.raises(ValidationError, match="timeout_ms"):
            leases.close(timeout_ms=bad)  # type: ignore[arg-type]
    assert leases.acquire("k", ttl_ms=1_000).lease is not None
    leases.close(timeout_ms=0)

    async def main() -> None:
        aleases = AsyncLeaseManager.from_url(redis_url, prefix="v")
        with pytest.raises(ValidationError, match="timeout_ms"):
            await aleases.close(timeout_ms=-1)
        await aleases.close()

    asyncio.run(main())


# -- a connection never established ---------------------------------------------------------------


def _no_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_refused_connection_is_not_an_abandoned_acquire(caplog: pytest.LogCaptureFixture) -> None:
    """A port nobody listens on: acquire, a waiting acquire and hold raise BackendError (the
    refusal in the cause chain); nothing was sent, so no clean-up release is tried and nothing is
    logged."""
    caplog.set_level(logging.DEBUG, logger="fencedlease")
    leases = LeaseManager.from_url(f"redis://127.0.0.1:{free_port()}/0", prefix="t")
    with pytest.raises(BackendError) as acquire:
        leases.acquire("k", ttl_ms=1_000)
    with pytest.raises(BackendError):
        leases.acquire("k", ttl_ms=1_000, wait_ms=200)
    with pytest.raises(BackendError), leases.hold("k", ttl_ms=1_000):
        pass
    assert isinstance(acquire.value.__cause__, redis.ConnectionError)
    assert isinstance(acquire.value.__cause__.__context__, ConnectionRefusedError)
    assert leases._chores._pool is None  # no clean-up (nor any call off the path) was spawned
    leases.close()  # would have joined a clean-up and its warning
    assert _no_warnings(caplog) == []


def test_aio_refused_connection_is_not_an_abandoned_acquire(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The asyncio face: BackendError, no clean-up task, nothing logged."""
    caplog.set_level(logging.DEBUG, logger="fencedlease")

    async def main() -> BaseException | None:
        leases = AsyncLeaseManager.from_url(f"redis://127.0.0.1:{free_port()}/0", prefix="t")
        with pytest.raises(BackendError) as acquire:
            await leases.acquire("k", ttl_ms=1_000)
        with pytest.raises(BackendError):
            await leases.acquire("k", ttl_ms=1_000, wait_ms=200)
        with pytest.raises(BackendError):
            async with leases.hold("k", ttl_ms=1_000):
                pass
        assert not leases._chores
        await leases.close()
        return acquire.value.__cause__

    cause = asyncio.run(main())
    assert isinstance(cause, redis.ConnectionError)
    assert isinstance(cause.__context__, ConnectionRefusedError)
    assert _no_warnings(caplog) == []


# -- the bounded final release of hold ------------------------------------------------------------


def test_hold_exit_is_bounded_when_redis_hangs_after_the_loss(own_redis: RedisServer) -> None:
    """Redis stops answering while a body waits for the loss: the renewer marks the lease lost at
    its deadline, the body returns, and the hold's release waits the 100 ms floor, not the 30 s
    socket timeout: the hold ends in LeaseLostError soon after the lease's deadline."""
    leases = LeaseManager(
        redis.Redis.from_url(own_redis.url, socket_timeout=SOCKET_TIMEOUT_S), prefix="b"
    )
    deadline = 0.0
    try:
        with (
            pytest.raises(LeaseLostError, match="ttl_ms passed"),
            leases.hold("k", ttl_ms=1_000, heartbeat_ms=200) as lease,
        ):
            own_redis.pause()
            assert lease.wait_lost() is True
            deadline = lease._state.deadline or 0.0
        exited = time.monotonic()
    finally:
        own_redis.resume()
    assert deadline <= exited < deadline + RELEASE_FLOOR_MS / 1000 + SLACK_S
    leases.close(timeout_ms=0)


@pytest.mark.parametrize("via", ["hold", "with_lease"])
@pytest.mark.parametrize("thread", ["worker", "caller"])
def test_hold_exit_is_bounded_by_the_deadline_when_redis_hangs(
    own_redis: RedisServer, via: str, thread: str
) -> None:
    """Redis stops answering and the body returns at once: the release waits until the lease's
    deadline at most, then hold (or with_lease) raises BackendError (no reply; a TimeoutError as
    the cause) and the lease lapses at its TTL. Whether the release runs on the worker thread
    (the manager's first) or on the caller's (a connection of the manager's own ready: the
    connection is dropped, not kept)."""
    client = redis.Redis.from_url(own_redis.url, socket_timeout=SOCKET_TIMEOUT_S)
    leases = LeaseManager(client, prefix="b")
    caller = leases._releases.caller
    if caller is None:
        leases.close()
        pytest.skip(needs_caller_releases.kwargs["reason"])
    if thread == "caller":
        with leases.hold("warm-up", ttl_ms=10_000):
            pass
        wait_until(lambda: caller.ready() == 1, "a connection for releases to be made")
    deadline = 0.0

    def body(lease: Lease) -> None:
        nonlocal deadline
        own_redis.pause()
        deadline = lease._state.deadline or 0.0

    try:
        with pytest.raises(BackendError, match="no reply within") as failed:
            if via == "hold":
                with leases.hold("k", ttl_ms=1_000, heartbeat_ms=200) as lease:
                    body(lease)
            else:
                leases.with_lease("k", body, ttl_ms=1_000, heartbeat_ms=200)
        exited = time.monotonic()
    finally:
        own_redis.resume()
    assert isinstance(failed.value.__cause__, TimeoutError)
    assert exited < deadline + SLACK_S
    if thread == "caller":  # the command was sent (it may have run); its connection dropped
        assert (failed.value.sent, failed.value.wrote, failed.value.timed_out) == (
            "maybe",
            "maybe",
            True,
        )
        assert caller.ready() == 0
    # released late, or lapsed at its TTL
    wait_until(lambda: client.exists("b:{k}") == 0, "b:{k} to be released or to lapse")
    leases.close(timeout_ms=0)


def test_aio_hold_exit_is_bounded_when_redis_hangs_after_the_loss(own_redis: RedisServer) -> None:
    """The asyncio face: the body is cancelled at the lease's deadline, and the hold's release
    waits the 100 ms floor, not the 30 s socket timeout: LeaseLostError soon after the deadline."""

    async def main() -> tuple[float, float, BaseException | None]:
        client = redis.asyncio.Redis.from_url(own_redis.url, socket_timeout=SOCKET_TIMEOUT_S)
        leases = AsyncLeaseManager(client, prefix="b")
        deadline, error = 0.0, None
        try:
            async with leases.hold("k", ttl_ms=1_000, heartbeat_ms=200) as lease:
                own_redis.pause()
                deadline = lease._state.deadline or 0.0
                await asyncio.Event().wait()  # cancelled at the loss
        except LeaseLostError as exc:
            error = exc
        exited = time.monotonic()
        own_redis.resume()
        await leases.close(timeout_ms=0)
        await client.aclose()
        return deadline, exited, error

    try:
        deadline, exited, error = asyncio.run(main())
    finally:
        own_redis.resume()
    assert error is not None and LossReason.DEADLINE in str(error)
    assert deadline <= exited < deadline + RELEASE_FLOOR_MS / 1000 + SLACK_S


@pytest.mark.parametrize("via", ["hold", "with_lease"])
def test_aio_hold_exit_is_bounded_by_the_deadline_when_redis_hangs(
    own_redis: RedisServer, via: str
) -> None:
    """The asyncio face: the body returns at once on a stopped Redis; the release waits until
    the lease's deadline at most, then hold (or with_lease) raises BackendError (a TimeoutError
    as the cause), the release is cancelled, and the lease lapses at its TTL."""

    async def main() -> tuple[float, float, BaseException | None]:
        client = redis.asyncio.Redis.from_url(own_redis.url, socket_timeout=SOCKET_TIMEOUT_S)
        leases = AsyncLeaseManager(client, prefix="b")
        deadline, error = 0.0, None

        async def body(lease: AsyncLease) -> None:
            nonlocal deadline
            own_redis.pause()
            deadline = lease._state.deadline or 0.0

        try:
            if via == "hold":
                async with leases.hold("k", ttl_ms=1_000, heartbeat_ms=200) as lease:
                    await body(lease)
            else:
                await leases.with_lease("k", body, ttl_ms=1_000, heartbeat_ms=200)
        except BackendError as exc:
            error = exc
        exited = time.monotonic()
        own_redis.resume()
        await leases.close(timeout_ms=0)
        await client.aclose()
        return deadline, exited, error

    try:
        deadline, exited, error = asyncio.run(main())
    finally:
        own_redis.resume()
    assert error is not None and "no reply within" in str(error)
    assert isinstance(error.__cause__, TimeoutError)
    assert exited < deadline + SLACK_S
    client = redis.Redis.from_url(own_redis.url)
    wait_until(lambda: client.exists("b:{k}") == 0, "b:{k} to lapse at its TTL")
    client.close()


_FORK_LOCKED = textwrap.dedent(
    """
    import json, os, sys, threading, time
    import redis
    from fencedlease import LeaseManager

    url, prefix = sys.argv[1:3]
    leases = LeaseManager(redis.Redis.from_url(url, socket_timeout=10), prefix=prefix)
    with leases.hold("parent", ttl_ms=600, heartbeat_ms=20) as lease:
        # Another thread is inside the renewer's, the hand-off's and the manager's critical
        # sections when the fork lands: the child inherits those locks held.
        inside, leave = threading.Event(), threading.Event()

        def holder():
            with leases.renewer._guard, leases._release_waiter._lock, leases._lock:
                inside.set()
                leave.wait()

        thread = threading.Thread(target=holder)
        thread.start()
        inside.wait()
        pid = os.fork()
        if pid == 0:
            try:
                with leases.hold("child", ttl_ms=600, heartbeat_ms=100) as mine:
                    renewed = not mine.wait_lost(timeout_ms=1_800)
                leases.close()
                os._exit(0 if renewed and lease.lost else 3)
            finally:
                os._exit(2)
        leave.set()
        thread.join()
        give_up = time.monotonic() + 30
        while (done := os.waitpid(pid, os.WNOHANG))[0] == 0:
            if time.monotonic() > give_up:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
                done = (pid, None)
                break
            time.sleep(0.01)
        code = "hung" if done[1] is None else os.waitstatus_to_exitcode(done[1])
        alive = not lease.wait_lost(timeout_ms=1_200)
        print(json.dumps({"code": code, "alive": alive}))
    leases.close()
    """
)


def test_fork_while_another_thread_holds_the_managers_locks(redis_url: str) -> None:
    """A thread is inside the renewer's, the hand-off's and the manager's locks when another
    forks: the child (which inherits them held, with no thread to release them) takes and
    renews a lease of its own and closes without deadlock; the parent's lease stays alive."""
    done = subprocess.run(
        [sys.executable, "-c", _FORK_LOCKED, redis_url, f"locked-{uuid.uuid4().hex[:8]}"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"code": 0, "alive": True}


# A child process: holds "k" (and has the hand-off listener running) on a client with redis-py's
# default of no socket timeout, prints "ready", waits for a line on stdin (the parent pauses Redis
# first), then ends the hold, closes the manager and returns: the interpreter must exit although
# the library's threads are still blocked on the hung server.
_HUNG_EXIT_CHILD = """
import asyncio, sys, threading
import redis, redis.asyncio
import fencedlease
from fencedlease import LeaseManager
from fencedlease.aio import AsyncLeaseManager

URL, FACE, TTL_MS = sys.argv[1], sys.argv[2], int(sys.argv[3])


def sync() -> None:
    manager = LeaseManager(redis.Redis.from_url(URL), prefix="hx")
    held = manager.acquire("busy", ttl_ms=60_000).lease
    threading.Timer(0.1, held.release).start()
    got = manager.acquire("busy", ttl_ms=60_000, wait_ms=10_000).lease  # starts the listener
    got.release()
    try:
        with manager.hold("k", ttl_ms=TTL_MS):
            print("ready", flush=True)
            sys.stdin.readline()
    except fencedlease.FencedLeaseError as exc:
        print("hold:", type(exc).__name__, flush=True)
    manager.close()


async def asyncio_face() -> None:
    manager = AsyncLeaseManager(redis.asyncio.Redis.from_url(URL), prefix="hx")
    loop = asyncio.get_running_loop()
    try:
        async with manager.hold("k", ttl_ms=TTL_MS):
            print("ready", flush=True)
            await loop.run_in_executor(None, sys.stdin.readline)
    except fencedlease.FencedLeaseError as exc:
        print("hold:", type(exc).__name__, flush=True)
    await manager.close()


if FACE == "sync":
    sync()
else:
    asyncio.run(asyncio_face())
print("returned", flush=True)
"""


@pytest.mark.parametrize("face", ["sync", "async"])
def test_a_hung_redis_without_socket_timeout_never_blocks_process_exit(
    own_redis: RedisServer, face: str
) -> None:
    """A stopped Redis (SIGSTOP) and a client with no socket timeout (redis-py's default): the
    hold ends, close() returns, and the process exits, within a bound derived from the TTL. The
    library's threads (the release calls, the renewer's I/O, the hand-off listener and its
    queueing pool) are daemons, so the ones still blocked on the hung socket never keep the
    interpreter from exiting."""
    ttl_ms = 1_000
    child = subprocess.Popen(
        [sys.executable, "-c", _HUNG_EXIT_CHILD, own_redis.url, face, str(ttl_ms)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdin is not None
        assert child.stdout.readline() == "ready\n"
        own_redis.pause()
        started = time.monotonic()
        child.stdin.write("go\n")
        child.stdin.flush()
        # The hold ends at most at the TTL, the release waits a bounded time below it, close()
        # is bounded likewise: three TTLs and scheduling slack; then the interpreter exits.
        bound_s = 3 * ttl_ms / 1000 + SLACK_S
        lines = [child.stdout.readline() for _ in range(2)]
        returned = time.monotonic()
        try:
            out, err = child.communicate(timeout=bound_s + 10)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the {face} process did not exit with the store hung")
        exited = time.monotonic()
    finally:
        own_redis.resume()
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == 0, err
    assert lines == ["hold: BackendError\n" if face == "sync" else lines[0], "returned\n"], lines
    assert out == ""
    assert returned - started < bound_s, lines
    assert exited - returned < SLACK_S
