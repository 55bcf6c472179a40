"""The driver: [`Nemesis`][fencedlease_lab.harness.nemesis.Nemesis] runs a schedule's episodes on a
thread of its own, aims each episode's lead at its victim, and hands each fault to the action of
its family."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..history import Operation
from ..kinds import CUT_OFF, FAULTS
from ..workload import BODY, HOLDING, PHASES, WRITING
from .clock import ClockActions
from .env import FaultSpec, unavailable_reason
from .kernel import KernelActions
from .lease import LeaseActions
from .network import NetworkActions
from .process import ProcessActions
from .redis import RedisActions
from .topology import TopologyActions

if TYPE_CHECKING:
    from ..schedule import PlannedFault


class Nemesis(
    NetworkActions,
    ProcessActions,
    RedisActions,
    ClockActions,
    KernelActions,
    LeaseActions,
    TopologyActions,
):
    """Runs a [`Schedule`][fencedlease_lab.harness.schedule.Schedule] on a thread of its own.

    Episodes run one after the other, each at its planned time or the schedule's gap after the
    previous one ended, whichever is later. The lead of an episode waits (at most
    ``schedule.aim_ms``) for its victim to be in its critical section; each fault of the episode
    then starts ``offset_ms`` after the lead began, on a thread of its own, and heals after its
    ``duration_ms``, independently of the others. An episode that would not end before
    ``end_mono`` minus the gap is skipped, its faults listed in
    [`skipped`][fencedlease_lab.harness.nemesis.Nemesis.skipped].
    [`heal_all`][fencedlease_lab.harness.nemesis.Nemesis.heal_all] undoes whatever is still in force
    (it is also run when the nemesis stops).
    """

    # -- running -------------------------------------------------------------------------------

    def start(self, start_mono: float, end_mono: float, stop: threading.Event) -> None:
        """Run the schedule on a thread; its times count from ``start_mono``."""
        self._thread = threading.Thread(
            target=self._run, args=(start_mono, end_mono, stop), name="nemesis", daemon=True
        )
        self._thread.start()

    def join(self, timeout_s: float) -> None:
        """Wait for the thread (bounded), then heal everything."""
        if self._thread is not None:
            self._thread.join(timeout_s)
        self.heal_all()

    def _run(self, start_mono: float, end_mono: float, stop: threading.Event) -> None:
        try:
            ready = start_mono
            episodes = list(self.schedule.episodes())
            for number, episode in enumerate(episodes):
                at = max(start_mono + episode[0].start_ms / 1000, ready)
                if stop.wait(max(0.0, at - time.monotonic())):
                    # Every fault not begun is named, not only the first that did not fit.
                    self.skipped.extend(
                        (fault.kind, "the run ended first")
                        for later in episodes[number:]
                        for fault in later
                    )
                    return
                self._episode(episode, end_mono, stop)
                ready = time.monotonic() + self.schedule.gap_ms / 1000
        except BaseException as exc:  # recorded, never silent; the run reports it
            self.error = exc
        finally:
            self.heal_all()

    def _episode(self, faults: list[PlannedFault], end_mono: float, stop: threading.Event) -> None:
        runnable = []
        for fault in faults:
            reason = unavailable_reason(fault.kind, self.env)
            if reason is None:
                runnable.append(fault)
            else:
                self.skipped.append((fault.kind, reason))
        length = max(f.offset_ms + f.duration_ms for f in faults) / 1000
        gap = self.schedule.gap_ms / 1000

        def fits() -> bool:
            if time.monotonic() + length + gap <= end_mono:
                return True
            self.skipped.extend((f.kind, "did not fit in the run's duration") for f in runnable)
            return False

        if not runnable or not fits():
            return
        aim = self._aim(faults[0], stop)
        if stop.is_set() or not fits():
            return
        began = time.monotonic()
        threads = [
            threading.Thread(
                target=self._member,
                args=(fault, began, stop, aim if fault is faults[0] else {}),
                name=f"nemesis-{fault.index}",
                daemon=True,
            )
            for fault in runnable
        ]
        for thread in threads:
            thread.start()
        for thread in threads:  # each ends after its duration, or at once when stopped
            thread.join()

    def _member(
        self, fault: PlannedFault, began: float, stop: threading.Event, aim: dict[str, Any]
    ) -> None:
        try:
            if stop.wait(max(0.0, began + fault.offset_ms / 1000 - time.monotonic())):
                self.skipped.append((fault.kind, "the run ended first"))
                return
            self._fault(fault, stop, aim)
        except BaseException as exc:  # recorded, never silent; the run reports it
            self.error = exc

    def _fault(self, fault: PlannedFault, stop: threading.Event, aim: dict[str, Any]) -> None:
        kind, target = fault.kind, fault.target
        spec = FaultSpec(kind, fault.duration_ms / 1000, fault.index)
        action: Callable[[FaultSpec, threading.Event, Operation, int | None], None] = getattr(
            self, "_do_" + kind.replace("-", "_"), self._do_topology
        )
        board = self.env.board
        detail: dict[str, Any] = {
            "fault": kind,
            "duration_ms": fault.duration_ms,
            "index": fault.index,
            "episode": fault.episode,
            **aim,
        }
        if FAULTS[kind].needs == "redis-process" and "holder" not in detail:
            holder = self.pick_holder(0.0, (BODY,), 1e9)
            if holder is not None:
                detail["holder"] = self.env.worker_names[holder]
        token = None
        if target is not None:
            detail["target"] = self.env.worker_names[target]
            detail["phase"] = PHASES[board.get(target, "phase")]
            if not self.env.alive(target):
                detail["alive"] = False
            token = board.get(target, "token") or None
        self._in_force[fault.index] = kind
        op = self.env.writer.invoke("fault", token=token, detail=detail)
        try:
            action(spec, stop, op, target)
        except Exception as exc:
            if not op.done:
                op.fail(detail={**detail, "error": f"{type(exc).__name__}: {exc}"})
        finally:
            self._in_force.pop(fault.index, None)
            if not op.done:
                op.ok(detail=detail)
            self.done.append(kind)

    # -- choosing a victim ---------------------------------------------------------------------

    def pick_holder(
        self, wait_s: float, phases: Sequence[int] = (BODY,), fresh_ms: float = 50.0
    ) -> int | None:
        """The worker holding the lease, preferably one that entered one of ``phases`` at most
        ``fresh_ms`` milliseconds ago (a fault then falls early in its critical section, which
        makes the cases deterministic); waits up to ``wait_s`` seconds for one, then takes any
        worker in ``phases``, then any holder, then None."""
        board = self.env.board
        give_up = time.monotonic() + wait_s
        while True:
            snapshot = board.snapshot()
            now_ms = time.monotonic() * 1000
            inside = [w for w, s in enumerate(snapshot) if s["phase"] in phases and s["token"]]
            fresh = [w for w in inside if now_ms - snapshot[w]["since"] <= fresh_ms]
            if fresh:
                return self.env.rng.choice(fresh)
            if time.monotonic() >= give_up:
                if inside:
                    return self.env.rng.choice(inside)
                holders = [
                    w
                    for w, s in enumerate(snapshot)
                    if HOLDING <= s["phase"] <= WRITING and s["token"]
                ]
                return self.env.rng.choice(holders) if holders else None
            time.sleep(0.005)

    def _aim(self, lead: PlannedFault, stop: threading.Event) -> dict[str, Any]:
        """Wait (at most ``schedule.aim_ms``) for the lead's victim to enter its critical
        section, or, for a fault with no victim, for any worker to be in it. A cut-off
        (partition, timeout) waits for its victim to have just entered it, so that the body
        outlives ttl + one heartbeat after the cut and the loss notice can be timed. Returns
        the ``detail`` fields that say how it went: ``aim_ms`` waited, ``aimed`` (found)."""
        env, began = self.env, time.monotonic()
        give_up = began + self.schedule.aim_ms / 1000
        worker = lead.target
        if worker is None:
            holder = self.pick_holder(self.schedule.aim_ms / 1000, (BODY,), 1e9)
            found: dict[str, Any] = {"aimed": holder is not None}
            if holder is not None:
                found["holder"] = env.worker_names[holder]
            return {"aim_ms": round((time.monotonic() - began) * 1000), **found}
        fresh = float(env.body_ms)
        if lead.kind in CUT_OFF:
            fresh = max(50.0, env.body_ms - env.ttl_ms - 2 * env.heartbeat_ms)
        board, hit = env.board, False
        while env.alive(worker):
            since = time.monotonic() * 1000 - board.get(worker, "since")
            if board.get(worker, "phase") == BODY and board.get(worker, "token") and since <= fresh:
                hit = True
                break
            if time.monotonic() >= give_up or stop.wait(0.005):
                break
        return {"aim_ms": round((time.monotonic() - began) * 1000), "aimed": hit}
