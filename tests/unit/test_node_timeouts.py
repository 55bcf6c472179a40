"""A replicated deployment's clients made from a URL give a silent node up: a connect within
``NODE_CONNECT_TIMEOUT_S``, a read within ``NODE_SOCKET_TIMEOUT_S``, unless the caller says
otherwise; no server needed."""

from __future__ import annotations

import asyncio
from typing import Any

from fencedlease import LeaseManager
from fencedlease._redis.options import (
    NODE_CONNECT_TIMEOUT_S,
    NODE_SOCKET_TIMEOUT_S,
    with_node_timeouts,
)
from fencedlease._redis.sentinel import sentinel_clients
from fencedlease.aio import AsyncLeaseManager

BOUNDS = {"socket_connect_timeout": 1.0, "socket_timeout": 5.0}


def _timeouts(kwargs: dict[str, Any]) -> dict[str, Any]:
    return {name: kwargs.get(name) for name in BOUNDS}


def test_the_bounds_fill_only_what_the_caller_left() -> None:
    """Defaults go where no timeout is named, in ``sentinel_kwargs`` too; a named one (None
    included) is kept."""
    assert (NODE_CONNECT_TIMEOUT_S, NODE_SOCKET_TIMEOUT_S) == (1.0, 5.0)
    assert with_node_timeouts({"password": "pw"}) == {"password": "pw", **BOUNDS}
    assert with_node_timeouts({"socket_timeout": None, "socket_connect_timeout": 3}) == {
        "socket_timeout": None,
        "socket_connect_timeout": 3,
    }
    assert with_node_timeouts({"sentinel_kwargs": {"password": "s", "socket_timeout": 2}}) == {
        **BOUNDS,
        "sentinel_kwargs": {"password": "s", "socket_connect_timeout": 1.0, "socket_timeout": 2},
    }


def test_a_sentinel_url_bounds_the_primary_and_every_sentinel() -> None:
    """The primary's connections and each sentinel's are bounded; a timeout the caller gives
    wins."""
    with LeaseManager.from_url("redis+sentinel://127.0.0.1:1,127.0.0.1:2/svc") as manager:
        client = manager.backend.client  # type: ignore[attr-defined]
        assert _timeouts(client.connection_pool.connection_kwargs) == BOUNDS
        sentinels = sentinel_clients(client)
        assert [_timeouts(s.connection_pool.connection_kwargs) for s in sentinels] == [BOUNDS] * 2
    with LeaseManager.from_url("redis+sentinel://127.0.0.1:1/svc", socket_timeout=7) as manager:
        client = manager.backend.client  # type: ignore[attr-defined]
        assert _timeouts(client.connection_pool.connection_kwargs) == {
            "socket_connect_timeout": 1.0,
            "socket_timeout": 7,
        }


def test_a_cluster_url_bounds_every_node() -> None:
    """The cluster client's node connections are bounded (the asyncio client connects at its
    first command: no server needed); the URL's own timeout wins."""

    async def main() -> list[dict[str, Any]]:
        seen = []
        for url in ("redis+cluster://127.0.0.1:1", "redis+cluster://127.0.0.1:1/?socket_timeout=2"):
            async with AsyncLeaseManager.from_url(url) as manager:
                cluster = manager.backend.cluster  # type: ignore[attr-defined]
                seen.append(_timeouts(cluster.nodes_manager.connection_kwargs))
        return seen

    assert asyncio.run(main()) == [BOUNDS, {"socket_connect_timeout": 1.0, "socket_timeout": 2.0}]
