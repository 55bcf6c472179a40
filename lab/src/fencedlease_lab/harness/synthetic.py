"""Synthetic histories of a healthy fenced run over many keys, for benchmarks and tests.

[`synthetic_history`][fencedlease_lab.harness.synthetic.synthetic_history] simulates ``workers``
workers taking leases on ``keys`` keys chosen at random: each cycle is an ``acquire`` (waiting while
another worker holds the key), renewals every heartbeat while the body runs, a fenced ``read`` and
``write`` (an increment of the key's counter), the ``release`` and the ``hold``'s end, recorded
exactly as the workload records them ([`workload`][fencedlease_lab.harness.workload]), with the
deadlines mutual exclusion is judged on. The ``faults`` are recorded as the nemesis records them but
do nothing: the history passes every property (the checker must say so), and a test plants what it
wants to see caught on top. Pure: no I/O, no clock; the same arguments give the same history.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Sequence
from typing import Any

from .history import Event

__all__ = ["synthetic_history"]

_ORIGIN = 1000.0


def synthetic_history(
    *,
    ops: int,
    keys: int = 32,
    workers: int = 8,
    seed: int = 1,
    ttl_ms: int = 1000,
    faults: Sequence[tuple[str, float, float, str | None]] = (),
    quiet_s: float = 0.0,
) -> list[Event]:
    """A merged history (in time order) of about ``ops`` operations (invocations; twice as many
    events, give or take) on keys ``k00``... over ``workers`` workers ``w0``....

    ``faults``: ``(kind, start_s, end_s, target)`` seconds after the run's start, recorded only.
    ``quiet_s``: seconds between the workers' last operation and the run's stop (room for a
    test to plant events). Ends with the run's ``stop`` and a ``final`` read per key written.
    Raises ``ValueError`` for ``ops``, ``keys`` or ``workers`` below 1.
    """
    if ops < 1 or keys < 1 or workers < 1:
        raise ValueError(f"ops, keys and workers must be >= 1, got {ops}, {keys}, {workers}")
    rng = random.Random(seed)
    ttl = ttl_ms / 1000
    heartbeat = ttl / 4
    events: list[Event] = []

    def put(process: str, op: str, kind: Any, at: float, **fields: Any) -> None:
        events.append(Event(process, op, kind, _ORIGIN + at, 1e9 + at, **fields))

    put("run", "start", "info", 0.0, detail={
        "ttl_ms": ttl_ms, "heartbeat_ms": ttl_ms // 4, "margin_ms": 1000, "mode": "fenced",
        "initial": 0, "keys": keys, "workers": workers,
    })  # fmt: skip
    names = [f"k{i:02d}" for i in range(keys)]
    free_at = dict.fromkeys(names, 0.0)
    counter = dict.fromkeys(names, 0)
    value = dict.fromkeys(names, 0)
    next_id = [0] * workers
    ready = [(0.01 + 0.001 * w, w) for w in range(workers)]
    heapq.heapify(ready)
    count = 0
    last = 0.0

    def new_id(w: int) -> int:
        next_id[w] += 1
        return next_id[w] - 1

    while count < ops:
        t, w = heapq.heappop(ready)
        me, key = f"w{w}", rng.choice(names)
        grant = new_id(w)
        granted = max(t, free_at[key]) + 0.002
        counter[key] += 1
        token = counter[key]
        put(me, "acquire", "invoke", t, id=grant, key=key)
        put(me, "acquire", "ok", granted, id=grant, key=key, token=token, outcome="granted",
            detail={"deadline": _ORIGIN + granted - 0.001 + ttl})  # fmt: skip
        body = rng.uniform(0.01, 0.3)
        at = granted
        base = {"grant": grant, "key": key, "token": token}
        for name, offset in (("read", 0.001), ("write", body - 0.004)):
            op = new_id(w)
            fields = {**base, "value": value[key] + 1} if name == "write" else base
            put(me, name, "invoke", granted + offset, id=op, **fields)
            done = {**base, "value": value[key] + (name == "write")}
            put(me, name, "ok", granted + offset + 0.001, id=op, outcome="accepted", **done)
            count += 1
        value[key] += 1
        at = granted + heartbeat
        while at < granted + body - 0.002:
            op = new_id(w)
            put(me, "renew", "invoke", at, id=op, **base)
            put(me, "renew", "ok", at + 0.001, id=op, detail={"deadline": _ORIGIN + at + ttl},
                **base)  # fmt: skip
            count += 1
            at += heartbeat
        release = granted + body
        op = new_id(w)
        put(me, "release", "invoke", release, id=op, **base)
        put(me, "release", "ok", release + 0.001, id=op, **base)
        put(me, "hold", "ok", release + 0.0015, id=grant, outcome=None,
            detail={"body_end": _ORIGIN + release - 0.0005}, **base)  # fmt: skip
        count += 3
        free_at[key] = release + 0.001
        last = max(last, release + 0.0015)
        heapq.heappush(ready, (release + 0.002 + rng.uniform(0.0, 0.02), w))
    for number, (kind, start, end, target) in enumerate(faults):
        detail = {"fault": kind, **({"target": target} if target else {})}
        put("nemesis", "fault", "invoke", start, id=number, detail=detail)
        put("nemesis", "fault", "ok", end, id=number, detail=detail)
    stop = last + 0.01 + quiet_s
    put("run", "stop", "info", stop)
    for key in names:
        if counter[key]:
            put("run", "final", "ok", stop + 0.01, key=key, value=value[key])
    events.sort(key=lambda e: e.mono)
    return events
