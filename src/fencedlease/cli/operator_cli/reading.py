"""``fencedlease list`` and ``inspect``: what is held now, read with ``SCAN`` (never ``KEYS``);
holders are named by their owner fingerprint, never by their owner token, and by the metadata
their grant stored (``metadata=`` of ``acquire``/``hold``/``with_lease``)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import click
import redis

from fencedlease import LeaseInfo, owner_fingerprint
from fencedlease import redis_keys as layout

from ..doctor_acl import glob_escape
from .options import _common, _emit_json, _rich_table, _shown, _target

_UNESCAPES = {"%25": "%", "%7B": "{", "%7D": "}"}


def scan_lease_names(client: redis.Redis, prefix: str, match: str = "*") -> Iterator[str]:
    """The lease names under ``prefix`` whose lease key exists now, found by ``SCAN`` (never
    ``KEYS``): keys ``<prefix>:{<escaped name>}`` (``docs/reference/key-layout.md``).

    ``match`` is a Redis glob over the lease *name* (``%``, ``{``, ``}`` in it are escaped as the
    layout escapes names); the prefix is matched literally. Keys of other roles (``:fence``,
    ``:waiters``, ...) and keys that only look alike are skipped.

    Raises:
        ValidationError: ``prefix`` holds a brace or is empty; ``match`` is empty.
    """
    return _scan_names(client, prefix, match, "", "lease")


def scan_semaphore_names(client: redis.Redis, prefix: str, match: str = "*") -> Iterator[str]:
    """The [`Semaphore`][fencedlease.Semaphore] names under ``prefix`` that have a slot set now
    (``<prefix>:{<escaped name>}:semaphore``), found by ``SCAN`` as
    [`scan_lease_names`][fencedlease.cli.operator_cli.scan_lease_names] finds leases.

    Raises:
        ValidationError: ``prefix`` holds a brace or is empty; ``match`` is empty.
    """
    return _scan_names(client, prefix, match, ":semaphore", "semaphore")


def _scan_names(
    client: redis.Redis, prefix: str, match: str, suffix: str, role: str
) -> Iterator[str]:
    base = layout(prefix, match).base
    pattern = glob_escape(prefix) + base[len(prefix) :] + suffix
    start, end = len(prefix) + 2, len(suffix) + 1
    for raw in client.scan_iter(match=pattern, count=1000):
        key = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
        name = re.sub("%(25|7B|7D)", lambda m: _UNESCAPES[m.group(0)], key[start:-end])
        if name and getattr(layout(prefix, name), role) == key:
            yield name


def semaphore_slots(client: redis.Redis, prefix: str, name: str) -> dict[str, Any] | None:
    """The live slots of semaphore ``name`` as one snapshot (``MULTI``: Redis's ``TIME``, the
    slot set, the slot tokens and the counter read at one instant): ``{"slots": [{"holder":
    owner fingerprint, "fencing_token", "ttl_ms": milliseconds left}, ...] (by deadline),
    "last_issued_token"}``, or None when the semaphore has neither a slot set nor a counter.
    Owner tokens are never shown."""
    keys = layout(prefix, name)
    with client.pipeline(transaction=True) as pipe:
        pipe.time()
        pipe.zrange(keys.semaphore, 0, -1, withscores=True)
        pipe.hgetall(keys.semaphore_tokens)
        pipe.get(keys.semaphore_fence)
        (seconds, micros), entries, tokens, counter = pipe.execute()
    if not entries and counter is None:
        return None
    now_ms = seconds * 1000 + micros // 1000
    slots = []
    for owner, deadline in entries:
        if deadline <= now_ms:
            continue  # expired: the next script run on the semaphore removes it
        token = tokens.get(owner)
        text = owner.decode("utf-8", "replace") if isinstance(owner, bytes) else str(owner)
        slots.append({
            "holder": owner_fingerprint(text),
            "fencing_token": None if token is None else int(token),
            "ttl_ms": int(deadline - now_ms),
        })  # fmt: skip
    return {"slots": slots, "last_issued_token": None if counter is None else int(counter)}


def _lease_row(info: LeaseInfo) -> dict[str, Any]:
    return {
        "key": info.key,
        "fencing_token": info.fencing_token,
        "holder": info.owner_fingerprint,
        "ttl_ms": info.ttl_ms,
        "last_issued_token": info.last_issued_token,
        "metadata": dict(info.metadata),
    }


def _cells(row: dict[str, Any], metadata: bool = False) -> list[str]:
    """A row's cells; with ``metadata``, its metadata last, one ``name=value`` a line."""
    cells = [
        "-" if row[k] is None else str(row[k])
        for k in ("key", "fencing_token", "holder", "ttl_ms", "last_issued_token")
    ]
    if not metadata:
        return cells
    entries = row["metadata"].items()
    return [*cells, "\n".join(f"{name}={value}" for name, value in entries) or "-"]


def _lease_table(title: str, rows: list[dict[str, Any]]) -> None:
    """The text table of lease ``rows``: the metadata column only when a lease has some (the
    table stays narrow for the others)."""
    metadata = any(row["metadata"] for row in rows)
    columns = [*_COLUMNS, "metadata"] if metadata else _COLUMNS
    _rich_table(title, columns, [_cells(row, metadata) for row in rows])


def _slot_cells(slot: dict[str, Any]) -> list[str]:
    return [slot["holder"], str(slot["fencing_token"]), str(slot["ttl_ms"])]


_COLUMNS = ["key", "fencing token", "holder", "TTL left (ms)", "last issued token"]


def _counter(client: redis.Redis, prefix: str, key: str) -> int | None:
    value = client.get(layout(prefix, key).fence)
    return None if value is None else int(value)


@click.command("list")
@_common
@click.option("--match", default="*", show_default=True, help="Redis glob over lease names.")
def list_leases(url: str | None, prefix: str, as_json: bool, match: str) -> None:
    """List the leases held now under --prefix: holder fingerprint, fencing token, TTL left,
    the holder's metadata;
    and each live slot of the semaphores (holder fingerprint, fencing token, TTL left, and the
    semaphore's last issued token), a holder `release KEY --slot HOLDER` takes.

    Walks the keys with SCAN (never KEYS), so a large Redis is not blocked; a lease granted or
    expiring during the walk may be missed or shown.
    """
    rows, semaphores = [], []
    with _target(url, prefix) as target:
        leases = target.manager
        names: set[str] = set()
        semaphore_names: set[str] = set()
        for _, node in target.walk():  # a cluster's keys are spread over its primaries
            names.update(scan_lease_names(node, prefix, match))
            semaphore_names.update(scan_semaphore_names(node, prefix, match))
        for name in sorted(names):
            info = leases.inspect(name)
            if info is not None:  # it expired since the scan
                rows.append(_lease_row(info))
        for name in sorted(semaphore_names):
            seen = semaphore_slots(target.client_for(name), prefix, name)
            if seen is not None and seen["slots"]:
                semaphores.append({"name": name, **seen})
    assert url is not None
    if as_json:
        _emit_json({"url": _shown(url), "prefix": prefix, "leases": rows, "semaphores": semaphores})
        return
    _lease_table(f"leases under {prefix} ({len(rows)})", rows)
    if semaphores:
        _rich_table(
            f"semaphore slots under {prefix} ({len(semaphores)} semaphores)",
            ["semaphore", "holder", "fencing token", "TTL left (ms)", "last issued token"],
            [
                [r["name"], *_slot_cells(slot), str(r["last_issued_token"])]
                for r in semaphores
                for slot in r["slots"]
            ],
        )


@click.command("inspect")
@_common
@click.argument("key")
def inspect_lease(url: str | None, prefix: str, as_json: bool, key: str) -> None:
    """Show the lease on KEY (a lease name, as given to acquire): holder fingerprint, fencing
    token, TTL left, the holder's metadata, and the last token the key's counter issued (also
    when nobody holds it);
    and, when KEY names a semaphore too, each live slot (holder fingerprint, fencing token,
    TTL left) and the semaphore's last issued token."""
    with _target(url, prefix) as target:
        client = target.client_for(key)
        info = target.manager.inspect(key)
        counter = _counter(client, prefix, key) if info is None else info.last_issued_token
        semaphore = semaphore_slots(client, prefix, key)
    row = (
        _lease_row(info)
        if info is not None
        else {
            "key": key,
            "fencing_token": None,
            "holder": None,
            "ttl_ms": None,
            "last_issued_token": counter,
            "metadata": {},
        }
    )
    row = {**row, "held": info is not None, "redis_key": layout(prefix, key).lease}
    if as_json:
        _emit_json({**row, "semaphore": semaphore})
        return
    title = f"{key!r} is {'held' if info is not None else 'not held'} ({row['redis_key']})"
    _lease_table(title, [row])
    if semaphore is not None:
        slots = semaphore["slots"]
        _rich_table(
            f"semaphore {key!r}: {len(slots)} live slot(s), last issued token"
            f" {semaphore['last_issued_token']}",
            ["holder", "fencing token", "TTL left (ms)"],
            [_slot_cells(slot) for slot in slots],
        )
