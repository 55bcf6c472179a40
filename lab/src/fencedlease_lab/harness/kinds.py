"""The fault kinds: what each needs, how long it lasts, which a run's ``--faults`` names.

Pure: no I/O. [`nemesis`][fencedlease_lab.harness.nemesis] makes the faults and
[`schedule`][fencedlease_lab.harness.schedule] plans them, both from this table (the nemesis
re-exports it); neither imports the other at run time.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, Literal

import attrs

__all__ = [
    "ALL_FAULTS",
    "CUT_OFF",
    "DEFAULT_FAULTS",
    "DOUBTS_RELEASE",
    "FAULTS",
    "FENCINGS",
    "KIND_AWARE",
    "SERVER_WIDE",
    "SLOWED_BY_LATENCY",
    "TOPOLOGIES",
    "TOPOLOGY_DEFAULTS",
    "FaultInfo",
    "Fencing",
    "Topology",
    "default_replica_acks",
    "fault_duration_s",
    "latency_toxic_ms",
    "left_out_faults",
    "off_topology",
    "parse_faults",
]

#: Where the leases live: one redis-server, a Sentinel deployment (a primary, a replica, three
#: sentinels) or a Redis Cluster (three masters, each with a replica).
Topology = Literal["standalone", "sentinel", "cluster"]
TOPOLOGIES: Final[tuple[Topology, ...]] = ("standalone", "sentinel", "cluster")
#: How the workers' managers make tokens: the per-key counter, or ``max(counter + 1, TIME in
#: microseconds)`` (tokens that still increase after a failover lost the counter's last writes).
Fencing = Literal["counter", "clock"]
FENCINGS: Final[tuple[Fencing, ...]] = ("counter", "clock")
_ALL: Final = frozenset(TOPOLOGIES)
_STANDALONE: Final = frozenset({"standalone"})
_SENTINEL: Final = frozenset({"sentinel"})
_CLUSTER: Final = frozenset({"cluster"})


@attrs.frozen
class FaultInfo:
    """What a fault kind needs: ``"proxy"`` (Toxiproxy), ``"redis-process"`` (a redis-server we
    started), ``"restart"`` (a run that can start a worker again), ``"kernel"`` (root, ``nft``
    and a proxy per worker), ``"faketime"`` (libfaketime, preloaded into the workers) or
    ``None``; ``disrupts`` is true when it may take the lease away
    (the checker then expects a new grant within ttl + margin after it heals); ``targets``: it
    hits one worker (the holder). ``server_wide``: it acts on the whole Redis server (its
    process, its script cache, its configuration), not only on the run's own keys,
    connections, proxies and worker processes; such a fault runs only on a Redis the check
    started (see [`SERVER_WIDE`][fencedlease_lab.harness.kinds.SERVER_WIDE]). ``topologies``:
    where it can run (a kind off the run's topology is left out of the schedule); the topology
    faults need ``"sentinel"`` or ``"cluster"`` (the deployment the check started)."""

    needs: str | None
    disrupts: bool
    targets: bool
    summary: str
    server_wide: bool = False
    topologies: frozenset[str] = _STANDALONE


FAULTS: Final[dict[str, FaultInfo]] = {
    "latency": FaultInfo("proxy", False, True, "latency toxic on the holder's proxy"),
    "pause-holder": FaultInfo(
        None, True, True, "SIGSTOP the holder for 2 x ttl (a GC pause)", topologies=_ALL
    ),
    "partition": FaultInfo("proxy", True, True, "the holder's proxy disabled for 2 x ttl"),
    "client-kill": FaultInfo(None, False, True, "CLIENT KILL of the holder's connections"),
    "script-flush": FaultInfo(None, False, False, "SCRIPT FLUSH on Redis", server_wide=True),
    "timeout": FaultInfo("proxy", True, True, "black hole (timeout 0) on the holder's proxy"),
    "reset-peer": FaultInfo("proxy", True, True, "reset_peer: TCP RST on the holder's connections"),
    "redis-pause": FaultInfo(
        "redis-process", True, False, "SIGSTOP redis-server for 2 x ttl", server_wide=True
    ),
    "redis-restart-aof": FaultInfo(
        "redis-process", True, False, "kill -9 and restart with AOF", server_wide=True
    ),
    "redis-restart-nopersist": FaultInfo(
        "redis-process",
        True,
        False,
        "CONFIG SET appendonly no, kill -9 and restart without persistence",
        server_wide=True,
    ),
    "clock": FaultInfo(
        "faketime",
        False,
        False,
        "wall clocks jump +-5 ttl and strobe (no lease moves)",
        topologies=_ALL,
    ),
    # Not on a deployment: closing the dead worker's history reads its key on the lease Redis.
    "kill-holder": FaultInfo("restart", True, True, "kill -9 of the holder, a fresh worker after"),
    "drop-replies": FaultInfo("proxy", True, True, "the holder's replies lost (downstream only)"),
    "drop-requests": FaultInfo("proxy", True, True, "the holder's requests lost (upstream only)"),
    "kernel-drop": FaultInfo("kernel", True, True, "nftables drop of the holder's packets"),
    "kernel-reject": FaultInfo("kernel", True, True, "nftables reject (TCP reset) of the holder"),
    "evict": FaultInfo(None, True, True, "DEL of the lease key the holder holds (an eviction)"),
    "slow-cut": FaultInfo(
        "proxy", True, True, "latency ttl/3 on the holder's replies, then its requests cut 2 x ttl"
    ),
    "slow-grant": FaultInfo(
        "proxy", True, True, "latency ttl/3 on a worker's replies until a grant, then a 2 x ttl cut"
    ),
    # The grant carried in the message is the plain Redis hand-off's (a deployment claims).
    "slow-handoff": FaultInfo(
        "proxy", True, True, "a hand-off grant's message ttl/3 late, then the waiter's requests"
        " cut 2 x ttl",
    ),
    # Costs no lease: only the data's links are hit (some accesses then have unknown outcomes).
    "resource-link": FaultInfo(
        "resource-proxy", False, False, "the workers' links to the resource servers: replies"
        " late past the client's timeout, then cut, then reset (ttl each)",
    ),
    # The topology faults (see faults_topology): replication, failover, a deposed primary.
    "replica-lag": FaultInfo(
        "replicas", True, False, "CLIENT PAUSE WRITE on the replicas: they stop applying the"
        " primary's stream for 3 x ttl", server_wide=True, topologies=_SENTINEL | _CLUSTER,
    ),
    "sentinel-failover": FaultInfo(
        "sentinel", True, False, "SENTINEL FAILOVER: a planned failover to the replica",
        server_wide=True, topologies=_SENTINEL,
    ),
    "sentinel-kill-primary": FaultInfo(
        "sentinel", True, False, "kill -9 of the primary: an unplanned failover; the old primary"
        " restarted as a replica after", server_wide=True, topologies=_SENTINEL,
    ),
    "lag-failover": FaultInfo(
        "sentinel", True, False, "replica-lag, and one ttl into it the primary killed: the replica"
        " that missed the last writes is promoted", server_wide=True, topologies=_SENTINEL,
    ),
    "deposed-primary": FaultInfo(
        "sentinel", True, False, "the primary hidden from the sentinels (they get NOAUTH) while"
        " the workers still use it: a failover it does not hear of for 2 x ttl",
        server_wide=True, topologies=_SENTINEL,
    ),
    "cluster-failover": FaultInfo(
        "cluster", True, False, "CLUSTER FAILOVER on the replica of the first key's master",
        server_wide=True, topologies=_CLUSTER,
    ),
    "cluster-kill-master": FaultInfo(
        "cluster", True, False, "kill -9 of the first key's master: its replica takes over; the"
        " old master restarted as a replica after", server_wide=True, topologies=_CLUSTER,
    ),
}  # fmt: skip


#: The faults ``--faults default`` means on each topology (each fits a short run).
TOPOLOGY_DEFAULTS: Final[dict[str, tuple[str, ...]]] = {
    "sentinel": (
        "replica-lag", "sentinel-failover", "pause-holder", "sentinel-kill-primary",
        "deposed-primary",
    ),
    "cluster": ("replica-lag", "cluster-failover", "pause-holder", "cluster-kill-master"),
}  # fmt: skip


def default_replica_acks(topology: str) -> int:
    """``--replica-acks`` when not given: 1 on ``sentinel`` (its one replica acknowledges every
    grant and renewal, so a failover hands no counter token out twice and a deposed primary
    confirms nothing), 0 elsewhere (``standalone`` has no replica; the cluster store takes
    none)."""
    return 1 if topology == "sentinel" else 0


#: The kinds that act on the whole Redis server rather than on the run's own keys and
#: connections: ``script-flush`` (every application's cached scripts), the ``redis-*`` process
#: faults (every client of the server; ``CONFIG SET``). The others touch only what the run made:
#: its worker processes (``pause-holder``), its own Toxiproxy proxies (``latency``,
#: ``partition``, ``timeout``, ``reset-peer``) and its workers' connections, found by a client
#: name that carries the run's random id (``client-kill``).
SERVER_WIDE: Final = frozenset(kind for kind, info in FAULTS.items() if info.server_wide)

#: Faults that cut the holder off from Redis while its body goes on.
CUT_OFF: Final = frozenset(
    {"partition", "timeout", "drop-replies", "drop-requests", "kernel-drop", "kernel-reject"}
)

#: Faults that cost no lease alone but make the next renewal take more than one round trip: a
#: killed connection is opened again (connect, then the client's handshake), a flushed script
#: cache answers NOSCRIPT and the script is sent again. Through a ``latency`` toxic each round
#: trip pays the delay, so together with one on the same worker they may cost a lease.
SLOWED_BY_LATENCY: Final = frozenset({"client-kill", "script-flush"})

#: Faults that cost no lease but break the holder's connections, and so may leave a release in
#: doubt: a release whose connection breaks before its reply is sent once more on a new one, and
#: if the first had run, the second finds the key gone and answers 0; the library cannot tell
#: that from a lease lost before the release, and reports the lease lost (the safe side).
DOUBTS_RELEASE: Final = frozenset({"client-kill"})

#: The kinds whose victims the schedule spreads over the worker kinds (sync, threads, asyncio):
#: the n-th of them in a run hits a worker of the n-th kind of a seeded order, so a kind listed
#: once per worker kind hits every worker kind (see
#: [`draw_schedule`][fencedlease_lab.harness.schedule.draw_schedule]).
KIND_AWARE: Final = frozenset({"pause-holder", "evict", "slow-cut", "slow-grant"})

#: The default kinds: the first ten and ``clock`` once each, ``evict`` and ``slow-cut`` once per
#: worker kind (three times), ``slow-grant`` and ``slow-handoff`` once (the schedule puts the
#: restart without persistence last: after it the resource refuses the new, lower tokens for the
#: rest of the run), ``resource-link`` five times (each joins an episode and lengthens none: about
#: 1.3 to 2 % of the accesses end with an unknown outcome, the register check's hard case);
#: they fit in the default 55 s run. ``kill-holder``, the one-way and the kernel faults are asked
#: for by name or with ``all`` (:data:`ALL_FAULTS`).
DEFAULT_FAULTS: Final[tuple[str, ...]] = (
    "latency", "pause-holder", "partition", "client-kill", "script-flush", "timeout",
    "reset-peer", "redis-pause", "redis-restart-aof", "clock", "evict", "evict", "evict",
    "slow-cut", "slow-cut", "slow-cut", "slow-grant", "slow-handoff", "resource-link",
    "resource-link", "resource-link", "resource-link", "resource-link", "redis-restart-nopersist",
)  # fmt: skip

#: Every kind once, the restart without persistence last.
ALL_FAULTS: Final[tuple[str, ...]] = (
    *(kind for kind in FAULTS if kind != "redis-restart-nopersist"),
    "redis-restart-nopersist",
)


def latency_toxic_ms(ttl_ms: int) -> tuple[int, int]:
    """The ``latency`` fault's toxic for leases of ``ttl_ms``: ``(latency, jitter)`` in
    milliseconds, added to every reply on the holder's proxy (a reply is late by at most their
    sum)."""
    return ttl_ms // 5, ttl_ms // 20


def fault_duration_s(kind: str, ttl_ms: int, heartbeat_ms: int) -> float:
    """How long a fault of ``kind`` lasts, in seconds, for leases of ``ttl_ms``: 2 x ttl for
    pauses and cuts (the four cases the harness stages), a few heartbeats for the lighter ones, 0
    for instants."""
    ttl = ttl_ms / 1000
    beat = heartbeat_ms / 1000
    return {
        "latency": 2 * ttl,
        "pause-holder": 2 * ttl,
        "partition": 2 * ttl,
        "client-kill": 2 * beat + 0.1,  # watch the holder reconnect and renew
        "script-flush": 0.0,
        "timeout": 2 * ttl,
        "reset-peer": 2 * beat,
        "redis-pause": 2 * ttl,
        "redis-restart-aof": 0.0,
        "redis-restart-nopersist": 0.0,
        "clock": 3 * ttl,
        "kill-holder": ttl / 2,  # the fresh worker starts then; the fault ends when the key is free
        "drop-replies": 2 * ttl,
        "drop-requests": 2 * ttl,
        "kernel-drop": 2 * ttl,
        "kernel-reject": 2 * ttl,
        "evict": ttl + 2 * beat,  # the holder's next renewal is answered 0
        "slow-cut": 2 * beat + 2 * ttl,  # until a renewal ran (late reply), then the cut
        # The failovers last until the new primary serves (and has a replica again): at least
        # the time planned here, which only spaces the episodes.
        "replica-lag": 3 * ttl,
        "sentinel-failover": 2 * ttl,
        "sentinel-kill-primary": 2 * ttl,
        "lag-failover": 3 * ttl,
        "deposed-primary": 2 * ttl,
        "cluster-failover": 2 * ttl,
        "cluster-kill-master": 2 * ttl,
        "slow-grant": 3 * ttl,  # until a grant came (late reply, at most a ttl), then the cut
        # Until the victim queued (its first wait may subscribe first: a few late round trips, at
        # most two ttls), then the cut.
        "slow-handoff": 4 * ttl,
        "resource-link": 3 * ttl,  # a ttl each: late replies, a cut, resets
    }[kind]


def off_topology(faults: Sequence[str], topology: str) -> list[str]:
    """The kinds of ``faults`` (in their order, each once) that cannot run on ``topology``
    (see ``FaultInfo.topologies``)."""
    return list(dict.fromkeys(k for k in faults if topology not in FAULTS[k].topologies))


def left_out_faults(faults: Sequence[str], *, own_server: bool, allow: bool) -> list[str]:
    """The kinds of ``faults`` (in their order, each once) that must not run: the
    [`SERVER_WIDE`][fencedlease_lab.harness.kinds.SERVER_WIDE] ones when the lease Redis is not one
    the check started (``own_server`` false) and the user did not ``allow`` server faults; else
    none."""
    if own_server or allow:
        return []
    return list(dict.fromkeys(kind for kind in faults if kind in SERVER_WIDE))


def parse_faults(text: str) -> list[str]:
    """``"default"`` -> [`DEFAULT_FAULTS`][fencedlease_lab.harness.kinds.DEFAULT_FAULTS]; ``"all"``
    -> every kind ([`ALL_FAULTS`][fencedlease_lab.harness.kinds.ALL_FAULTS]); ``"none"`` -> none;
    else a comma-separated list of kinds (in that order). Raises ``ValueError`` naming an unknown
    kind."""
    text = text.strip()
    if text == "default":
        return list(DEFAULT_FAULTS)
    if text == "all":
        return list(ALL_FAULTS)
    if text in ("none", ""):
        return []
    kinds = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [kind for kind in kinds if kind not in FAULTS]
    if unknown:
        raise ValueError(f"unknown fault(s) {unknown}; known: {', '.join(FAULTS)}")
    return kinds
