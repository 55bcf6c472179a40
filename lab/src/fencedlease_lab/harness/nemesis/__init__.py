"""Nemeses: the faults a run injects, each recorded in the history with its start and its end.

Jepsen's nemesis is a process that breaks things on a schedule; here it is a thread of the run's
process, acting on a [`Schedule`][fencedlease_lab.harness.schedule.Schedule] drawn from the run's
seed: episodes one after the other, the faults of an episode each on a thread of its own,
overlapping. Each fault is one ``fault`` operation in the history: ``invoke`` when it starts
(``detail.fault`` the kind, ``detail.target`` the worker it hits, if any, ``detail.index`` its place
in the schedule) and ``ok`` when it has healed (``fail`` if it could not be done), with what it saw.

Kinds ([`FAULTS`][fencedlease_lab.harness.kinds.FAULTS]):

| kind | what it does |
| --- | --- |
| ``latency`` | Toxiproxy ``latency`` toxic on the holder's proxy (ttl/5 ± ttl/20) |
| ``partition`` | the holder's proxy disabled (listener and connections closed) |
| ``timeout`` | Toxiproxy ``timeout`` 0 on the holder's proxy: a black hole |
| ``reset-peer`` | Toxiproxy ``reset_peer``: the holder's connections get TCP RST |
| ``pause-holder`` | SIGSTOP of the holder in its critical section, SIGCONT after (GC) |
| ``redis-pause`` | SIGSTOP of redis-server, SIGCONT after |
| ``redis-restart-aof`` | SIGKILL of redis-server and a restart that replays its AOF |
| ``redis-restart-nopersist`` | the same with persistence off: Redis comes back empty |
| ``client-kill`` | ``CLIENT KILL`` of every connection of the holder |
| ``script-flush`` | ``SCRIPT FLUSH``: every cached Lua script is forgotten |
| ``clock`` | every worker's wall clock jumps +5 ttl, then -5 ttl, then strobes |
| ``kill-holder`` | SIGKILL of the holder in its critical section; a fresh worker after |
| ``drop-replies`` | ``timeout`` 0 downstream only: Redis runs the requests, replies are lost |
| ``drop-requests`` | the same on the upstream only: the requests are lost |
| ``kernel-drop`` | nftables ``drop`` of the holder's packets to and from its port |
| ``kernel-reject`` | nftables ``reject with tcp reset`` of the holder's packets |
| ``evict`` | ``DEL`` of the holder's lease key (not its counter), right after a renewal |
| ``slow-cut`` | ``latency`` ttl/3 on the holder's replies until a renewal ran; its requests cut |
| ``slow-grant`` | ``latency`` ttl/3 on a worker's replies until it is granted; its requests cut |
| ``slow-handoff`` | a key handed to a queued worker, the message ttl/3 late; its requests cut |

The last ten are made in [`faults_clock`][fencedlease_lab.harness.faults_clock],
[`faults_process`][fencedlease_lab.harness.faults_process],
[`faults_network`][fencedlease_lab.harness.faults_network],
[`netns`][fencedlease_lab.servers.netns] and
[`faults_lease`][fencedlease_lab.harness.faults_lease].

The actions live by fault family, a module each:
[`network`][fencedlease_lab.harness.nemesis.network] (the Toxiproxy faults),
[`process`][fencedlease_lab.harness.nemesis.process],
[`redis`][fencedlease_lab.harness.nemesis.redis],
[`clock`][fencedlease_lab.harness.nemesis.clock],
[`kernel`][fencedlease_lab.harness.nemesis.kernel],
[`lease`][fencedlease_lab.harness.nemesis.lease] and
[`topology`][fencedlease_lab.harness.nemesis.topology];
[`core`][fencedlease_lab.harness.nemesis.core] holds what they share (what is in force, and its
undoing), and [`driver`][fencedlease_lab.harness.nemesis.driver] runs the schedule.

One Toxiproxy proxy per worker sits between it and Redis, so a network fault cuts off one worker
alone. The victim of a fault is a worker index from the schedule (``holder`` in the table: an
episode's lead waits for its victim to enter its critical section, which makes a stale write
possible). Faults in force together compose: each undoes only its own doing (toxics are named
by the fault's index; a proxy, a worker or Redis stopped twice comes back when the last of the
two ends; each kernel cut has an nftables table of its own; a ``clock`` fault sets the wall
clocks back when it ends), and
[`Nemesis.heal_all`][fencedlease_lab.harness.nemesis.Nemesis.heal_all] undoes whatever is left when
the run ends.
"""

from __future__ import annotations

from ..kinds import (
    ALL_FAULTS,
    DEFAULT_FAULTS,
    FAULTS,
    SERVER_WIDE,
    FaultInfo,
    fault_duration_s,
    left_out_faults,
    parse_faults,
)
from .driver import Nemesis
from .env import FaultSpec, NemesisEnv, unavailable_reason

__all__ = [
    "ALL_FAULTS",
    "DEFAULT_FAULTS",
    "FAULTS",
    "SERVER_WIDE",
    "FaultInfo",
    "FaultSpec",
    "Nemesis",
    "NemesisEnv",
    "fault_duration_s",
    "left_out_faults",
    "parse_faults",
    "unavailable_reason",
]
