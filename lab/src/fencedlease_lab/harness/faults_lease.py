"""Faults on the lease itself: ``evict`` (the holder's key deleted under it), ``slow-cut``
(renewals confirmed late, then the holder cut off), ``slow-grant`` (a grant confirmed late,
then the holder cut off) and ``slow-handoff`` (a hand-off grant whose message comes late, then
the new holder cut off).

``evict`` is what a ``maxmemory-policy allkeys-*`` eviction or an operator's ``DEL`` does: the
lease (owner) key the holder holds disappears before its TTL, the fencing counter stays. Redis
then grants the key to the next worker at once; the holder cannot know before its next renewal,
which is answered 0, and from then on it must stop claiming the key. A library that reads the 0 as
a success, or renews a key another owner holds, goes on claiming it while the next owner holds it.
The delete is a compare-and-delete (``WATCH``/``MULTI``): it only removes the key while the holder
the nemesis aimed at still owns it. The evictions of a run take turns
([`evict_number`][fencedlease_lab.harness.faults_lease.evict_number]), each deleting the key right
after a renewal ran (so that the most time passes before the holder's next one): the second,
fourth, ... with a waiter steered to the key, so that the next owner holds it when the renewal
comes; the first, third, ... with no waiter, no worker's new cycle picking the key (the board's
``shun``) and the other workers' requests held back (a ``latency`` toxic on their proxies, the
workers named in ``detail.held_off``) from the ``DEL`` until a heartbeat plus
[`HOLD_SLACK_S`][fencedlease_lab.harness.faults_lease.HOLD_SLACK_S] after it, so that the
holder's next renewal meets the key missing whoever was already waiting for it. After the
``DEL`` the nemesis watches the key
([`watch_comeback`][fencedlease_lab.harness.faults_lease.watch_comeback]) and records whether it
came back holding the deleted value's owner token (``detail.recreated``): no acquire of that
owner is left, so only a renewal that sets a missing key again writes it, and property c flags
it.

``slow-cut`` first delays the holder's replies (a Toxiproxy ``latency`` toxic downstream of about
ttl/3) until a renewal ran in Redis, then at once cuts the holder's requests (a ``timeout`` 0
toxic upstream, as ``drop-requests``) for 2 x ttl: that renewal's reply still comes, late, and
confirms the lease; no later renewal reaches Redis (a renewal in flight when the cut fell would
have kept the key for a ttl more, hiding the difference). Redis counts the key's TTL from when
it ran the renewal, so the holder's deadline, counted from the renewal's send, ends no later
than the key; a deadline counted from the late reply outlives it by the delay, and the next
owner's grant falls into the stale claim.

``slow-grant`` does the same to the acquire: it picks a key that is free with nobody queued,
which every other worker then shuns, delays the victim's replies (ttl/3) and steers the victim to
the key (its body to last two ttls). The victim's acquire is granted at once and its reply comes
late; as soon as the key holds a value (Redis ran the acquire,
[`wait_for_value`][fencedlease_lab.harness.faults_lease.wait_for_value]) its requests are cut
for 2 x ttl, before its first renewal (due a heartbeat after the acquire was sent: at once, for
a library that dates the grant from the send; a heartbeat after the reply for one that dates it
from the reply). Redis counts the key's TTL from when it ran the acquire, so a grant's deadline
counted from the reply outlives the key by the delay.

``slow-handoff`` does it to a grant carried in a release's message: the nemesis takes, with the
library, a lease on a key that is free with nobody queued (every other worker shunning it) and
steers the victim to the key, its body to last two ttls and its retry delay a ttl (it waits for
the message rather than polling), until the victim's refused acquire queued it alone
([`wait_for_one_waiter`][fencedlease_lab.harness.faults_lease.wait_for_one_waiter]). Then it
delays the victim's replies (ttl/3), cuts its requests, and releases. The release hands the key
to the victim with a new token and the key's TTL counted from the release, and publishes the
grant, which reaches the victim ttl/3 late; the victim takes it from the message
(``detail.direct``: it was queued to) and can renew nothing, so the key expires a ttl after the
release, and a worker steered to it takes it. A deadline counted from the victim's queueing
send ends before the key does; one counted from the message's arrival outlives it by the delay,
and that grant falls into the stale claim.

All four (``evict`` every second time) steer one other worker (the board's ``steer``) to wait
for the key in its next cycle, so that a waiter is there when Redis frees it: the next grant
then falls right after the DEL, or right after the key expired. All three make the holder's body
outlast the fault (the board's ``stretch``, see
[`Board`][fencedlease_lab.harness.workload.Board]): a default body (a few tens
of milliseconds) would end before any renewal.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Final

import attrs
import redis

from fencedlease import RedisKeys

from .faults_network import read_lease
from .schedule import Schedule
from .workload import BODY, Board

__all__ = [
    "HOLD_SLACK_S", "Comeback", "compare_and_delete", "evict_number", "owner_token", "same_owner",
    "slow_replies", "take_stretch", "wait_for_one_waiter", "wait_for_renewal", "wait_for_value",
    "watch_comeback",
]  # fmt: skip

#: A PTTL that rose by more than this (milliseconds) between two readings was renewed.
_RISE_MS: Final = 20

#: How long past a heartbeat after the ``DEL`` an eviction of the first kind holds the other
#: workers' requests back (seconds): the holder's renewal, due within a heartbeat, has run by then.
HOLD_SLACK_S: Final = 0.1


def evict_number(schedule: Schedule, index: int) -> int:
    """Which ``evict`` of ``schedule`` the fault of ``index`` is (0 for the first), counted in
    schedule order."""
    evicts = [fault.index for fault in schedule.faults if fault.kind == "evict"]
    return evicts.index(index) if index in evicts else 0


def slow_replies(name: str, delay_ms: int) -> dict[str, Any]:
    """The toxiproxy-python ``add_toxic`` arguments of a ``latency`` toxic ``name`` of
    ``delay_ms`` milliseconds (no jitter) on the replies (downstream) alone."""
    return {
        "type": "latency", "name": name, "stream": "downstream",
        "attributes": {"latency": delay_ms, "jitter": 0},
    }  # fmt: skip


def owner_token(value: str | bytes | None) -> int | None:
    """The fencing token of a lease key's value ``"<token>:<owner>"`` (None: no value, or not of
    that shape)."""
    if value is None:
        return None
    text = value.decode() if isinstance(value, bytes) else value
    head = text.split(":", 1)[0]
    return int(head) if head.isdigit() else None


def same_owner(before: str | bytes | None, after: str | bytes | None) -> bool:
    """Whether two lease key values ``"<token>:<owner>"`` name the same owner token (the part
    after the first ``:``); False when either is missing or of another shape."""
    parts = []
    for value in (before, after):
        text = value.decode() if isinstance(value, bytes) else value
        if text is None or ":" not in text:
            return False
        parts.append(text.split(":", 1)[1])
    return parts[0] == parts[1]


@attrs.frozen
class Comeback:
    """The first value a deleted lease key was seen holding again: its fencing ``token``,
    ``when`` it was seen (``time.monotonic`` seconds) and whether it holds the deleted value's
    owner token (``recreated``: the library set the key again for the owner it was taken from,
    where its renewal must answer 0)."""

    token: int | None
    when: float
    recreated: bool


def watch_comeback(
    admin: redis.Redis, lease_key: str, deleted: str | bytes, wait_s: float, stop: threading.Event
) -> Comeback | None:
    """Poll ``lease_key`` (every 5 ms, at most ``wait_s`` seconds) after the nemesis deleted its
    value ``deleted`` until a value is there again: the
    [`Comeback`][fencedlease_lab.harness.faults_lease.Comeback], or None (none came, or a Redis
    error ended the watch)."""
    give_up = time.monotonic() + wait_s
    while not stop.is_set() and time.monotonic() < give_up:
        try:
            seen = admin.get(lease_key)
        except redis.RedisError:
            return None
        if seen is not None:
            return Comeback(owner_token(seen), time.monotonic(), same_owner(deleted, seen))
        stop.wait(0.005)
    return None


def take_stretch(
    board: Board, worker: int, stretch_ms: int, wait_s: float, stop: threading.Event
) -> tuple[int, int] | None:
    """Ask ``worker``'s shown cycle to stretch its body by ``stretch_ms`` and wait (at most
    ``wait_s`` seconds) until a cycle holding a lease took the stretch in its body. Returns the
    board's ``(token, key index)`` of that cycle, or None (the stretch is withdrawn then)."""
    board.set(worker, "stretch", stretch_ms)
    give_up = time.monotonic() + wait_s
    while not stop.is_set() and time.monotonic() < give_up:
        token = board.get(worker, "token")
        if board.get(worker, "stretch") == 0 and board.get(worker, "phase") == BODY and token:
            return token, board.get(worker, "key")
        stop.wait(0.002)
    board.set(worker, "stretch", 0)
    return None


def wait_for_renewal(
    admin: redis.Redis, lease_key: str, token: int, wait_s: float, stop: threading.Event
) -> bool:
    """Poll ``lease_key`` (every 5 ms, at most ``wait_s`` seconds) until its PTTL rises while
    ``token`` owns it: a renewal of it ran in Redis. False when none did (or the key was lost,
    or a Redis error ended the watch)."""
    give_up = time.monotonic() + wait_s
    last: int | None = None
    while not stop.is_set() and time.monotonic() < give_up:
        try:
            value, pttl = read_lease(admin, lease_key)
        except redis.RedisError:
            return False
        if owner_token(value) != token:
            return False
        if last is not None and pttl > last + _RISE_MS:
            return True
        last = pttl
        stop.wait(0.005)
    return False


def compare_and_delete(admin: redis.Redis, lease_key: str, token: int) -> bool:
    """``DEL lease_key`` if, and only if, fencing ``token`` owns it (``WATCH``/``MULTI``, so a
    new owner's key is never deleted). True when it was deleted."""
    with admin.pipeline() as pipe:
        try:
            pipe.watch(lease_key)  # type: ignore[no-untyped-call]
            if owner_token(pipe.get(lease_key)) != token:
                return False
            pipe.multi()
            pipe.delete(lease_key)
            deleted: Any = pipe.execute()
        except redis.WatchError:
            return False
    return bool(deleted[0])


def wait_for_value(
    admin: redis.Redis, lease_key: str, wait_s: float, stop: threading.Event
) -> str | None:
    """Poll ``lease_key`` (every 2 ms, at most ``wait_s`` seconds) until it holds a value: that
    value (``"<token>:<owner>"``; the owner token is a secret, never record it), or None (none
    came in time, or a Redis error ended the watch)."""
    give_up = time.monotonic() + wait_s
    while not stop.is_set() and time.monotonic() < give_up:
        try:
            value = admin.get(lease_key)
        except redis.RedisError:
            return None
        if value is not None:
            return str(value)
        stop.wait(0.002)
    return None


def wait_for_one_waiter(
    admin: redis.Redis, keys: RedisKeys, wait_s: float, stop: threading.Event
) -> tuple[str, bool] | None:
    """Poll the hand-off queue of ``keys`` (every 2 ms, at most ``wait_s`` seconds) until it
    holds exactly one waiter: that waiter's owner token (a secret: compare it, never record it)
    and whether it is queued ``direct`` (it takes the grant from the release's message, its
    details ending in ``:direct``); None when none came alone in time (or Redis failed)."""
    give_up = time.monotonic() + wait_s
    while not stop.is_set() and time.monotonic() < give_up:
        try:
            with admin.pipeline(transaction=True) as pipe:
                pipe.zrange(keys.waiters, 0, -1)
                pipe.hgetall(keys.waiters_meta)
                members, details = pipe.execute()
        except redis.RedisError:
            return None
        if len(members) == 1:
            return members[0], str(details.get(members[0], "")).endswith(":direct")
        stop.wait(0.002)
    return None
