"""The release that ends a hold runs on the caller's thread once a connection of the manager's own
is ready (made in the background after the first hold, which takes the worker thread), and
keeps every property of the worker's path (bounded by the lease's deadline when Redis stops
answering: test_lifecycle.py), handed to the worker when the connection broke while idle or
the script cache was flushed, nothing kept after close() or in a forked child."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from conftest import needs_caller_releases, wait_until
from fencedlease import LeaseLostError, LeaseManager
from fencedlease._redis.caller import CallerReleases

pytestmark = [pytest.mark.live, needs_caller_releases]


class Counted:
    """Counts the releases handed to the manager's worker thread."""

    def __init__(self, leases: LeaseManager) -> None:
        self.calls = 0
        run = leases._releases.workers.run

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            return run(*args, **kwargs)

        leases._releases.workers.run = counted  # type: ignore[method-assign]


def _ready(leases: LeaseManager) -> CallerReleases:
    caller = leases._releases.caller
    assert isinstance(caller, CallerReleases)
    wait_until(lambda: caller.ready() == 1, "a connection for releases to be made")
    return caller


def _warm(leases: LeaseManager) -> CallerReleases:
    with leases.hold("warm-up", ttl_ms=10_000):
        pass
    return _ready(leases)


def test_a_holds_release_runs_on_the_callers_thread_once_a_connection_is_ready(
    redis_url: str, redis_client: redis.Redis
) -> None:
    with LeaseManager(redis.Redis.from_url(redis_url), prefix="cr") as leases:
        worker = Counted(leases)
        with leases.hold("k", ttl_ms=10_000):
            pass
        assert worker.calls == 1  # no connection ready yet: the worker thread
        caller = _ready(leases)
        for _ in range(5):
            with leases.hold("k", ttl_ms=10_000) as lease:
                assert redis_client.exists("cr:{k}") == 1
            assert (lease.lost, redis_client.exists("cr:{k}")) == (False, 0)
        assert worker.calls == 1
        assert caller.ready() == 1  # the one connection, given back after each release
    assert caller.ready() == 0  # closed with the manager
    assert caller.take() is None


def test_a_release_the_key_moved_from_reports_the_lease_lost(
    redis_url: str, redis_client: redis.Redis
) -> None:
    with LeaseManager(redis.Redis.from_url(redis_url), prefix="cr") as leases:
        _warm(leases)
        with (
            pytest.raises(LeaseLostError, match="moved"),
            leases.hold("moved", ttl_ms=10_000, heartbeat_ms=5_000) as lease,
        ):
            redis_client.set("cr:{moved}", "99:someone-else")
        assert lease.lost is True
        assert redis_client.get("cr:{moved}") == b"99:someone-else"


def test_a_connection_killed_while_idle_hands_the_release_to_the_worker(
    redis_url: str, redis_client: redis.Redis
) -> None:
    with LeaseManager(redis.Redis.from_url(redis_url), prefix="cr") as leases:
        _warm(leases)
        worker = Counted(leases)
        with leases.hold("killed", ttl_ms=10_000) as lease:
            redis_client.client_kill_filter(_type="normal", skipme=True)
        assert (lease.lost, redis_client.exists("cr:{killed}"), worker.calls) == (False, 0, 1)
        _ready(leases)  # the broken one dropped, another made in the background


def test_a_flushed_script_cache_hands_the_release_to_the_worker(
    redis_url: str, redis_client: redis.Redis
) -> None:
    with LeaseManager(redis.Redis.from_url(redis_url), prefix="cr") as leases:
        caller = _warm(leases)
        worker = Counted(leases)
        with leases.hold("flushed", ttl_ms=10_000) as lease:
            redis_client.script_flush()
        assert (lease.lost, redis_client.exists("cr:{flushed}"), worker.calls) == (False, 0, 1)
        assert caller.ready() == 1  # NOSCRIPT is a reply: the connection is in step, kept


def test_a_forked_child_forgets_the_parents_connections(redis_url: str) -> None:
    with LeaseManager(redis.Redis.from_url(redis_url), prefix="cr") as leases:
        caller = _warm(leases)
        conn = caller._idle[0]
        caller._after_fork_in_child()  # what the child runs: nothing closed, nothing kept
        assert (caller.ready(), conn.is_connected) == (0, True)
        conn.disconnect()


@pytest.mark.parametrize("kind", ["blocking-pool", "own-connection"])
def test_no_release_on_the_callers_thread_where_it_would_change_the_release(
    redis_url: str, kind: str
) -> None:
    """A blocking pool (a release waits for a connection while renewals go on) and a client of
    one connection keep the worker's path."""
    if kind == "blocking-pool":
        client = redis.Redis(connection_pool=redis.BlockingConnectionPool.from_url(redis_url))
    else:
        client = redis.Redis.from_url(redis_url, single_connection_client=True)
    with LeaseManager(client, prefix="cr") as leases:
        assert leases._releases.caller is None
        worker = Counted(leases)
        with leases.hold("k", ttl_ms=10_000) as lease:
            pass
        assert (lease.lost, worker.calls) == (False, 1)
    client.close()
