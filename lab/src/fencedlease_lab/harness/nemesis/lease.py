"""The faults aimed at the lease protocol itself: ``evict``, ``slow-cut``, ``slow-grant`` and
``slow-handoff`` ([`faults_lease`][fencedlease_lab.harness.faults_lease])."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

from fencedlease import Lease, LeaseManager, redis_keys

from ..faults_lease import (
    HOLD_SLACK_S,
    Comeback,
    compare_and_delete,
    evict_number,
    owner_token,
    slow_replies,
    wait_for_one_waiter,
    wait_for_renewal,
    wait_for_value,
    watch_comeback,
)
from ..faults_network import one_way_toxic
from ..history import Operation
from .core import NemesisCore
from .env import FaultSpec


class LeaseActions(NemesisCore):
    """The actions of the faults aimed at the lease protocol: evictions, late replies and
    handoffs."""

    def _steer(self, victim: int, key: str) -> str | None:
        """Have one other running worker (drawn from the nemesis' seeded source) wait for
        ``key`` in its next cycle; its name, or None when there is none."""
        env = self.env
        others = [w for w in range(env.board.workers) if w != victim and env.alive(w)]
        if not others or key not in env.lease_keys:
            return None
        waiter = env.rng.choice(others)
        env.board.set(waiter, "steer", env.lease_keys.index(key) + 1)
        return env.worker_names[waiter]

    def _do_evict(
        self, spec: FaultSpec, stop: threading.Event, op: Operation, target: int | None
    ) -> None:
        env, began = self.env, time.monotonic()
        assert target is not None
        late = evict_number(self.schedule, spec.index) % 2 == 0
        env.board.set(target, "alone", int(late))  # no lane of the victim's waits for the key
        try:
            held = self._stretched(target, spec.duration_s, stop)
        finally:
            env.board.set(target, "alone", 0)
        if held is None:
            raise RuntimeError("the victim held no lease in its body to evict")
        token, key, lease_key = held
        beat = env.heartbeat_ms / 1000
        # Odd evictions of the run: a waiter is steered to the key and takes it before the
        # holder's next renewal. Even ones: no new cycle picks the key (the board's shun) and the
        # other workers' requests are held back (a latency toxic on their proxies) from the DEL
        # until the holder's next renewal ran: that renewal meets the key missing (and must not
        # set it again). Both delete right after a renewal ran.
        # The steered waiter alone may pick the key while the fault runs (the others' new
        # cycles are shunned from it, so that none takes it and releases it before the holder's
        # next renewal), and the DEL waits (at most ttl/2) until its cycle is waiting for it.
        steered = None if late else self._steer(target, key)
        waiter = None if steered is None else env.worker_names.index(steered)
        shunned = [w for w in range(env.board.workers) if w != waiter or late]
        for worker in shunned:
            env.board.set(worker, "shun", env.lease_keys.index(key) + 1)
        held_off: list[str] = []
        try:
            if waiter is not None:
                give_up = time.monotonic() + env.ttl_ms / 2000
                while env.board.get(waiter, "steer") and time.monotonic() < give_up:
                    stop.wait(0.01)
            renewed = wait_for_renewal(self._admin, lease_key, token, beat + 0.3, stop)
            with self._held_off(spec, target, held_off) if late else contextlib.nullcontext():
                value = self._admin.get(lease_key)
                deleted = value is not None and compare_and_delete(self._admin, lease_key, token)
                deleted_mono = time.monotonic()  # a renewal sent after this ran after the DEL
                # The holder's next renewal is due within a heartbeat of the one just seen.
                until = began + spec.duration_s
                if late:
                    until = min(until, deleted_mono + beat + HOLD_SLACK_S)
                back = self._comeback(lease_key, value if deleted else None, until, stop)
            if late and back is None:  # no renewal set it again: watch on, for the next owner
                back = self._comeback(
                    lease_key, value if deleted else None, began + spec.duration_s, stop
                )
        finally:
            for worker in shunned:
                env.board.set(worker, "shun", 0)
        stop.wait(max(0.0, began + spec.duration_s - time.monotonic()))
        comeback = {} if back is None else {"recreated": back.recreated, "back_mono": back.when}
        self._finish(
            op, key=key, token=token, after_renewal=renewed, deleted=deleted,
            deleted_mono=deleted_mono if deleted else None,
            next_token=None if back is None else back.token, steered=steered,
            held_off=held_off, **comeback,
        )  # fmt: skip

    def _comeback(
        self, lease_key: str, deleted: Any, until: float, stop: threading.Event
    ) -> Comeback | None:
        """What came back to ``lease_key`` after the nemesis deleted its value ``deleted`` (None:
        nothing was deleted), watched until ``until`` (monotonic seconds)."""
        if deleted is None:
            return None
        rest = max(0.0, until - time.monotonic())
        return watch_comeback(self._admin, lease_key, deleted, rest, stop)

    @contextlib.contextmanager
    def _held_off(self, spec: FaultSpec, victim: int, names: list[str]) -> Iterator[None]:
        """Hold back the requests of every running worker but ``victim`` while the block runs:
        a ``latency`` toxic of a heartbeat plus
        [`HOLD_SLACK_S`][fencedlease_lab.harness.faults_lease.HOLD_SLACK_S] on the requests of
        its proxy (no more than the ``latency`` fault's delay), so that a request sent after the
        holder's last renewal reaches Redis after its next one; removing the toxic lets what it
        held through at once. Appends the names of the workers held back to ``names``."""
        env = self.env
        name = f"nemesis-evict-hold-{spec.index}"
        toxic: dict[str, Any] = {
            "type": "latency", "name": name, "stream": "upstream",
            "attributes": {"latency": env.heartbeat_ms + round(1000 * HOLD_SLACK_S), "jitter": 0},
        }  # fmt: skip
        mine: list[tuple[int, str]] = []
        try:
            for worker in range(env.board.workers):
                proxy = env.proxies.get(worker)
                if worker == victim or proxy is None or not env.alive(worker):
                    continue
                with self._lock:
                    self._toxics[(worker, name)] = proxy
                    mine.append((worker, name))
                    proxy.add_toxic(**toxic)
                names.append(env.worker_names[worker])
            yield
        finally:
            self._remove_toxics(mine)

    def _do_slow_cut(
        self, spec: FaultSpec, stop: threading.Event, op: Operation, target: int | None
    ) -> None:
        env, began = self.env, time.monotonic()
        assert target is not None
        ttl, beat = env.ttl_ms / 1000, env.heartbeat_ms / 1000
        held = self._stretched(target, spec.duration_s + ttl, stop)
        if held is None:
            raise RuntimeError("the victim held no lease in its body to slow down")
        token, key, lease_key = held
        delay_ms = env.ttl_ms // 3
        toxic, cut = slow_replies("nemesis-slow", delay_ms), one_way_toxic("drop-requests")
        with self._toxics_in_force(spec, target, [toxic]):
            renewed = wait_for_renewal(self._admin, lease_key, token, 2 * beat + 0.3, stop)
            # Redis just ran a renewal whose reply is on its way, late. Cut the requests now:
            # that reply still comes (late, confirming the lease), no later renewal reaches
            # Redis, and the key expires a ttl after the renewal ran.
            cut_at_ms = round((time.monotonic() - began) * 1000)
            with self._toxics_in_force(spec, target, [cut]):
                steered = self._steer(target, key)  # a waiter on the key when it expires
                stop.wait(2 * ttl)
        self._finish(
            op, key=key, token=token, delay_ms=delay_ms, renewed_late=renewed,
            cut_at_ms=cut_at_ms, steered=steered,
        )  # fmt: skip

    def _do_slow_grant(
        self, spec: FaultSpec, stop: threading.Event, op: Operation, target: int | None
    ) -> None:
        env, began = self.env, time.monotonic()
        assert target is not None
        ttl = env.ttl_ms / 1000
        delay_ms = env.ttl_ms // 3
        key = self._free_key(stop)
        if key is None:
            raise RuntimeError("no free key with nobody queued for the victim to be granted")
        lease_key = redis_keys(env.prefix, key).lease
        toxic = slow_replies("nemesis-slow-grant", delay_ms)
        cut = one_way_toxic("drop-requests")
        try:
            with self._toxics_in_force(spec, target, [toxic]):
                # The victim's next cycle takes the free key at once (its reply late), and its
                # body is to outlast the cut.
                env.board.set(target, "linger", 2 * env.ttl_ms)
                env.board.set(target, "steer", env.lease_keys.index(key) + 1)
                value = wait_for_value(
                    self._admin, lease_key, ttl + delay_ms / 1000 + env.body_ms / 1000, stop
                )
                if value is None:  # only the slow replies were in force: no cut
                    for field in ("steer", "linger"):
                        env.board.set(target, field, 0)
                    self._finish(op, key=key, delay_ms=delay_ms, granted=False)
                    return
                # Redis just ran the acquire; its reply is on its way, late. Cut the requests
                # now, before the first renewal (due at once for a grant dated from the send):
                # the key expires a ttl after the acquire ran, and a worker steered to it
                # takes it then.
                with self._toxics_in_force(spec, target, [cut]):
                    cut_mono = time.monotonic()
                    self._shun(None)
                    steered = self._steer(target, key)
                    stop.wait(max(0.0, cut_mono + 2 * ttl - time.monotonic()))
        finally:
            self._shun(None)
        self._finish(
            op, key=key, token=owner_token(value), delay_ms=delay_ms,
            cut_at_ms=round((cut_mono - began) * 1000), steered=steered, granted=True,
        )  # fmt: skip

    def _free_key(self, stop: threading.Event) -> str | None:
        """A run key that is free with nobody queued for it (tried in a seeded order), shunned
        from now on by every worker, the victim too (only a cycle the nemesis steers there takes
        it: a cycle of the victim's own choosing would take it before the fault is set up):
        still free a body's length after the shun (a cycle that had picked it before is done),
        or the next is tried. None when every key was busy (nothing is left shunned)."""
        env = self.env
        settle = min(0.1, 2 * env.body_ms / 1000 + 0.01)
        for key in env.rng.sample(env.lease_keys, len(env.lease_keys)):
            keys = redis_keys(env.prefix, key)
            if self._admin.exists(keys.lease) or self._admin.zcard(keys.waiters):
                continue
            self._shun(key)
            stop.wait(settle)
            if not (self._admin.exists(keys.lease) or self._admin.zcard(keys.waiters)):
                return key
            self._shun(None)
        return None

    def _hold_free_key(
        self, ttl_ms: int, stop: threading.Event
    ) -> tuple[LeaseManager, Lease] | None:
        """Take, with the library, a lease on a ``_free_key`` (shunned by every worker): the
        manager and the lease, or None when no key was free or it was taken first (nothing is
        left shunned)."""
        env = self.env
        key = self._free_key(stop)
        if key is None:
            return None
        manager = LeaseManager(self._admin, prefix=env.prefix, fencing=env.fencing)
        lease = manager.acquire(key, ttl_ms=ttl_ms).lease
        if lease is not None and not self._admin.zcard(redis_keys(env.prefix, key).waiters):
            return manager, lease
        if lease is not None:
            lease.release()
        self._shun(None)
        manager.close()
        return None

    def _shun(self, key: str | None) -> None:
        """Have every worker shun ``key`` in its new cycles (None: none); a steered cycle goes
        to its key all the same."""
        env = self.env
        index = 0 if key is None else env.lease_keys.index(key) + 1
        for worker in range(env.board.workers):
            env.board.set(worker, "shun", index)

    def _do_slow_handoff(
        self, spec: FaultSpec, stop: threading.Event, op: Operation, target: int | None
    ) -> None:
        env, began = self.env, time.monotonic()
        assert target is not None
        ttl = env.ttl_ms / 1000
        delay_ms = env.ttl_ms // 3
        held = self._hold_free_key(4 * env.ttl_ms, stop)
        if held is None:
            raise RuntimeError("no free key with nobody queued for the nemesis to hold")
        manager, lease = held
        key, keys = lease.key, redis_keys(env.prefix, lease.key)
        slow, cut = slow_replies("nemesis-slow-handoff", delay_ms), one_way_toxic("drop-requests")
        handed: int | None = None
        steered = None
        released_mono: float | None = None
        try:
            # The victim's next cycle waits for the key: its refused acquire queues it. Its body
            # is to outlast the key's expiry, and it polls rarely (every ttl or so): it is
            # waiting for the release's message, not in a poll, when the message comes.
            env.board.set(target, "linger", 2 * env.ttl_ms)
            env.board.set(target, "retry", env.ttl_ms)
            env.board.set(target, "steer", env.lease_keys.index(key) + 1)
            waiter = wait_for_one_waiter(self._admin, keys, ttl + env.body_ms / 1000, stop)
            if waiter is None:
                for field in ("steer", "linger", "retry"):
                    env.board.set(target, field, 0)
                self._finish(op, key=key, delay_ms=delay_ms, queued=False)
                return
            owner, direct = waiter
            with self._toxics_in_force(spec, target, [slow, cut]):
                # The release hands the key to the victim (a new token, the key's TTL
                # counted from now) and publishes the grant, which reaches the victim ttl/3
                # late; no request of the victim reaches Redis from now on, so the key
                # expires a ttl after the release. A deadline counted from the message's
                # arrival outlives it by the delay; the one counted from the victim's
                # queueing send does not.
                released_mono = time.monotonic()
                lease.release()
                value = self._admin.get(keys.lease)
                if value is not None and str(value).endswith(":" + owner):
                    handed = owner_token(value)
                self._shun(None)
                steered = self._steer(target, key)  # polls for the key when it expires
                stop.wait(max(0.0, released_mono + 2 * ttl - time.monotonic()))
        finally:
            self._shun(None)
            if released_mono is None:
                lease.release()
            manager.close()
        self._finish(
            op, key=key, delay_ms=delay_ms, queued=True, direct=direct, handed=handed is not None,
            token=handed, released_ms=round((released_mono - began) * 1000), steered=steered,
        )  # fmt: skip
