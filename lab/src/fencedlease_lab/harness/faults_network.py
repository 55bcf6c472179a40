"""Asymmetric partitions through Toxiproxy, and a watch on the lease in Redis while they last.

A link that loses one direction only is the cruel case (Jepsen's partitions are symmetric; a
one-way loss is what a half-dead NIC, a stateful firewall that forgot a flow, or a load balancer
does): with ``drop-replies`` the holder's requests reach Redis and run, but their replies never
come back, so Redis renews a lease whose holder hears nothing and must count it lost at its
deadline, while the key stays taken until the last renewal Redis saw runs out. ``drop-requests``
is the reverse: nothing reaches Redis, and the key expires at its TTL. Both are a Toxiproxy
``timeout`` toxic with timeout 0 (data dropped, the connection kept) on one stream only:
``downstream`` is Redis to the worker, ``upstream`` the worker to Redis.

[`watch_lease`][fencedlease_lab.harness.faults_network.watch_lease] reads the lease key straight
from Redis (not through the cut proxy) while the fault lasts: how many times its PTTL went up while
the victim still owned it (renewals Redis ran), and until when the victim owned it.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Final

import redis

__all__ = ["ONE_WAY_STREAMS", "one_way_toxic", "read_lease", "watch_lease"]

#: Fault kind -> the one stream whose data is dropped.
ONE_WAY_STREAMS: Final[dict[str, str]] = {
    "drop-replies": "downstream",
    "drop-requests": "upstream",
}

#: A PTTL that rose by more than this (milliseconds) between two readings was renewed.
_RISE_MS: Final = 20


def one_way_toxic(kind: str) -> dict[str, Any]:
    """The toxiproxy-python ``add_toxic`` arguments of ``kind`` (a key of
    [`ONE_WAY_STREAMS`][fencedlease_lab.harness.faults_network.ONE_WAY_STREAMS]): a ``timeout`` 0 on
    its stream alone."""
    stream = ONE_WAY_STREAMS[kind]
    return {
        "type": "timeout",
        "name": f"nemesis-{kind}",
        "stream": stream,
        "attributes": {"timeout": 0},
    }


def read_lease(admin: redis.Redis, lease_key: str) -> tuple[Any, int]:
    """``lease_key``'s value (None: no key) and its PTTL (milliseconds; negative: none), in one
    round trip. Raises ``redis.RedisError``."""
    pipe = admin.pipeline(transaction=False)
    pipe.get(lease_key)
    pipe.pttl(lease_key)
    value, pttl = pipe.execute()
    return value, int(pttl)


def watch_lease(
    admin: redis.Redis,
    lease_key: str,
    token: int | None,
    duration_s: float,
    stop: threading.Event,
    *,
    began: float | None = None,
    until_free: bool = False,
) -> dict[str, Any]:
    """Poll ``lease_key`` on ``admin`` (every 10 ms, for ``duration_s`` seconds or until
    ``stop``; with ``until_free``, also until the key is no longer owned with fencing
    ``token``). Returns ``{"renewed_in_redis": n, "owned_for_ms": ms}``: how many times the
    key's PTTL rose while it was ``token``'s (a renewal ran in Redis), and the last moment it
    was seen ``token``'s, in milliseconds after ``began`` (monotonic seconds; default now),
    ``None`` if it never was. A Redis error ends the watch early (counted as far as it got)."""
    began = time.monotonic() if began is None else began
    end = time.monotonic() + duration_s
    renewed = 0
    owned_for_ms: int | None = None
    last_pttl: int | None = None
    while not stop.is_set() and time.monotonic() < end:
        try:
            owner, pttl = read_lease(admin, lease_key)
        except redis.RedisError:
            break
        ours = owner is not None and token is not None and str(owner).split(":", 1)[0] == str(token)
        if ours:
            owned_for_ms = round((time.monotonic() - began) * 1000)
            if last_pttl is not None and pttl > last_pttl + _RISE_MS:
                renewed += 1
            last_pttl = int(pttl)
        else:
            last_pttl = None
            if until_free:
                break
        stop.wait(0.01)
    return {"renewed_in_redis": renewed, "owned_for_ms": owned_for_ms}
