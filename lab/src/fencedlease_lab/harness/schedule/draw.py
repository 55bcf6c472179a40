"""A seed turned into a schedule
([`draw_schedule`][fencedlease_lab.harness.schedule.draw_schedule]), and each worker's seed.
Pure: no I/O."""

from __future__ import annotations

import random
from collections.abc import Sequence

from ..kinds import FAULTS, KIND_AWARE, fault_duration_s
from .plan import PlannedFault, Schedule
from .rules import JOINS_ONLY, LAST, LEADS_ONLY, may_overlap


def worker_seed(seed: int, index: int) -> int:
    """The seed of worker ``index``'s random source in a run of ``seed`` (a 31-bit integer)."""
    return random.Random(f"worker:{seed}:{index}").randrange(2**31)


def _kind_aware_victims(
    rng: random.Random, kinds: Sequence[str], worker_kinds: Sequence[str]
) -> dict[str, list[int]]:
    """For each [`KIND_AWARE`][fencedlease_lab.harness.kinds.KIND_AWARE] kind of ``kinds``, the
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


def _join(
    rng: random.Random,
    episodes: list[list[tuple[str, int | None, int, int]]],
    joiners: list[str],
    ttl_ms: int,
    heartbeat_ms: int,
) -> None:
    """Add each of ``joiners`` (victimless kinds of ``JOINS_ONLY``) to a drawn episode it may be
    in force with, for as long as its lead (at most its own drawn length), so that it lengthens
    no episode; one per episode while there are enough; an episode of its own when none fits."""
    for kind in joiners:
        duration = _duration_ms(rng, kind, ttl_ms, heartbeat_ms)
        fits = [
            members
            for members in episodes
            if members[0][3] > 0 and all(may_overlap(kind, None, m[0], m[1]) for m in members)
        ]
        free = [members for members in fits if all(m[0] != kind for m in members)]
        if not fits:
            episodes.append([(kind, None, 0, duration)])
            continue
        members = rng.choice(free or fits)
        members.append((kind, None, 0, min(duration, members[0][3])))


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
    [`KIND_AWARE`][fencedlease_lab.harness.kinds.KIND_AWARE] kinds are spread over the worker
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
    rest = [kind for kind in kinds if kind not in LAST and kind not in JOINS_ONLY]
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
    _join(rng, episodes, [k for k in kinds if k in JOINS_ONLY], ttl_ms, heartbeat_ms)
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
