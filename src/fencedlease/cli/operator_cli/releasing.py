"""``fencedlease release``: the operator's escape hatch, deleting a lease (or a semaphore slot)
whoever holds it, and only the holder shown (``WATCH``/``MULTI``/``EXEC``)."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

import click
import redis

from fencedlease import owner_fingerprint
from fencedlease import redis_keys as layout

from .options import _common, _emit_json, _target
from .reading import _lease_row, semaphore_slots

_RELEASE_REFUSED = (
    "release deletes a lease whose holder may still be working: the holder learns it only when"
    " its next renewal is refused, and meanwhile another client can be granted the key. Fenced"
    " storage then refuses the old holder's writes; unfenced work overlaps. Give --force to"
    " release anyway (it asks first unless --yes)."
)


#: How often a release reads again when a key it watches changed before its delete ran.
WATCH_ATTEMPTS = 5

_T = TypeVar("_T")


def _under_watch(
    client: redis.Redis, keys: tuple[str, ...], step: Callable[[Any], _T]
) -> _T | None:
    """``step(pipe)`` with ``keys`` under ``WATCH``: its reads see them as they are, and its
    ``MULTI``/``EXEC`` runs only if none changed since. A change aborts the ``EXEC`` and the
    step runs again from its reads (a holder's renewal touches the keys too), at most
    `WATCH_ATTEMPTS` times; None when every attempt saw a change."""
    for _ in range(WATCH_ATTEMPTS):
        with client.pipeline(transaction=True) as pipe:
            try:
                pipe.watch(*keys)  # type: ignore[no-untyped-call]
                return step(pipe)
            except redis.WatchError:
                continue
    return None


def _text(value: bytes | str) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def release_holder(client: redis.Redis, prefix: str, key: str, holder: str) -> bool | None:
    """Delete the lease on ``key`` if ``holder`` (an owner fingerprint) still holds it: ``True``
    deleted, ``False`` nobody holds it, ``None`` another holder has it now (nothing deleted).

    ``WATCH`` on the lease key, ``GET``, then ``MULTI``/``DEL``/``EXEC``: a grant between the
    read and the delete aborts the delete (then it reads again: `_under_watch`), so an operator
    never releases a lease other than the one shown to them. The owner token read here is
    compared, never shown.
    """
    lease_key = layout(prefix, key).lease

    def step(pipe: Any) -> bool | None:
        value = pipe.get(lease_key)
        if value is None:
            return False
        owner = _text(value).partition(":")[2]
        if not owner or owner_fingerprint(owner) != holder:
            return None
        pipe.multi()
        pipe.delete(lease_key)
        return bool(pipe.execute()[0])

    return _under_watch(client, (lease_key,), step)


def release_slot(
    client: redis.Redis, prefix: str, name: str, holder: str, fencing_token: int
) -> bool | None:
    """Delete the live slot of semaphore ``name`` held by ``holder`` (an owner fingerprint) with
    ``fencing_token``: ``True`` deleted, ``False`` no such live slot (released, expired),
    ``None`` the semaphore changed under every attempt (nothing deleted).

    A slot is a member of the slot set (owner token -> deadline in ms of Redis's ``TIME``) and a
    field of the token hash (owner token -> fencing token), ``docs/reference/key-layout.md``: the
    operator names it by what they can see, the owner's fingerprint and the slot's token, never
    by the owner token, a secret that is read here, compared and not shown. ``WATCH`` on both
    keys, ``TIME`` and the reads, then ``MULTI``/``ZREM``/``HDEL``/``EXEC`` (`_under_watch`):
    only the slot shown is deleted. The keys keep their TTL (an emptied key is gone), the
    counter stays, so the next slot's token is larger; the holder learns it at its next renewal
    (refused: the slot is lost), as with [`Semaphore.force_release`][fencedlease.Semaphore].
    """
    keys = layout(prefix, name)

    def step(pipe: Any) -> bool:
        seconds, micros = pipe.time()
        now_ms = seconds * 1000 + micros // 1000
        for owner, deadline in pipe.zrange(keys.semaphore, 0, -1, withscores=True):
            if deadline <= now_ms or owner_fingerprint(_text(owner)) != holder:
                continue
            token = pipe.hget(keys.semaphore_tokens, owner)
            if token is None or int(token) != fencing_token:
                continue
            pipe.multi()
            pipe.zrem(keys.semaphore, owner)
            pipe.hdel(keys.semaphore_tokens, owner)
            pipe.execute()
            return True
        return False

    return _under_watch(client, (keys.semaphore, keys.semaphore_tokens), step)


_FINGERPRINT = re.compile(r"[0-9a-f]{16}\Z")


def _slot_option(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is not None and not _FINGERPRINT.match(value):
        raise click.BadParameter(
            f"a slot is named by its holder's fingerprint, 16 lowercase hex digits as list and"
            f" inspect show it; got {value[:40]!r}"
        )
    return value


@click.command()
@_common
@click.argument("key")
@click.option("--force", is_flag=True, help="Release whoever holds KEY (required).")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.option(
    "--slot",
    metavar="HOLDER",
    callback=_slot_option,
    help="Release the slot of semaphore KEY that this holder (its fingerprint, as list and"
    " inspect show it) holds, instead of the lease on KEY.",
)
def release(
    url: str | None, prefix: str, as_json: bool, key: str, force: bool, yes: bool, slot: str | None
) -> None:
    """Delete the lease on KEY whoever holds it (an operator's escape hatch; needs --force), or
    with --slot HOLDER the semaphore slot that holder has.

    It shows the holder and asks (unless --yes), then deletes that holder's lease (slot) only: if
    the lease changed hands meanwhile nothing is deleted (exit 1). The fencing counter stays: the
    next grant gets a larger token than the released one.
    """
    if not force:
        raise click.UsageError(_RELEASE_REFUSED)
    if slot is not None:
        _release_slot(url, prefix, as_json, key, slot, yes)
    with _target(url, prefix) as target:
        info = target.manager.inspect(key)
        if info is None:
            outcome: bool | None = False
        else:
            _ask(f"release {key!r}", _lease_row(info), yes)
            outcome = release_holder(target.client_for(key), prefix, key, info.owner_fingerprint)
    row = None if info is None else _lease_row(info)
    _report_release(
        as_json,
        {"key": key, "lease": row},
        outcome,
        f"{key!r} changed hands since it was read: nothing released; run again",
        f"released {key!r} (holder {row and row['holder']}, fencing token"
        f" {row and row['fencing_token']})",
        f"{key!r} was not held: nothing released",
    )


def _ask(what: str, row: dict[str, Any], yes: bool) -> None:
    """Ask on stderr whether to do ``what`` to the holder ``row`` shows (unless ``yes``); a "no"
    aborts (exit 1)."""
    if not yes:
        click.confirm(
            f"{what}, held by {row['holder']} with fencing token {row['fencing_token']},"
            f" {row['ttl_ms']} ms left?",
            abort=True,
            err=True,
        )


def _report_release(
    as_json: bool, shown: dict[str, Any], outcome: bool | None, moved: str, done: str, none: str
) -> NoReturn:
    """Say how a release went and exit: ``shown`` holds the key and what was shown (the lease or
    slot row, or None when nothing was held), ``outcome`` is `release_holder`'s or
    `release_slot`'s; the message ``moved`` (exit 1: the holder changed), ``done`` or ``none``,
    or with ``--json`` one document of ``shown``, ``released`` and ``changed_hands``."""
    row = shown.get("lease", shown.get("slot"))
    released, changed = outcome is True, row is not None and outcome is None
    if as_json:
        _emit_json({"key": shown["key"], "released": released, "changed_hands": changed, **shown})
    else:
        click.echo(moved if changed else done if released else none)
    sys.exit(1 if changed else 0)


def _release_slot(
    url: str | None, prefix: str, as_json: bool, key: str, holder: str, yes: bool
) -> NoReturn:
    """``release KEY --slot HOLDER``: the live slot of semaphore KEY that HOLDER has, shown,
    confirmed and deleted by `release_slot`; exit 0, or 1 when the semaphore changed under
    every attempt."""
    with _target(url, prefix) as target:
        client = target.client_for(key)
        seen = semaphore_slots(client, prefix, key)
        slots = [] if seen is None else seen["slots"]
        slot = next((s for s in slots if s["holder"] == holder), None)
        if slot is None or slot["fencing_token"] is None:
            outcome: bool | None = False
        else:
            _ask(f"release the slot of semaphore {key!r}", slot, yes)
            outcome = release_slot(client, prefix, key, holder, slot["fencing_token"])
    _report_release(
        as_json,
        {"key": key, "slot": slot},
        outcome,
        f"semaphore {key!r} kept changing while it was read: nothing released; run again",
        f"released the slot of semaphore {key!r} (holder {holder}, fencing token"
        f" {slot and slot['fencing_token']})",
        f"semaphore {key!r} has no live slot of {holder}: nothing released",
    )
