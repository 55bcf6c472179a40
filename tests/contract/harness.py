"""Stores for the contract suite, and the model-based state machine every backend must pass.

A :class:`Store` is a backend plus a way to let time pass on it: a :class:`FakeClock` for memory and
SQLite; for Redis, ``PEXPIRE`` lowers every lease's remaining TTL by the same amount, which is what
time passing would do, without waiting. ``tick_ms`` is the smallest step a case may rely on (1 ms
on a fake clock; 1 s on Redis, whose TTLs keep running in real time between two commands), and
``slack_ms`` how far a remaining TTL may have drifted below the exact value.
"""

from __future__ import annotations

import asyncio
import functools
import time
import uuid
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import redis
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from fencedlease import LeaseBackend, LeaseManager, RedisBackend
from fencedlease._core.backend import AsyncLeaseBackend, RenewItem
from fencedlease._core.clock import SYSTEM_CLOCK, Clock
from fencedlease._core.protocol import AcquireReply, GrantExtras, InspectReply, owner_fingerprint
from fencedlease._redis.keys import lease_key
from fencedlease.backends import (
    AsyncMemoryBackend,
    AsyncSqliteBackend,
    MemoryBackend,
    SqliteBackend,
)
from fencedlease.testing import FakeClock

__all__ = [
    "KEYS",
    "OWNERS",
    "Store",
    "SyncOverAsync",
    "async_memory_store",
    "async_redis_store",
    "async_sqlite_store",
    "machine_class",
    "memory_store",
    "redis_store",
    "run_machine",
    "sqlite_store",
]

T = TypeVar("T")

# Lowers the remaining TTL of one lease key (or its grant details) as if ARGV[1] ms had passed;
# deletes it at 0.
_ADVANCE_LUA = """
local pttl = redis.call('PTTL', KEYS[1])
if pttl < 0 then return 0 end
local left = pttl - tonumber(ARGV[1])
if left <= 0 then redis.call('DEL', KEYS[1]) else redis.call('PEXPIRE', KEYS[1], left) end
return 1
"""


@dataclass
class Store:
    """A backend under test and how to move its time."""

    name: str
    backend: LeaseBackend
    clock: Clock
    advance: Callable[[int], None]
    tick_ms: int
    slack_ms: int
    close: Callable[[], None] = field(default=lambda: None)

    def manager(self) -> LeaseManager:
        """A manager over this store's backend, on its clock (closing it closes the backend)."""
        return LeaseManager(self.backend, clock=self.clock)


def memory_store() -> Store:
    clock = FakeClock()
    backend = MemoryBackend(clock=clock)
    return Store("memory", backend, clock, clock.advance, 1, 0, backend.close)


def sqlite_store(path: Path, prefix: str = "contract") -> Store:
    clock = FakeClock()
    backend = SqliteBackend(path, prefix=prefix, clock=clock)
    return Store("sqlite", backend, clock, clock.advance, 1, 0, backend.close)


def redis_store(client: redis.Redis, prefix: str = "contract") -> Store:
    backend = RedisBackend(client, prefix)
    script = client.register_script(_ADVANCE_LUA)
    pattern = lease_key(prefix, "*")

    def advance(ms: int) -> None:
        for name in client.scan_iter(match=pattern + "*"):
            text = name.decode() if isinstance(name, bytes) else name
            if not text.endswith(("}", "}:grant")):
                continue  # a ":fence" counter has no TTL and must keep its value
            script(keys=[name], args=[ms])

    return Store("redis", backend, SYSTEM_CLOCK, advance, 1_000, 500, backend.close)


class SyncOverAsync:
    """An :class:`AsyncLeaseBackend` driven through the sync contract on one event loop of its own,
    so the contract cases run unchanged over the asyncio twins."""

    def __init__(self, backend: AsyncLeaseBackend) -> None:
        self.backend = backend
        self._loop = asyncio.new_event_loop()

    def _wait(self, step: Coroutine[Any, Any, T]) -> T:
        return self._loop.run_until_complete(step)

    def acquire(self, key: str, owner_token: str, ttl_ms: int) -> AcquireReply:
        return self._wait(self.backend.acquire(key, owner_token, ttl_ms))

    def acquire_with_extras(
        self, key: str, owner_token: str, ttl_ms: int, extras: GrantExtras | None
    ) -> AcquireReply:
        grant = getattr(self.backend, "acquire_with_extras")  # noqa: B009  (optional, not typed)
        reply: AcquireReply = self._wait(grant(key, owner_token, ttl_ms, extras))
        return reply

    def renew(self, key: str, owner_token: str, ttl_ms: int) -> int:
        return self._wait(self.backend.renew(key, owner_token, ttl_ms))

    def renew_many(self, items: Sequence[RenewItem]) -> list[int | BaseException]:
        return self._wait(self.backend.renew_many(items))

    def release(self, key: str, owner_token: str) -> bool:
        return self._wait(self.backend.release(key, owner_token))

    def inspect(self, key: str) -> InspectReply | None:
        return self._wait(self.backend.inspect(key))

    def force_release(self, key: str) -> bool:
        return self._wait(self.backend.force_release(key))

    def close(self) -> None:
        if not self._loop.is_closed():
            self._wait(self.backend.close())
            self._loop.close()


def async_memory_store() -> Store:
    clock = FakeClock()
    backend = SyncOverAsync(AsyncMemoryBackend(clock=clock))
    return Store("memory-async", backend, clock, clock.advance, 1, 0, backend.close)


def async_sqlite_store(path: Path, prefix: str = "contract") -> Store:
    clock = FakeClock()
    backend = SyncOverAsync(AsyncSqliteBackend(path, prefix=prefix, clock=clock))
    return Store("sqlite-async", backend, clock, clock.advance, 1, 0, backend.close)


def async_redis_store(client: redis.Redis, url: str, prefix: str = "contract") -> Store:
    """The asyncio Redis backend, with time moved through the sync ``client`` on the same db."""
    import redis.asyncio

    from fencedlease._async.redis_backend import AsyncRedisBackend

    backend = SyncOverAsync(
        AsyncRedisBackend(redis.asyncio.Redis.from_url(url), prefix, owns_client=True)
    )
    advance = redis_store(client, prefix).advance
    return Store("redis-async", backend, SYSTEM_CLOCK, advance, 1_000, 500, backend.close)


# -- the model ----------------------------------------------------------------------------------

KEYS = ("a", "b{1}")
OWNERS = ("owner-1", "owner-2", "owner-3")


@dataclass
class Grant:
    """What the model knows of the lease on a key: holder, token, and when it expires.

    The expiry is known to lie in ``[lo, hi]`` (ms on :meth:`Timing.now`). On a fake clock the
    bounds coincide; on a real one they span the round trip that set them, widened by the slack.
    """

    owner: str
    token: int
    lo: float
    hi: float


class Timing:
    """How a state machine reads and moves time on a store."""

    def __init__(self, now: Callable[[], float], advance: Callable[[int], None], slack_ms: float):
        self.now = now
        self.advance = advance
        self.slack_ms = slack_ms


ALIVE, DEAD, UNSURE = "alive", "dead", "unsure"


def machine_class(
    name: str,
    open_store: Callable[[], tuple[Store, Timing]],
    ttl_ms: st.SearchStrategy[int],
    advance_ms: st.SearchStrategy[int],
) -> type[RuleBasedStateMachine]:
    """A state machine driving acquire, renew, release, restore, force_release and time against a
    small model of the contract. ``open_store()`` gives a fresh store (counters at zero) per run.

    Invariants, checked after every step: at most one unexpired holder per key (from the backend's
    own grants); tokens strictly increase per key; renew never changes a token; an operation by a
    non-owner never changes what ``inspect`` shows; ``inspect`` agrees with the model.
    """

    class BackendMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.store, self.timing = open_store()
            self.manager = self.store.manager()
            self.holder: dict[str, Grant | None] = dict.fromkeys(KEYS)
            self.counter: dict[str, int] = dict.fromkeys(KEYS, 0)
            self.issued: dict[str, list[int]] = {key: [] for key in KEYS}
            # owner -> earliest expiry of its claim, per key, as the backend's replies granted it
            self.claims: dict[str, dict[str, float]] = {key: {} for key in KEYS}
            # owner -> the last token the backend gave it, per key (what a caller would persist)
            self.persisted: dict[tuple[str, str], int] = {}

        def teardown(self) -> None:
            self.manager.close()
            self.store.close()

        # -- helpers ---------------------------------------------------------------------------

        def status(self, key: str, start: float, end: float) -> str:
            grant = self.holder[key]
            if grant is None or start >= grant.hi:
                return DEAD
            if end < grant.lo:
                return ALIVE
            return UNSURE

        def granted(self, key: str, owner: str, token: int, ttl: int, s: float, r: float) -> None:
            slack = self.timing.slack_ms
            self.holder[key] = Grant(owner, token, s + ttl - slack, r + ttl + slack)
            self.claims[key][owner] = s + ttl - slack
            self.persisted[key, owner] = token

        def new_grant(self, key: str, token: int) -> None:
            assert token == self.counter[key] + 1, (token, self.counter[key])
            assert all(token > earlier for earlier in self.issued[key])
            self.counter[key] = token
            self.issued[key].append(token)

        def ended(self, key: str) -> None:
            self.holder[key] = None

        def snapshot(self, key: str) -> InspectReply | None:
            return self.store.backend.inspect(key)

        def assert_unchanged(
            self, key: str, before: InspectReply | None, after: InspectReply | None
        ) -> None:
            """A non-owner's operation left the key as it was (bar real time passing)."""
            if self.timing.slack_ms == 0:
                assert after == before
                return
            if before is None:
                assert after is None
            elif after is not None:
                assert (after.fencing_token, after.owner_fingerprint, after.last_issued_token) == (
                    before.fencing_token,
                    before.owner_fingerprint,
                    before.last_issued_token,
                )
                assert after.ttl_ms <= before.ttl_ms  # never extended

        def assert_ttl(self, ttl_ms: int, grant: Grant, start: float, end: float) -> None:
            """A remaining TTL the backend reported is the model's (exactly, on a fake clock)."""
            rounding = 0 if self.timing.slack_ms == 0 else 1
            assert grant.lo - end - rounding <= ttl_ms <= grant.hi - start + rounding, (
                ttl_ms,
                grant,
                start,
                end,
            )

        def timed(self, fn: Callable[[], T]) -> tuple[T, float, float]:
            start = self.timing.now()
            result = fn()
            return result, start, self.timing.now()

        # -- rules -----------------------------------------------------------------------------

        @rule(key=st.sampled_from(KEYS), owner=st.sampled_from(OWNERS), ttl=ttl_ms)
        def acquire(self, key: str, owner: str, ttl: int) -> None:
            grant = self.holder[key]
            ours = grant is not None and grant.owner == owner
            before = self.snapshot(key)
            reply, s, r = self.timed(lambda: self.store.backend.acquire(key, owner, ttl))
            status = self.status(key, s, r)
            assert reply.acquired in ((True,) if status == DEAD or ours else (True, False))
            if status == ALIVE and not ours:
                assert not reply.acquired
            if not reply.acquired:
                assert reply.fencing_token == 0
                assert grant is not None
                self.assert_ttl(reply.ttl_ms, grant, s, r)
                self.assert_unchanged(key, before, self.snapshot(key))
                return
            assert reply.ttl_ms == ttl
            if reply.retried:
                assert ours
                assert status != DEAD
                assert grant is not None
                assert reply.fencing_token == grant.token
            else:
                assert status != ALIVE or not ours, "a holder's retry was taken for a new grant"
                self.new_grant(key, reply.fencing_token)
            self.granted(key, owner, reply.fencing_token, ttl, s, r)

        @rule(key=st.sampled_from(KEYS), owner=st.sampled_from(OWNERS), ttl=ttl_ms)
        def renew(self, key: str, owner: str, ttl: int) -> None:
            grant = self.holder[key]
            before = self.snapshot(key)
            token, s, r = self.timed(lambda: self.store.backend.renew(key, owner, ttl))
            status = self.status(key, s, r)
            if grant is None or grant.owner != owner or status == DEAD:
                assert token == 0
                if grant is not None and grant.owner != owner:
                    self.assert_unchanged(key, before, self.snapshot(key))
                return
            if status == ALIVE:
                assert token == grant.token, "renew must return the grant's token"
            if token == 0:
                self.ended(key)  # it had expired
                return
            assert token == grant.token, "renew changed the token"
            self.granted(key, owner, token, ttl, s, r)

        @rule(key=st.sampled_from(KEYS), owner=st.sampled_from(OWNERS))
        def release(self, key: str, owner: str) -> None:
            grant = self.holder[key]
            before = self.snapshot(key)
            done, s, r = self.timed(lambda: self.store.backend.release(key, owner))
            status = self.status(key, s, r)
            if grant is None or grant.owner != owner or status == DEAD:
                assert done is False
                if grant is not None and grant.owner != owner:
                    self.assert_unchanged(key, before, self.snapshot(key))
                return
            if status == ALIVE:
                assert done is True
            self.claims[key].pop(owner, None)
            self.ended(key)

        @rule(key=st.sampled_from(KEYS), owner=st.sampled_from(OWNERS), ttl=ttl_ms)
        def restore_and_renew(self, key: str, owner: str, ttl: int) -> None:
            """A lease rebuilt from a persisted owner token (and token, if one was given) renews
            only while that owner still holds the key, and learns or keeps the same token."""
            persisted = self.persisted.get((key, owner))
            lease = self.manager.restore(key, owner, ttl_ms=ttl, fencing_token=persisted)
            grant = self.holder[key]
            before = self.snapshot(key)
            ok, s, r = self.timed(lease.renew)
            status = self.status(key, s, r)
            if grant is None or grant.owner != owner or status == DEAD:
                assert ok is False
                assert lease.lost
                if grant is not None and grant.owner != owner:
                    self.assert_unchanged(key, before, self.snapshot(key))
                return
            if status == ALIVE:
                assert ok is True
            if not ok:
                self.ended(key)
                return
            assert lease.fencing_token == grant.token
            self.granted(key, owner, grant.token, ttl, s, r)

        @rule(key=st.sampled_from(KEYS), owner=st.sampled_from(OWNERS))
        def restore_and_release(self, key: str, owner: str) -> None:
            """A restored lease releases the key only if that owner still holds it."""
            lease = self.manager.restore(key, owner, ttl_ms=1_000)
            grant = self.holder[key]
            before = self.snapshot(key)
            done, s, r = self.timed(lease.release)
            status = self.status(key, s, r)
            if grant is None or grant.owner != owner or status == DEAD:
                assert done is False
                if grant is not None and grant.owner != owner:
                    self.assert_unchanged(key, before, self.snapshot(key))
                return
            if status == ALIVE:
                assert done is True
            self.claims[key].pop(owner, None)
            self.ended(key)

        @rule(key=st.sampled_from(KEYS))
        def force_release(self, key: str) -> None:
            done, s, r = self.timed(lambda: self.store.backend.force_release(key))
            status = self.status(key, s, r)
            if status != UNSURE:
                assert done is (status == ALIVE)
            # The operator told the holder out of band: its claim ends here.
            self.claims[key].clear()
            self.ended(key)

        @rule(ms=advance_ms)
        def advance(self, ms: int) -> None:
            self.timing.advance(ms)

        @precondition(lambda self: self.timing.slack_ms == 0)
        @rule()
        def advance_to_an_expiry(self) -> None:
            """Land exactly on a lease's expiry (or one ms before it): the boundary that matters."""
            expiries = [g.lo for g in self.holder.values() if g is not None]
            now = self.timing.now()
            ahead = [e - now for e in expiries if e > now]
            if ahead:
                self.timing.advance(round(min(ahead)))

        # -- invariants ------------------------------------------------------------------------

        @invariant()
        def at_most_one_unexpired_holder(self) -> None:
            now = self.timing.now()
            for key in KEYS:
                live = [o for o, lo in self.claims[key].items() if lo > now]
                assert len(live) <= 1, f"{key!r} has {len(live)} unexpired holders: {live}"

        @invariant()
        def tokens_strictly_increase(self) -> None:
            for key in KEYS:
                issued = self.issued[key]
                assert issued == sorted(set(issued))
                assert issued == list(range(1, len(issued) + 1))

        @invariant()
        def inspect_agrees_with_the_model(self) -> None:
            for key in KEYS:
                reply, s, r = self.timed(functools.partial(self.snapshot, key))
                status = self.status(key, s, r)
                grant = self.holder[key]
                if status == DEAD:
                    assert reply is None, f"{key!r} should be free: {reply}"
                    self.ended(key)
                    continue
                if reply is None:
                    assert status == UNSURE
                    self.ended(key)
                    continue
                assert grant is not None
                assert reply.fencing_token == grant.token
                assert reply.owner_fingerprint == owner_fingerprint(grant.owner)
                assert reply.last_issued_token == self.counter[key]
                self.assert_ttl(reply.ttl_ms, grant, s, r)

    BackendMachine.__name__ = BackendMachine.__qualname__ = name
    return BackendMachine


def fake_timing(store: Store) -> Timing:
    """Model time for a store on a :class:`FakeClock`: exact, in ms."""
    clock = store.clock
    assert isinstance(clock, FakeClock)
    return Timing(lambda: round(clock.monotonic() * 1000), clock.advance, 0)


def real_timing(slack_ms: float = 5) -> Timing:
    """Model time for Redis: the real monotonic clock; advancing sleeps."""
    return Timing(lambda: time.monotonic() * 1000, lambda ms: time.sleep(ms / 1000), slack_ms)


def unique_prefix() -> str:
    return f"model-{uuid.uuid4().hex[:12]}"


def run_machine(machine: type[RuleBasedStateMachine], how: settings) -> None:
    """Run ``machine`` as a test under ``how`` (the typed door to Hypothesis's runner)."""
    run_state_machine_as_test(machine, settings=how)  # type: ignore[no-untyped-call, unused-ignore]
