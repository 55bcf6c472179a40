"""A semaphore renewal batch on a cluster goes out as one script per hash slot, and its replies
are merged back in batch order (pure: `renew_calls`, `merge_calls`, both faces')."""

from __future__ import annotations

import pytest

from fencedlease import BackendError
from fencedlease._redis.semaphore import merge_calls, renew_calls

ITEMS = [("pool-a", "o1", 1_000), ("pool-zz", "o2", 1_000), ("pool-a", "o3", 1_000)]


class Cluster:
    nodes_manager = object()


def test_one_call_on_a_server_and_one_per_hash_slot_on_a_cluster() -> None:
    """All items in one call on a Redis server; on a cluster, one call per hash slot, each
    call's indices in batch order."""
    assert renew_calls("p", ITEMS, object()) == [[0, 1, 2]]
    assert renew_calls("p", ITEMS, Cluster()) == [[0, 2], [1]]


def test_replies_are_merged_in_batch_order_and_a_failed_call_stands_in_its_places() -> None:
    """Each call's replies land at its indices; a failed call's error stands in each of its
    places; when every call failed, the first error is raised."""
    error = BackendError("semaphore renew 1 slots: down")
    assert merge_calls(3, [[0, 2], [1]], [[7, 0], error]) == [7, error, 0]
    first = BackendError("first")
    with pytest.raises(BackendError) as info:
        merge_calls(3, [[0, 2], [1]], [first, BackendError("second")])
    assert info.value is first
