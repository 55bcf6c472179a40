"""The sync face on a real Redis: the documented semantics and the failure cases."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Sequence
from typing import Any

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from conftest import wait_until
from fencedlease import (
    BackendError,
    LeaseLostError,
    LeaseManager,
    LeaseNotAcquiredError,
)
from fencedlease._redis.scripts import ACQUIRE
from fencedlease_lab.servers.redis import RedisServer

pytestmark = pytest.mark.live


def _expire_now(client: redis.Redis, key: str) -> None:
    """Make Redis expire a lease key now, and wait until it is gone."""
    client.pexpire(key, 1)
    wait_until(lambda: client.pttl(key) == -2, f"Redis to expire {key}")


@pytest.fixture
def manager(redis_url: str, redis_client: redis.Redis, decode_responses: bool) -> Any:
    client = redis.Redis.from_url(redis_url, decode_responses=decode_responses)
    with LeaseManager(client, prefix="t") as leases:
        yield leases
    client.close()


def test_racing_connections_one_winner(redis_url: str, redis_client: redis.Redis) -> None:
    """16 independent connections racing for one free key: exactly one wins, with token 1."""
    barrier = threading.Barrier(16)
    results: list[int | None] = []
    lock = threading.Lock()

    def contender() -> None:
        with LeaseManager(redis.Redis.from_url(redis_url), prefix="t") as leases:
            barrier.wait()
            result = leases.acquire("race", ttl_ms=10_000)
            with lock:
                results.append(result.lease.fencing_token if result.lease else None)

    threads = [threading.Thread(target=contender) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results, key=lambda r: r or 0) == [None] * 15 + [1]


def test_tokens_strictly_increase_over_1000_cycles(manager: LeaseManager) -> None:
    """1,000 acquire/release cycles give tokens 1..1000 in order."""
    tokens = []
    for _ in range(1_000):
        lease = manager.acquire("cycle", ttl_ms=5_000).lease
        assert lease is not None
        tokens.append(lease.fencing_token)
        assert lease.release() is True
    assert tokens == list(range(1, 1_001))


def test_tokens_increase_across_a_restart_with_aof() -> None:
    """With appendonly yes / appendfsync always, a restart keeps the counter: the next token is
    larger than every token before it."""
    with RedisServer(appendonly=True, appendfsync="always") as server:
        client = redis.Redis.from_url(server.url)
        leases = LeaseManager(client, prefix="t")
        before = [leases.acquire("aof", ttl_ms=60_000).lease for _ in range(1)]
        assert before[0] is not None
        assert before[0].fencing_token == 1
        assert before[0].release()
        second = leases.acquire("aof", ttl_ms=60_000).lease
        assert second is not None
        assert second.fencing_token == 2
        server.restart(kill=True)  # a crash: no shutdown, the AOF alone must carry the counter
        info = leases.inspect("aof")
        assert info is not None
        assert info.fencing_token == 2
        assert leases.force_release("aof") is True
        third = leases.acquire("aof", ttl_ms=60_000).lease
        assert third is not None
        assert third.fencing_token == 3
        leases.close()
        client.close()


def test_expired_owner_is_rejected(manager: LeaseManager, redis_client: redis.Redis) -> None:
    """After A's lease expires and B acquires, A's renew and release return False and B's key
    and token are untouched (the held-up release case)."""
    a = manager.acquire("exp", ttl_ms=200).lease
    assert a is not None
    _expire_now(redis_client, "t:{exp}")
    b = manager.acquire("exp", ttl_ms=10_000).lease
    assert b is not None
    assert (a.fencing_token, b.fencing_token) == (1, 2)
    assert a.release() is False
    assert a.renew() is False
    assert a.lost is True
    info = manager.inspect("exp")
    assert info is not None
    assert (info.fencing_token, info.owner_fingerprint) == (b.fencing_token, b.owner_fingerprint)
    assert info.ttl_ms > 9_000
    assert b.release() is True


def test_renew_and_release_after_expiry_return_false(
    manager: LeaseManager, redis_client: redis.Redis
) -> None:
    """With nobody else holding the key, an expired lease's renew and release still say False,
    and renew never recreates the key."""
    lease = manager.acquire("gone", ttl_ms=200).lease
    assert lease is not None
    _expire_now(redis_client, "t:{gone}")
    assert lease.renew() is False
    assert redis_client.pttl("t:{gone}") == -2
    assert lease.release() is False


def test_renew_resets_ttl_and_keeps_token(manager: LeaseManager, redis_client: redis.Redis) -> None:
    """renew(ttl_ms) sets the new TTL and never changes the fencing token."""
    lease = manager.acquire("renew", ttl_ms=1_000).lease
    assert lease is not None
    assert lease.renew(60_000) is True
    assert lease.ttl_ms == 60_000
    assert 59_000 < redis_client.pttl("t:{renew}") <= 60_000
    info = manager.inspect("renew")
    assert info is not None
    assert info.fencing_token == lease.fencing_token == 1


def test_bounded_wait_on_a_held_key(manager: LeaseManager) -> None:
    """hold(wait_ms=200) on a key another owner holds raises LeaseNotAcquiredError after its
    200 ms, not before, and never sleeps a retry delay (5 s, 2.5 s at the least with jitter) past
    it; the body never runs."""
    holder = manager.acquire("busy", ttl_ms=10_000).lease
    assert holder is not None
    ran = []
    started = time.monotonic()
    with (
        pytest.raises(LeaseNotAcquiredError) as info,
        manager.hold("busy", wait_ms=200, retry_delay_ms=5_000),
    ):
        ran.append(True)
    elapsed = time.monotonic() - started
    assert ran == []
    assert info.value.key == "busy"
    assert info.value.status_code == 409
    assert 0.2 <= elapsed < 2.5


def test_fail_fast_is_the_default(manager: LeaseManager) -> None:
    """wait_ms=0: a held key is answered at once, with the holder's remaining TTL (no retry
    delay, 5 s here and 2.5 s at the least, is slept)."""
    assert manager.acquire("ff", ttl_ms=10_000)
    started = time.monotonic()
    result = manager.acquire("ff", ttl_ms=10_000, retry_delay_ms=5_000)
    assert not result
    assert result.lease is None
    assert result.holder_ttl_ms is not None
    assert 9_000 < result.holder_ttl_ms <= 10_000
    assert time.monotonic() - started < 2.5


def test_waiter_gets_the_lease_when_the_holder_releases(manager: LeaseManager) -> None:
    """A waiter with wait_ms acquires once the holder releases, with the next token."""
    holder = manager.acquire("handoff", ttl_ms=10_000).lease
    assert holder is not None
    released = threading.Event()

    def release_soon() -> None:
        released.wait()
        holder.release()

    thread = threading.Thread(target=release_soon)
    thread.start()
    released.set()
    result = manager.acquire("handoff", ttl_ms=10_000, wait_ms=3_000, retry_delay_ms=10)
    thread.join()
    assert result.lease is not None
    assert result.lease.fencing_token == 2


def test_with_lease_runs_fn_or_skips(manager: LeaseManager) -> None:
    """with_lease returns fn's value under the lease, or a skipped outcome without calling fn."""
    outcome = manager.with_lease("wl", lambda lease: lease.fencing_token, ttl_ms=1_000)
    assert (outcome.acquired, outcome.skipped, outcome.value) == (True, False, 1)
    holder = manager.acquire("wl", ttl_ms=10_000).lease
    assert holder is not None
    outcome = manager.with_lease("wl", lambda lease: pytest.fail("fn ran"), ttl_ms=1_000)
    assert (outcome.skipped, outcome.value, outcome.lease) == (True, None, None)


def test_body_exception_propagates_and_releases(
    manager: LeaseManager, redis_client: redis.Redis
) -> None:
    """An exception from the body propagates unchanged and the lease is released."""
    with pytest.raises(KeyError, match="boom"), manager.hold("exc", ttl_ms=1_000):
        raise KeyError("boom")
    assert redis_client.pttl("t:{exc}") == -2


def test_release_deletes_and_renewal_stops(own_redis: RedisServer) -> None:
    """After a hold ends the key is gone (PTTL -2) and no renewal is sent for it again. A batch
    already on its way when the hold ended may still reach Redis; the count starts once every
    batch sent has come back."""
    client = redis.Redis.from_url(own_redis.url)
    with LeaseManager(client, prefix="t") as leases:
        renew_many = leases.backend.renew_many
        landed = 0

        def spy(items: Sequence[tuple[str, str, int]]) -> list[int | BaseException]:
            nonlocal landed
            try:
                return renew_many(items)
            finally:
                landed += 1

        leases.backend.renew_many = spy  # type: ignore[method-assign]
        with leases.hold("stop", ttl_ms=5_000, heartbeat_ms=20) as lease:
            wait_until(lambda: leases.renewer.round_trips >= 3, "three renewal round trips")
            assert not lease.lost
        assert client.pttl("t:{stop}") == -2
        wait_until(
            lambda: landed == leases.renewer.round_trips,
            "every renewal round trip to land",
            timeout_s=30,
        )
        calls = client.info("commandstats")["cmdstat_evalsha"]["calls"]
        trips = leases.renewer.round_trips
        time.sleep(0.2)  # ten heartbeats: an absence can only be observed over a window
        assert client.info("commandstats")["cmdstat_evalsha"]["calls"] == calls
        assert leases.renewer.round_trips == trips
        assert len(leases.renewer) == 0
    client.close()


def test_no_thread_left_after_close(redis_url: str) -> None:
    """close() joins the renewer's threads. The bound is generous so that a machine whose cores
    are busy still joins within it (the default 1 s bound is what close() gives up at, not what
    joining takes); close() returns as soon as the threads have ended. Threads of other tests'
    managers (a cluster node worker still blocked on a node another test paused ends at its
    socket timeout) are not this manager's: only the threads it started are counted."""
    before = set(threading.enumerate())
    leases = LeaseManager.from_url(redis_url, prefix="t")
    with leases.hold("th", ttl_ms=400):
        assert any(t.name.startswith("fencedlease") for t in set(threading.enumerate()) - before)
    leases.close(timeout_ms=60_000)
    assert [
        t.name for t in set(threading.enumerate()) - before if t.name.startswith("fencedlease")
    ] == []


def test_acquire_and_release_are_two_commands(own_redis: RedisServer) -> None:
    """acquire + release cost exactly two Redis commands (INFO commandstats), both EVALSHA."""
    client = redis.Redis.from_url(own_redis.url)
    leases = LeaseManager(client, prefix="t")
    assert leases.acquire("warm", ttl_ms=1_000).lease.release()  # type: ignore[union-attr]
    client.config_resetstat()
    lease = leases.acquire("count", ttl_ms=1_000).lease
    assert lease is not None
    assert lease.release()
    stats = client.info("commandstats")
    client_side = {
        name: stat["calls"]
        for name, stat in stats.items()
        if name in ("cmdstat_evalsha", "cmdstat_eval", "cmdstat_script", "cmdstat_set")
    }
    # INFO itself runs after the reset; everything else was our two script calls. SET, GET,
    # INCR and DEL inside them are counted by Redis too (as script-run commands).
    assert client_side == {"cmdstat_evalsha": 2, "cmdstat_set": 1}
    leases.close()
    client.close()


class _LossyConnection(redis.Connection):
    """Drops the reply of the first acquire it carries: the command ran, the caller never hears."""

    dropped = 0

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        # every command goes out here, packed by redis-py or by the library
        parts = [command] if isinstance(command, (bytes, str)) else list(command)
        self._is_acquire = any(
            isinstance(part, bytes)
            and any(s.encode() in part for s in (ACQUIRE.sha, ACQUIRE.source))
            for part in parts
        )
        super().send_packed_command(parts, check_health)  # type: ignore[no-untyped-call]

    def read_response(self, *args: Any, **kwargs: Any) -> Any:
        response = super().read_response(*args, **kwargs)
        if getattr(self, "_is_acquire", False) and _LossyConnection.dropped == 0:
            _LossyConnection.dropped += 1
            self.disconnect()  # type: ignore[no-untyped-call]
            raise redis.ConnectionError("reply lost on the way back")
        return response


@pytest.mark.parametrize("client_retries", [0, 3], ids=["manager-retries", "redis-py-retries"])
def test_lost_acquire_reply_is_retried_with_the_same_owner(
    redis_url: str, redis_client: redis.Redis, client_retries: int
) -> None:
    """The acquire reply is lost and the same acquire is sent again: one INCR, the same token,
    and the caller holds the lease (not 'not acquired')."""
    _LossyConnection.dropped = 0
    pool = redis.ConnectionPool.from_url(
        redis_url,
        connection_class=_LossyConnection,
        retry=Retry(NoBackoff(), client_retries),
        retry_on_error=[redis.ConnectionError] if client_retries else [],
    )
    client = redis.Redis(connection_pool=pool)
    leases = LeaseManager(client, prefix="t")
    result = leases.acquire("lost-reply", ttl_ms=10_000)
    assert _LossyConnection.dropped == 1
    assert result.lease is not None
    assert result.lease.fencing_token == 1
    assert redis_client.get("t:{lost-reply}:fence") == b"1"
    assert result.lease.release() is True
    client.close()


def test_script_flush_everywhere(redis_url: str, redis_client: redis.Redis) -> None:
    """SCRIPT FLUSH before acquire, during a hold's renewals, and before release: all succeed."""
    errors: list[BaseException] = []
    with LeaseManager.from_url(redis_url, prefix="t") as leases:
        redis_client.script_flush()
        with leases.hold("flush", ttl_ms=300, heartbeat_ms=50, on_renew_error=errors.append):
            trips = leases.renewer.round_trips
            redis_client.script_flush()
            wait_until(
                lambda: leases.renewer.round_trips >= trips + 3, "three more renewal round trips"
            )
            redis_client.script_flush()
        assert redis_client.pttl("t:{flush}") == -2
        redis_client.script_flush()
        assert leases.inspect("flush") is None
        redis_client.script_flush()
        assert leases.force_release("flush") is False
    assert errors == []


def test_redis_down_before_acquire(own_redis: RedisServer) -> None:
    """Redis stopped: the error reaches the caller as BackendError; with_lease never calls fn."""
    leases = LeaseManager.from_url(own_redis.url, prefix="t", socket_connect_timeout=1)
    own_redis.stop()
    with pytest.raises(BackendError) as info:
        leases.acquire("down", ttl_ms=1_000)
    assert isinstance(info.value.__cause__, redis.ConnectionError)
    with pytest.raises(BackendError):
        leases.with_lease("down", lambda lease: pytest.fail("fn ran"), ttl_ms=1_000)
    leases.close()


def test_connection_reset_during_hold_is_survived(
    redis_url: str, redis_client: redis.Redis
) -> None:
    """One connection reset (CLIENT KILL) during a 3 s hold with ttl 1 s: the renewer
    reconnects and the hold completes without loss."""
    with LeaseManager.from_url(redis_url, prefix="t") as leases:
        with leases.hold("reset", ttl_ms=1_000) as lease:
            wait_until(lambda: leases.renewer.round_trips >= 1, "a first renewal round trip")
            killed = redis_client.client_kill_filter(_type="normal", skipme=True)
            assert killed >= 1
            wait_until(
                lambda: leases.renewer.round_trips >= 6, "six renewal round trips", timeout_s=5
            )
            time.sleep(max(0.0, 3.0 - 1.6))  # the 3 s body of the case
            assert not lease.lost
        assert lease.lost is False


def test_client_pause_longer_than_ttl_is_a_loss(redis_url: str, redis_client: redis.Redis) -> None:
    """CLIENT PAUSE for 6 s during a hold with ttl 1 s: the body learns of the loss at the
    deadline (ttl + one heartbeat of the last renewal, 1.25 s), long before the hung round trip
    comes back with the pause's end, and hold raises LeaseLostError."""
    with LeaseManager.from_url(redis_url, prefix="t") as leases:
        with pytest.raises(LeaseLostError) as info, leases.hold("pause", ttl_ms=1_000) as lease:
            wait_until(lambda: leases.renewer.round_trips >= 1, "a first renewal round trip")
            paused_at = time.monotonic()
            redis_client.execute_command("CLIENT", "PAUSE", 6_000, "ALL")  # type: ignore[no-untyped-call]
            try:
                assert lease.wait_lost(5_000) is True
                noticed = time.monotonic() - paused_at
            finally:  # the next test must not find the server paused: CLIENT UNPAUSE would wait
                # behind the pause itself, so wait for the pause's own end (a server-side timer)
                time.sleep(max(0.0, paused_at + 6.2 - time.monotonic()))
        assert noticed < 5.0
        assert info.value.key == "pause"
        assert "ttl_ms passed" in str(info.value)


def test_lease_lost_even_if_body_returns(manager: LeaseManager, redis_client: redis.Redis) -> None:
    """An operator deleting the key mid-body: hold raises LeaseLostError though the body
    returned normally. The TTL is 10 s: the renewal, not the deadline, finds the loss."""
    with (
        pytest.raises(LeaseLostError),
        manager.hold("del", ttl_ms=10_000, heartbeat_ms=50) as lease,
    ):
        redis_client.delete("t:{del}")
        assert lease.wait_lost(8_000) is True
        assert lease.lost_reason is not None
        assert "renewal" in lease.lost_reason


def test_deadline_checked_when_body_ends(manager: LeaseManager) -> None:
    """With renewal off, a body that outlives its TTL ends in LeaseLostError."""
    with pytest.raises(LeaseLostError), manager.hold("late", ttl_ms=100, heartbeat_ms=False):
        time.sleep(0.15)


_CHILD = textwrap.dedent(
    """
    import json, sys
    from fencedlease import LeaseManager
    url, step = sys.argv[1], sys.argv[2]
    leases = LeaseManager.from_url(url, prefix="t")
    if step == "acquire":
        lease = leases.acquire("restore", ttl_ms=60_000).lease
        print(json.dumps({"owner": lease.owner_token, "token": lease.fencing_token,
                          "expires_at": lease.expires_at.isoformat()}))
    else:
        from datetime import datetime
        saved = json.loads(sys.stdin.read())
        lease = leases.restore("restore", saved["owner"], ttl_ms=60_000,
                               expires_at=datetime.fromisoformat(saved["expires_at"]),
                               fencing_token=saved["token"])
        print(json.dumps({"lost": lease.lost, "renew": lease.renew(),
                          "token": lease.fencing_token, "release": lease.release()}))
    leases.close()
    """
)


def test_restore_across_two_processes(redis_url: str, redis_client: redis.Redis) -> None:
    """One process acquires and persists; a later process restores, renews and releases."""
    first = subprocess.run(
        [sys.executable, "-c", _CHILD, redis_url, "acquire"],
        capture_output=True, text=True, check=True, timeout=30,
    )  # fmt: skip
    saved = json.loads(first.stdout)
    second = subprocess.run(
        [sys.executable, "-c", _CHILD, redis_url, "restore"],
        input=first.stdout, capture_output=True, text=True, check=True, timeout=30,
    )  # fmt: skip
    assert json.loads(second.stdout) == {
        "lost": False,
        "renew": True,
        "token": saved["token"],
        "release": True,
    }
    assert redis_client.pttl("t:{restore}") == -2


def test_restore_of_another_owners_lease_changes_nothing(manager: LeaseManager) -> None:
    """A restore with a wrong owner token can neither renew nor release."""
    holder = manager.acquire("rw", ttl_ms=10_000).lease
    assert holder is not None
    impostor = manager.restore("rw", "not-the-owner", ttl_ms=10_000)
    assert impostor.fencing_token is None
    assert impostor.renew() is False
    assert impostor.release() is False
    assert manager.inspect("rw").fencing_token == holder.fencing_token  # type: ignore[union-attr]


_PAUSED_HOLDER = textwrap.dedent(
    """
    import sys, time
    from fencedlease import LeaseManager, LeaseLostError
    leases = LeaseManager.from_url(sys.argv[1], prefix="t")
    try:
        with leases.hold("blocked", ttl_ms=300, heartbeat_ms=100) as lease:
            print("held", lease.fencing_token, flush=True)
            sys.stdin.readline()  # the test SIGSTOPs us here, then lets us go on
            lease.wait_lost(1_000)
        print("finished")
    except LeaseLostError:
        print("lost")
    leases.close()
    """
)


def test_blocked_holder_is_not_silently_reacquired(
    redis_url: str, redis_client: redis.Redis
) -> None:
    """A holds (ttl 300, heartbeat 100) and is blocked 500 ms; B acquires and releases in the
    gap; A's next renewal finds the key gone: A ends lost and the key stays free."""
    import signal

    child = subprocess.Popen(
        [sys.executable, "-c", _PAUSED_HOLDER, redis_url],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert child.stdout is not None
        assert child.stdin is not None
        assert child.stdout.readline().split() == ["held", "1"]
        child.send_signal(signal.SIGSTOP)
        stopped = time.monotonic()
        with LeaseManager.from_url(redis_url, prefix="t") as leases:
            wait_until(
                lambda: redis_client.pttl("t:{blocked}") == -2, "Redis to expire t:{blocked}"
            )
            b = leases.acquire("blocked", ttl_ms=10_000).lease
            assert b is not None
            assert b.fencing_token == 2
            assert b.release() is True
        time.sleep(max(0.0, 0.5 - (time.monotonic() - stopped)))
        child.send_signal(signal.SIGCONT)
        child.stdin.write("\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "lost"
        assert child.wait(10) == 0
        assert redis_client.pttl("t:{blocked}") == -2
        assert redis_client.get("t:{blocked}:fence") == b"2"
    finally:
        child.kill()
        child.wait()


def test_renewer_survives_a_restart_with_aof() -> None:
    """Redis killed and restarted (AOF, appendfsync always) during a hold: the renewer reconnects,
    its scripts are reloaded (NOSCRIPT), and the hold completes without loss."""
    with RedisServer(appendonly=True, appendfsync="always") as server:
        errors: list[BaseException] = []
        with LeaseManager.from_url(server.url, prefix="t") as leases:
            with leases.hold(
                "restart", ttl_ms=2_000, heartbeat_ms=200, on_renew_error=errors.append
            ) as lease:
                wait_until(lambda: leases.renewer.round_trips >= 1, "a first renewal round trip")
                server.restart(kill=True)
                trips = leases.renewer.round_trips
                wait_until(
                    lambda: leases.renewer.round_trips >= trips + 3,
                    "three more renewal round trips",
                )
                assert not lease.lost
            assert lease.lost is False
        client = redis.Redis.from_url(server.url)
        assert client.pttl("t:{restart}") == -2
        assert client.get("t:{restart}:fence") == b"1"
        client.close()


def test_interrupt_during_acquire_leaves_nothing_held(redis_client: redis.Redis) -> None:
    """A KeyboardInterrupt after the grant but before the caller saw it: the manager releases the
    grant with that attempt's owner token and re-raises."""
    from fencedlease._sync.redis_backend import RedisBackend

    class InterruptedAfterGrant(RedisBackend):
        def acquire(self, key: str, owner_token: str, ttl_ms: int, queue: Any = ()) -> Any:
            super().acquire(key, owner_token, ttl_ms, queue)
            raise KeyboardInterrupt

    leases = LeaseManager(InterruptedAfterGrant(redis_client, "t"))
    with pytest.raises(KeyboardInterrupt):
        leases.acquire("interrupted", ttl_ms=60_000)
    assert redis_client.pttl("t:{interrupted}") == -2
    assert redis_client.get("t:{interrupted}:fence") == b"1"
