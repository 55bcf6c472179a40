"""The eviction check's rules without a server: the policy read from an ``INFO memory`` reply, the
message per policy, and the once-per-backend-and-server warning."""

from __future__ import annotations

import logging
import threading
import warnings

import pytest

from fencedlease import UnsafeRedisWarning
from fencedlease._redis.eviction import EvictionCheck, policy_of, unsafe_message

ALLKEYS = (
    "fencedlease: the Redis store has maxmemory-policy allkeys-lru: a full Redis may evict a"
    " fencing counter (it has no TTL), and the next grant of its name starts again at token 1:"
    " fencing tokens are reissued; set maxmemory-policy noeviction (CONFIG SET maxmemory-policy"
    " noeviction, and in the server's configuration), or keep the library's keys on a Redis that"
    " evicts nothing"
)


def test_the_policy_is_read_from_str_or_bytes_replies() -> None:
    """``maxmemory_policy`` is found whether redis-py gave str or bytes, and None when absent."""
    assert policy_of({"used_memory": 1, "maxmemory_policy": "allkeys-lru"}) == "allkeys-lru"
    assert policy_of({b"maxmemory_policy": b"noeviction"}) == "noeviction"
    assert policy_of({"used_memory": 1}) is None


def test_each_policy_has_its_message() -> None:
    """noeviction has none; allkeys, volatile and unknown policies name their risk and the fix."""
    assert unsafe_message("noeviction", "") is None
    assert unsafe_message("allkeys-lru", "") == ALLKEYS
    assert unsafe_message("volatile-ttl", "10.0.0.1:7000") == (
        "fencedlease: the Redis primary 10.0.0.1:7000 has maxmemory-policy volatile-ttl: a full"
        " Redis may evict a held lease's key (it has a TTL) before its TTL ends, and the lease is"
        " granted again while its holder still works (the fencing counters have no TTL and"
        " stay); set maxmemory-policy noeviction (CONFIG SET maxmemory-policy noeviction, and in"
        " the server's configuration), or keep the library's keys on a Redis that evicts nothing"
    )
    assert unsafe_message("lfu-someday", "").startswith(  # type: ignore[union-attr]
        "fencedlease: the Redis store has maxmemory-policy lfu-someday: a full Redis may evict"
        " the library's keys, fencing counters included; set maxmemory-policy noeviction"
    )


def test_an_evicting_policy_is_warned_about_once_per_server(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Seen twice, a server's evicting policy warns and logs once; each finding is returned both
    times, and a second server's is warned about on its own."""
    check = EvictionCheck()
    caplog.set_level(logging.WARNING, logger="fencedlease")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = check.seen({"": "allkeys-lru"})
        second = check.seen({"": "allkeys-lru"})
    assert first == second == ("allkeys-lru", (ALLKEYS,))
    assert [(w.category, str(w.message)) for w in caught] == [(UnsafeRedisWarning, ALLKEYS)]
    assert [r.getMessage() for r in caplog.records] == [ALLKEYS]
    assert check.due is False

    cluster = EvictionCheck()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        found = cluster.seen({"a:1": "noeviction", "b:2": "allkeys-lfu", "c:3": None})
        cluster.seen({"a:1": "noeviction", "b:2": "allkeys-lfu", "c:3": "volatile-lru"})
    assert found[0] == "allkeys-lfu"
    assert [str(w.message).split(" has ")[0] for w in caught] == [
        "fencedlease: the Redis primary b:2",
        "fencedlease: the Redis primary c:3",
    ]


def test_noeviction_and_nothing_read_warn_nothing() -> None:
    """noeviction, or no field in the reply, gives no warning and no finding."""
    check = EvictionCheck()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert check.seen({"": "noeviction"}) == ("noeviction", ())
        assert check.seen({"": None}) == (None, ())
    assert caught == []


def test_the_read_is_claimed_once_until_it_must_be_done_again() -> None:
    """Of eight threads claiming at once one wins; after ``again`` one more claim wins; after
    ``skipped`` none does."""
    check = EvictionCheck()
    start = threading.Barrier(8)
    wins: list[bool] = []

    def claim() -> None:
        start.wait()
        wins.append(check.claim())

    threads = [threading.Thread(target=claim) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(wins) == [False] * 7 + [True]
    check.again(ConnectionError("reset"))
    assert (check.claim(), check.claim()) == (True, False)
    check.again(None)
    check.skipped(PermissionError("NOPERM"))
    assert (check.due, check.claim()) == (False, False)
