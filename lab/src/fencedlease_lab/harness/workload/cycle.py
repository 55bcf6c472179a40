"""One lease cycle's bookkeeping, shared by the sync and the asyncio workers: the choices, the
acquire and hold operations in the history, the board slot the worker's lanes share, each
access to the resource as an invoke/completion pair, and how a failure ends the cycle."""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from typing import Any, Literal

from fencedlease import BackendError, LeaseLostError, LeaseNotAcquiredError, StaleTokenError

from ..history import HistoryWriter, Operation
from ..recorder import Recorder
from .board import ACQUIRING, BODY, HOLDING, IDLE, Board
from .config import WorkerConfig, pick, unshunned

#: The cycle each worker index of this process shows on the board (lanes share the slot).
_shown: dict[int, Cycle] = {}
_shown_lock = threading.Lock()
#: How many cycles of this process are acquiring or holding each key (under ``_shown_lock``).
_in_use: Counter[str] = Counter()


class Cycle:
    """The bookkeeping of one lease cycle, shared by the sync and the asyncio workers (only the
    waiting differs): the choices ([`pick`][fencedlease_lab.harness.workload.pick]), the acquire
    operation (routed to the recorder), the board, the hold operation, and how a failure ends the
    cycle.

    The lanes of a ``threads`` or ``asyncio`` worker share its board slot: a cycle shows itself
    when the slot is free, and a granted cycle takes it from one that only acquires, so that a
    holder is never hidden by another lane (the nemesis aims at the holder the board shows)."""

    def __init__(
        self,
        config: WorkerConfig,
        board: Board,
        recorder: Recorder,
        rng: random.Random,
        *,
        stale: bool = False,
        prefer: str | None = None,
    ) -> None:
        self.config, self.board, self.rng = config, board, rng
        self.writer = recorder.writer
        self.stale = stale  # a stale writer's cycle: off the board, never steered
        self.key, self.wait_ms = pick(config, rng)
        if prefer is not None:  # the key of a write put off: wait for it, a ttl/2 at most
            self.key, self.wait_ms = prefer, config.ttl_ms // 2
        self.key = unshunned(config.keys, self.key, board.get(config.index, "shun"))
        steered, self.linger_ms, self.retry_ms = (None, 0, 0) if stale else self._steered()
        self.steered = steered is not None
        if stale and prefer is None:
            self.wait_ms = 0
        if steered is not None:
            self.key, self.wait_ms = steered, config.wait_ms
        with _shown_lock:
            _in_use[self.key] += 1
        self.token: int | None = None
        self._show(ACQUIRING, take=False)
        detail: dict[str, Any] = {"wait_ms": self.wait_ms}
        if steered is not None:
            detail["steered"] = True
        if stale:
            detail["stale_writer"] = True
        self.acquire = self.writer.invoke("acquire", key=self.key, detail=detail)
        self.grant = self.acquire.id
        self.hold: Operation | None = None
        self.body_end: float | None = None
        self.stretched_until = 0.0
        recorder.expect(self.acquire)

    def _steered(self) -> tuple[str | None, int, int]:
        """The key the nemesis steered this worker to (taken: the board's ``steer``,
        ``linger`` and ``retry`` are reset), or None; the milliseconds its body is to last at
        least, and its retry delay (0: the defaults). The seeded choice is drawn all the same,
        so the other cycles stay as drawn."""
        me, keys = self.config.index, self.config.keys
        with _shown_lock:
            steer = self.board.get(me, "steer")
            if steer <= 0:
                return None, 0, 0
            linger, retry = self.board.get(me, "linger"), self.board.get(me, "retry")
            for field in ("steer", "linger", "retry"):
                self.board.set(me, field, 0)
        return (keys[steer - 1] if steer <= len(keys) else None), linger, retry

    def hold_args(self) -> dict[str, Any]:
        """The keyword arguments of the cycle's ``hold``."""
        config = self.config
        return {
            "ttl_ms": config.ttl_ms, "wait_ms": self.wait_ms,
            "retry_delay_ms": self.retry_ms or 50,
            "heartbeat_ms": config.heartbeat_ms,
        }  # fmt: skip

    def _show(self, phase: int, *, take: bool) -> None:
        """Enter ``phase`` on the board if this cycle is shown there, or the slot is free, or
        ``take`` and the cycle shown holds no lease; never for a stale writer's cycle."""
        if self.stale:
            return
        me = self.config.index
        with _shown_lock:
            shown = _shown.get(me)
            if shown is not self:
                if shown is not None and not (take and shown.token is None):
                    return
                _shown[me] = self
                take = True  # newly shown: its key and token too
            if take:
                self.board.set(me, "key", self.config.keys.index(self.key))
                self.board.set(me, "token", self.token or 0)
            self.board.set_phase(me, phase)

    def phase(self, phase: int) -> None:
        """Enter ``phase`` (on the board if shown). A steered cycle's body lasts two heartbeats
        at least: it holds the key a fault freed when the holder it was taken from next renews
        (so that a renewal of another owner's key shows); or the board's ``linger`` taken with
        the steer, when longer."""
        if phase == BODY and self.steered:
            least_s = max(2 * self.config.heartbeat_ms, self.linger_ms) / 1000
            self.stretched_until = max(self.stretched_until, time.monotonic() + least_s)
        self._show(phase, take=False)

    def body_left(self, until: float) -> float:
        """Seconds the body has left to run (it ends at ``until``, monotonic seconds, unless
        stretched): a stretch the nemesis put on the board for this worker is taken by the cycle
        it shows, and moves ``until`` to now plus the stretch. Called in slices of at most 20
        ms, so that a stretch asked for during the body is taken, and so that a paused worker
        (SIGSTOP) wakes as soon as it is resumed if its body is over (one long ``time.sleep``
        does not promise that: on Python 3.10 it slept on the time left at the stop)."""
        me, now = self.config.index, time.monotonic()
        with _shown_lock:
            alone = _in_use[self.key] == 1 or not self.board.get(me, "alone")
            stretch = self.board.get(me, "stretch") if _shown.get(me) is self and alone else 0
            if stretch > 0:
                self.board.set(me, "stretch", 0)
                self.stretched_until = max(self.stretched_until, now + stretch / 1000)
        return max(until, self.stretched_until) - now

    def granted(self, token: int | None) -> None:
        """The lease is held (``token``): the board, and the hold operation."""
        me = self.config.index
        self.token = token
        if not self.acquire.done:  # the event hook records it; never twice
            self.acquire.ok(token=token, outcome="granted")
        self._show(HOLDING, take=True)
        self.board.bump(me, "grants")
        self.hold = Operation(
            self.writer, "hold", self.grant, {"grant": self.grant, "key": self.key, "token": token}
        )

    def access(self, op: str, value: int | None, action: Any) -> Any:
        """One access to the resource
        ([`access`][fencedlease_lab.harness.workload.Cycle.access])."""
        return access(
            self.writer, self.board, self.config.index, op, self.grant, self.key, self.token,
            value, action,
        )  # fmt: skip

    def read(self, store: Any, lease: Any) -> int:
        """Read the key's counter (fenced in ``fenced`` mode only)."""
        fenced = self.config.mode == "fenced"
        return int(self.access("read", None, lambda: store.read(lease, fenced=fenced)))

    def recheck(self, store: Any, lease: Any) -> None:
        """On a strict store in ``fenced`` mode, a ``recheck`` before the write: the token its
        read had accepted, presented once more in strict mode; the store must refuse it (``ok``
        with outcome ``refused``; an ``accepted`` recheck is a violation of property ``a``).
        Nothing on any other store."""
        strict_key = getattr(store, "strict_key", None)
        if self.config.mode == "fenced" and strict_key is not None and strict_key(self.key):
            check = self.writer.invoke("recheck", grant=self.grant, key=self.key, token=self.token)
            try:
                again = bool(store.recheck(lease))
            except BackendError as exc:
                check.info(outcome="backend-error", detail={"error": _describe(exc)})
                raise
            check.ok(outcome="accepted" if again else "refused")

    def write(self, store: Any, lease: Any, value: int) -> None:
        """Write ``value`` to the key's counter (fenced unless ``unfenced``), after its
        `recheck` (the asyncio worker runs the two as separate store calls instead, so that a
        loss notice between them cancels the write: `write_only`)."""
        self.recheck(store, lease)
        self.write_only(store, lease, value)

    def write_only(self, store: Any, lease: Any, value: int) -> None:
        """The write of `write`, without the recheck."""
        fenced = self.config.mode != "unfenced"
        self.access("write", value, lambda: store.write(value, lease, fenced=fenced))

    def expired(self) -> None:
        """The end of a stale writer's hold whose late write was accepted: ``fail`` ``expired``
        (its lease had run out unrenewed before the write; the library was not asked)."""
        assert self.hold is not None
        self.hold.fail(
            outcome="expired",
            detail={"body_end": self.body_end, "error": "the lease ran out before the write"},
        )

    def completed(self) -> None:
        assert self.hold is not None
        self.hold.ok(detail={"body_end": self.body_end})

    def failed(self, exc: Exception) -> float:
        """Record how ``exc`` ended the cycle; the seconds to pause before the next one (a
        store that is down is not hammered)."""
        board, me, rng = self.board, self.config.index, self.rng
        hold, acquire, body_end = self.hold, self.acquire, self.body_end
        if isinstance(exc, LeaseNotAcquiredError) and hold is None:
            if not acquire.done:
                acquire.fail(outcome="not-acquired")
            return rng.uniform(0.005, 0.02) if self.wait_ms == 0 else 0.0
        if isinstance(exc, LeaseLostError):
            board.bump(me, "lost")
            end_cycle(hold, acquire, "fail", "lease-lost", exc, body_end)
            return 0.0
        if isinstance(exc, StaleTokenError):
            end_cycle(hold, acquire, "fail", "stale", exc, body_end)
            return 0.0
        board.bump(me, "errors")
        if isinstance(exc, BackendError):
            end_cycle(hold, acquire, "info", "backend-error", exc, body_end)
            return rng.uniform(0.05, 0.15)  # Redis or the store may be down: do not spin
        end_cycle(hold, acquire, "info", "error", exc, body_end)  # recorded, not fatal
        return rng.uniform(0.02, 0.08)

    def finish(self) -> None:
        me = self.config.index
        with _shown_lock:
            _in_use[self.key] -= 1
            if _in_use[self.key] <= 0:
                del _in_use[self.key]
            if _shown.get(me) is not self:
                return
            del _shown[me]
            self.board.set(me, "token", 0)
            self.board.set_phase(me, IDLE)


def end_cycle(
    hold: Operation | None,
    acquire: Operation,
    kind: Literal["fail", "info"],
    outcome: str,
    exc: BaseException,
    body_end: float | None,
) -> None:
    """Complete the hold (or, if nothing was acquired, the acquire) with ``kind``."""
    fields: dict[str, Any] = {"outcome": outcome, "detail": {"error": _describe(exc)}}
    if hold is None:
        if not acquire.done:
            getattr(acquire, kind)(**fields)
        return
    fields["detail"]["body_end"] = body_end
    getattr(hold, kind)(**fields)


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def access(
    writer: HistoryWriter,
    board: Board,
    me: int,
    op: str,
    grant: int,
    key: str,
    token: int | None,
    value: int | None,
    action: Any,
) -> Any:
    """Run one access to the resource as an invoke/completion pair; re-raise its error."""
    access = writer.invoke(op, grant=grant, key=key, token=token, value=value)
    try:
        result = action()
    except StaleTokenError as exc:
        board.bump(me, "refused")
        access.fail(outcome="stale", detail={"error": _describe(exc), "last": exc.last_token})
        raise
    except BackendError as exc:
        access.info(outcome="backend-error", detail={"error": _describe(exc)})
        raise
    if op == "write":
        board.bump(me, "acked")
        access.ok(outcome="accepted")
        return None
    access.ok(outcome="accepted", value=int(result))
    return result
