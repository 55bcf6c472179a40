"""Which fault kinds may be in force at once, on the same worker or on any
([`may_overlap`][fencedlease_lab.harness.schedule.may_overlap]), and which always lead, come
last or run alone. Pure: no I/O."""

from __future__ import annotations

import itertools
from typing import Final

from ..kinds import FAULTS, SLOWED_BY_LATENCY

#: The faults of the replicated topologies (see ``faults_topology``): each overlaps the worker
#: faults of its topology (a paused or killed holder, the clock), never another of them.
TOPOLOGY_FAULTS: Final = frozenset(
    kind for kind, info in FAULTS.items() if info.needs in ("replicas", "sentinel", "cluster")
)

#: The kinds never in force with another fault: ``slow-handoff`` (its victim, the waiter steered
#: after it and Redis must all answer for the stale grant to show, and it holds a key itself,
#: shunned by every other worker).
ALONE: Final = frozenset({"slow-handoff"})

#: The kinds :func:`may_overlap` knows; any other kind is never in force with another fault.
OVERLAPPING: Final = frozenset(
    {
        "latency", "pause-holder", "partition", "client-kill", "script-flush", "timeout",
        "reset-peer", "redis-pause", "redis-restart-aof", "clock", "kill-holder", "drop-replies",
        "drop-requests", "kernel-drop", "kernel-reject", "evict", "slow-cut",
        "slow-grant", "resource-link",
        *TOPOLOGY_FAULTS,
    }
)  # fmt: skip

#: Kinds scheduled after all others, each alone.
LAST: Final = frozenset({"redis-restart-nopersist"})

#: Kinds that join an episode another kind leads (while one is left to lead): ``resource-link``
#: costs no lease, so it shares an episode with anything and adds no episode of its own.
JOINS_ONLY: Final = frozenset({"resource-link"})

#: Kinds that only lead an episode, never join one: a ``latency`` fault holds its victim in one
#: lease that must outlive it, so it is aimed (it starts when its victim holds a lease) and
#: follows a gap of one ttl with nothing that can take a lease in force on its victim or Redis.
LEADS_ONLY: Final = frozenset({"latency"})

# Never in force together, whoever the victims: a command to a paused or restarting Redis
# (CLIENT KILL, SCRIPT FLUSH; kill-holder's reads of the dead worker's key, on which closing its
# history waits) would only time out; a worker stopped while Redis is paused cannot be told of
# its loss in time, which the checker would count against the library; two clock faults would
# each set the other's wall clocks back when it ends; an eviction's DEL needs an answering Redis,
# and two evictions would fight over one stretch of the board.
_NEVER: Final = frozenset(
    frozenset(pair)
    for pair in (
        ("redis-pause", "client-kill"),
        ("redis-pause", "script-flush"),
        ("redis-restart-aof", "client-kill"),
        ("redis-restart-aof", "script-flush"),
        ("redis-pause", "pause-holder"),
        ("redis-pause", "kill-holder"),
        ("redis-restart-aof", "kill-holder"),
        ("clock", "clock"),
        ("redis-pause", "evict"),
        ("redis-restart-aof", "evict"),
        ("evict", "evict"),
        ("redis-pause", "slow-cut"),
        ("redis-restart-aof", "slow-cut"),
        ("slow-cut", "slow-cut"),
        ("redis-pause", "slow-grant"),
        ("redis-restart-aof", "slow-grant"),
        ("slow-grant", "slow-grant"),
        ("slow-cut", "slow-grant"),
        # Both make every other worker shun a key (the board's shun is one key per worker).
        ("evict", "slow-grant"),
        # Two topology faults would fight over who the primary is: a failover waits for a
        # replica another one paused, or kills the node the other is promoting.
        *itertools.combinations_with_replacement(sorted(TOPOLOGY_FAULTS), 2),
        # A latency fault holds its victim in one lease that must survive it: nothing that may
        # take a lease away is in force with it (see mutex.LEASE_KEEPING_FAULTS), nor a SCRIPT
        # FLUSH, after which a renewal pays a second slow round trip (NOSCRIPT, then the script
        # again; mutex.SLOWED_BY_LATENCY).
        *(
            ("latency", other)
            for other, info in FAULTS.items()
            if (info.disrupts or other in SLOWED_BY_LATENCY) and not info.targets
        ),
    )
)
# Never on the same worker: a stopped worker cut off from Redis cannot be told of the loss; a
# worker killed while stopped, or killed twice, has one process for two faults to end; an
# evicted holder must be running to renew and hear the 0 reply; a slow cut's delay must be the
# only fault on its victim (its replies late by a known delay, then none).
_NOT_SAME_WORKER: Final = frozenset(
    frozenset(pair)
    for pair in (
        ("pause-holder", "partition"),
        ("pause-holder", "timeout"),
        ("pause-holder", "drop-replies"),
        ("pause-holder", "drop-requests"),
        ("pause-holder", "kernel-drop"),
        ("pause-holder", "kernel-reject"),
        ("pause-holder", "kill-holder"),
        ("kill-holder", "kill-holder"),
        # An evicted holder must hold a lease when the fault comes and renew it after the DEL:
        # nothing that cuts it off or takes its lease is on it.
        *(
            ("evict", other)
            for other, info in FAULTS.items()
            if info.targets and info.disrupts and other != "evict"
        ),
        *(
            (slow, other)
            for slow in ("slow-cut", "slow-grant")
            for other, info in FAULTS.items()
            if info.targets and other != slow
        ),
        # A latency fault's lease must be lost only if the library is wrong: no other fault on
        # its victim (a killed connection's reconnect pays several slow round trips).
        *(("latency", other) for other, info in FAULTS.items() if info.targets),
    )
)


def may_overlap(kind: str, target: int | None, other: str, other_target: int | None) -> bool:
    """Whether a fault of ``kind`` on worker ``target`` may be in force while one of ``other``
    on ``other_target`` is (None: no victim). Faults on one proxy compose (each toxic has its
    own name, a proxy is enabled again when the last partition of it heals); a worker stopped
    twice resumes when both pauses have ended; a Redis restart during a Redis pause kills the
    stopped process and starts a new one (the pause ends with it); kernel cuts compose (each
    has an nftables table of its own), and with the proxy faults (the proxy listens on the host
    end of the link the rules cut); a ``clock`` fault touches only the wall clocks, so it
    composes with any other kind but itself; ``kill-holder`` composes with the network faults
    (the fresh worker starts behind whatever is in force on its proxy or link); ``evict``
    (a ``DEL`` of the holder's key) composes with the network faults of other workers and with
    a Redis that answers, never with a paused or restarting one, nor with a fault that cuts
    off, stops or kills its own victim (it must hold a lease, and renew it after the ``DEL``).
    ``slow-cut`` composes with faults on other workers and with the ones of no victim but a
    Redis pause or restart (its renewals must run in Redis, late only by its own delay).
    ``latency`` holds its victim in one lease that must outlive it, so it composes only with
    what cannot take that lease away or make a renewal pay the delay twice: faults on other
    workers and ``clock``; never another fault on its victim (a ``client-kill`` there makes the
    renewer reconnect through the slow link), a ``script-flush``, or a Redis pause, restart or
    failover."""
    if kind not in OVERLAPPING or other not in OVERLAPPING:
        return False
    pair = frozenset((kind, other))
    if pair in _NEVER:
        return False
    return not (pair in _NOT_SAME_WORKER and target is not None and target == other_target)
