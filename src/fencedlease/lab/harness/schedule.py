"""The fault schedule: which faults a run injects, on whom, when and for how long. Pure: no I/O.

[`draw_schedule`][fencedlease.lab.harness.schedule.draw_schedule] turns a seed into a
[`Schedule`][fencedlease.lab.harness.schedule.Schedule]: the same seed and settings give the same
schedule, byte for byte ([`Schedule.to_json`][fencedlease.lab.harness.schedule.Schedule.to_json]),
so a run can be replayed (``fencedlease check --replay report.json``). Every kind asked for appears
once per time it is asked for, in a random order, grouped into *episodes* that run one after the
other:

- an episode's first fault, its *lead*, is *aimed*: when its time comes the nemesis waits (at
  most [`Schedule.aim_ms`][fencedlease.lab.harness.schedule.Schedule.aim_ms]) for its victim, a
  worker index drawn here, to enter its critical section (for a fault with no victim: for any worker
  to be there), so that it hits a holder;
- the others start ``offset_ms`` after the lead began, inside the lead's window, whatever their
  victims are doing then: they *overlap* the lead (a partition of one worker during a latency
  toxic on another, a pause of a worker during a Redis restart, a Redis restart during a Redis
  pause). A [`LEADS_ONLY`][fencedlease.lab.harness.schedule.LEADS_ONLY] kind (``latency``) is
  always a lead: its victim holds one lease through it that must survive.

Which kinds may be in force at once is
[`may_overlap`][fencedlease.lab.harness.schedule.may_overlap]'s rule; a kind it does not know
overlaps nothing (it always leads an episode of its own). ``redis-restart-nopersist`` comes last,
alone: after it the resource refuses the new, lower tokens for the rest of the run.

Durations are drawn around [`fault_duration_s`][fencedlease.lab.harness.kinds.fault_duration_s]
(from it to 11/8 of it); instants stay instants. An episode starts a gap of one ttl after the
previous one ended, so recovery from it can be seen before the next begins.

Jepsen's generators schedule faults the same way: a seeded random mix, recorded with the run.
"""

from __future__ import annotations

import itertools
import json
import random
from collections.abc import Sequence
from typing import Any, Final

import attrs

from .kinds import FAULTS, KIND_AWARE, SLOWED_BY_LATENCY, fault_duration_s

__all__ = [
    "ALONE",
    "LAST",
    "LEADS_ONLY",
    "OVERLAPPING",
    "TOPOLOGY_FAULTS",
    "PlannedFault",
    "Schedule",
    "draw_schedule",
    "may_overlap",
    "worker_seed",
]

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
        "slow-grant",
        *TOPOLOGY_FAULTS,
    }
)  # fmt: skip

#: Kinds scheduled after all others, each alone.
LAST: Final = frozenset({"redis-restart-nopersist"})

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


def worker_seed(seed: int, index: int) -> int:
    """The seed of worker ``index``'s random source in a run of ``seed`` (a 31-bit integer)."""
    return random.Random(f"worker:{seed}:{index}").randrange(2**31)


@attrs.frozen
class PlannedFault:
    """One fault of a [`Schedule`][fencedlease.lab.harness.schedule.Schedule].

    ``index``: its place in the schedule (it also names its toxics). ``kind``: a key of
    [`FAULTS`][fencedlease.lab.harness.kinds.FAULTS]. ``target``: the victim's worker index, or
    None for a fault with no victim. ``episode``: the episode it belongs to. ``offset_ms``:
    milliseconds after its episode's lead began (0 for the lead). ``duration_ms``: how long it
    is in force (0: an instant). ``start_ms``: its planned start, milliseconds after the run
    began, had no lead waited for its victim. ``aim``: it is its episode's lead.
    """

    index: int
    kind: str
    target: int | None
    episode: int
    offset_ms: int
    duration_ms: int
    start_ms: int
    aim: bool

    @property
    def end_ms(self) -> int:
        """The planned end, milliseconds after the run began."""
        return self.start_ms + self.duration_ms


@attrs.frozen
class Schedule:
    """A run's faults and what they were drawn for.

    ``seed``: the run's seed. ``workers``, ``ttl_ms``, ``heartbeat_ms``, ``body_ms``: the run's
    settings. ``lead_ms``: when the first episode begins, after the run's start. ``gap_ms``:
    between the end of an episode and the start of the next. ``aim_ms``: the longest a lead
    waits for its victim. ``faults``: ordered by episode, then offset.
    """

    seed: int
    workers: int
    ttl_ms: int
    heartbeat_ms: int
    body_ms: int
    lead_ms: int
    gap_ms: int
    aim_ms: int
    faults: tuple[PlannedFault, ...]

    @property
    def kinds(self) -> list[str]:
        """The kinds scheduled, in schedule order."""
        return [fault.kind for fault in self.faults]

    def episodes(self) -> list[list[PlannedFault]]:
        """The faults grouped by episode, in order; a list's first fault is the lead."""
        grouped: dict[int, list[PlannedFault]] = {}
        for fault in self.faults:
            grouped.setdefault(fault.episode, []).append(fault)
        return [grouped[episode] for episode in sorted(grouped)]

    def overlaps(self) -> list[tuple[int, int]]:
        """The pairs of fault indexes whose planned windows overlap (an instant overlaps a
        window it falls in)."""

        def inside(a: PlannedFault, b: PlannedFault) -> bool:  # b starts while a is in force
            return a.start_ms <= b.start_ms < max(a.end_ms, a.start_ms + 1)

        return [
            (a.index, b.index)
            for a in self.faults
            for b in self.faults
            if a.index < b.index and (inside(a, b) or inside(b, a))
        ]

    def to_dict(self) -> dict[str, Any]:
        """The schedule as plain JSON-able data (what ``report.json`` holds)."""
        return attrs.asdict(self)

    def to_json(self) -> str:
        """The schedule as canonical JSON (sorted keys, no spaces): the same schedule gives the
        same bytes."""
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Schedule:
        """Read [`to_dict`][fencedlease.lab.harness.schedule.Schedule.to_dict]'s shape back. Raises
        ``ValueError`` for a missing field, an unknown kind or a victim out of range."""
        try:
            faults = tuple(PlannedFault(**fault) for fault in data["faults"])
            schedule = cls(**{**data, "faults": faults})
        except (KeyError, TypeError) as exc:
            raise ValueError(f"not a fault schedule: {exc}") from None
        for fault in faults:
            if fault.kind not in FAULTS:
                raise ValueError(f"unknown fault kind {fault.kind!r} in the schedule")
            if fault.target is not None and not 0 <= fault.target < schedule.workers:
                raise ValueError(f"fault {fault.index} targets worker {fault.target} of "
                                 f"{schedule.workers}")  # fmt: skip
        return schedule


def _kind_aware_victims(
    rng: random.Random, kinds: Sequence[str], worker_kinds: Sequence[str]
) -> dict[str, list[int]]:
    """For each [`KIND_AWARE`][fencedlease.lab.harness.kinds.KIND_AWARE] kind of ``kinds``, the
    victims of its faults in the order they are drawn: the n-th is a worker (drawn) of the n-th
    worker kind of a seeded order of the kinds ``worker_kinds`` holds. Empty without
    ``worker_kinds``."""
    if not worker_kinds:
        return {}
    groups: dict[str, list[int]] = {}
    for index, worker_kind in enumerate(worker_kinds):
        groups.setdefault(worker_kind, []).append(index)
    order = sorted(groups)
    victims: dict[str, list[int]] = {}
    for kind in sorted(set(kinds) & KIND_AWARE):
        rng.shuffle(order)
        victims[kind] = [
            rng.choice(groups[order[n % len(order)]]) for n in range(kinds.count(kind))
        ]
    return victims


def _duration_ms(rng: random.Random, kind: str, ttl_ms: int, heartbeat_ms: int) -> int:
    nominal = round(fault_duration_s(kind, ttl_ms, heartbeat_ms) * 1000)
    return rng.randint(nominal, nominal * 11 // 8) if nominal > 0 else 0


def draw_schedule(
    kinds: Sequence[str],
    *,
    seed: int,
    workers: int,
    ttl_ms: int,
    heartbeat_ms: int,
    body_ms: int,
    lead_ms: int,
    worker_kinds: Sequence[str] = (),
) -> Schedule:
    """Draw the schedule of ``kinds`` (each once per time it is listed) from ``seed`` for
    ``workers`` workers and leases of ``ttl_ms``/``heartbeat_ms`` with a body of ``body_ms``;
    the first episode ``lead_ms`` after the start. See the module docstring for the shape.

    ``worker_kinds``: how each worker runs (``sync``, ``threads``, ``asyncio``; one per worker,
    or empty: unknown). With them, the victims of the
    [`KIND_AWARE`][fencedlease.lab.harness.kinds.KIND_AWARE] kinds are spread over the worker
    kinds: the n-th fault of such a kind hits a worker of the n-th worker kind of a seeded order
    (cycling), so a kind listed once per worker kind hits each of them once.
    Raises ``ValueError`` for an unknown kind, fewer than one worker, or ``worker_kinds`` not
    one per worker."""
    unknown = [kind for kind in kinds if kind not in FAULTS]
    if unknown:
        raise ValueError(f"unknown fault(s) {unknown}; known: {', '.join(FAULTS)}")
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    if worker_kinds and len(worker_kinds) != workers:
        raise ValueError(f"worker_kinds names {len(worker_kinds)} workers, not {workers}")
    rng = random.Random(f"schedule:{seed}")
    rest = [kind for kind in kinds if kind not in LAST]
    rng.shuffle(rest)
    episodes: list[list[tuple[str, int | None, int, int]]] = []  # (kind, target, offset, dur)
    aimed = _kind_aware_victims(rng, kinds, worker_kinds)

    def victim(kind: str, near: int | None = None) -> int | None:
        if not FAULTS[kind].targets:
            return None
        if aimed.get(kind):
            return aimed[kind][0]  # taken off by placed() once the fault is placed
        if near is not None and rng.random() < 0.5:
            return near
        return rng.randrange(workers)

    def placed(kind: str) -> None:
        if aimed.get(kind):
            aimed[kind].pop(0)

    while rest:
        durations = [_duration_ms(rng, kind, ttl_ms, heartbeat_ms) for kind in rest]
        first = next((i for i, d in enumerate(durations) if d > 0), 0)
        kind = rest.pop(first)
        lead = (kind, victim(kind), 0, durations[first])
        placed(kind)
        members = [lead]
        wanted = rng.choice((0, 1, 1, 2, 2, 3)) if lead[3] > 0 else 0
        for other in list(rest):
            if len(members) > wanted:
                break
            if other in LEADS_ONLY:
                continue
            target = victim(other, lead[1])
            if all(may_overlap(other, target, m[0], m[1]) for m in members):
                rest.remove(other)
                placed(other)
                offset = rng.randrange(lead[3])
                members.append((other, target, offset, _duration_ms(rng, other, ttl_ms,
                                                                    heartbeat_ms)))  # fmt: skip
        episodes.append(members)
    for kind in kinds:
        if kind in LAST:
            episodes.append(
                [(kind, victim(kind), 0, _duration_ms(rng, kind, ttl_ms, heartbeat_ms))]
            )
    gap_ms = ttl_ms
    faults: list[PlannedFault] = []
    at = lead_ms
    for episode, (lead_fault, *others) in enumerate(episodes):
        members = [lead_fault, *sorted(others, key=lambda m: m[2])]
        for position, (kind, target, offset, duration) in enumerate(members):
            faults.append(
                PlannedFault(
                    len(faults), kind, target, episode, offset, duration, at + offset, position == 0
                )
            )
        at += max(m[2] + m[3] for m in members) + gap_ms
    return Schedule(
        seed=seed,
        workers=workers,
        ttl_ms=ttl_ms,
        heartbeat_ms=heartbeat_ms,
        body_ms=body_ms,
        lead_ms=lead_ms,
        gap_ms=gap_ms,
        aim_ms=max(3000, 2 * (body_ms + ttl_ms)),
        faults=tuple(faults),
    )
