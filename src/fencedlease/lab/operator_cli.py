"""The operator's commands: ``fencedlease doctor``, ``inspect``, ``list`` and ``release``.

Each takes the Redis URL from ``--url``, else ``FENCEDLEASE_URL`` (``redis://``, ``rediss://``,
``unix://``, ``redis+sentinel://``, ``redis+cluster://``: `fencedlease.lab.redis_target`, every
primary of a cluster walked), and the key prefix from
``--prefix``, else ``FENCEDLEASE_PREFIX``, else ``fencedlease`` (the names
`LeaseManager.from_env` reads); ``--json`` prints one JSON document on stdout instead of a table.
A password in the URL is shown as ``***`` everywhere, with no piece of it of 3 characters or
more in any output (a host or port equal to it is hidden too: ``redact_text``); a URL the library
refuses (a raw ``/``, ``?`` or ``#`` in the password) is a usage error before any connection; and
an owner token is never shown at all (a lease's
holder is named by its fingerprint). ``docs/operations.md`` shows them at work.

Exit status: 0 done (``doctor``: every check passed; ``--strict``: and no warning), 1 ``doctor``
found a failing check (``--strict``: or a warning), a ``release`` was not confirmed or the lease
changed hands before it was released, 2 a usage error or a Redis that could not be used
(unreachable, wrong password, an error reply).
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any, NoReturn, TypeVar

import click
import redis

from fencedlease import (
    FencedLeaseError,
    LeaseInfo,
    ValidationError,
    owner_fingerprint,
    redact_text,
)
from fencedlease import redis_keys as layout

from .commands import url_option
from .doctor import Check, exit_code, run_checks
from .doctor_acl import glob_escape
from .doctor_targets import topology_checks
from .redis_target import RedisTarget, open_target

__all__ = [
    "WATCH_ATTEMPTS",
    "doctor",
    "inspect_lease",
    "list_leases",
    "release",
    "release_holder",
    "release_slot",
    "scan_lease_names",
    "scan_semaphore_names",
    "semaphore_slots",
]

F = TypeVar("F", bound=Callable[..., Any])

_UNESCAPES = {"%25": "%", "%7B": "{", "%7D": "}"}


def _prefix(ctx: click.Context, param: click.Parameter, value: str) -> str:
    try:
        layout(value, "x")  # the library's own check of a prefix
    except ValidationError as exc:
        raise click.BadParameter(str(exc)) from None
    return value


def _common(command: F) -> F:
    """``--url``, ``--prefix`` and ``--json``, shared by the four commands."""
    options = (
        click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table."),
        click.option(
            "--prefix",
            envvar="FENCEDLEASE_PREFIX",
            callback=_prefix,
            default="fencedlease",
            show_default=True,
            help="The managers' key prefix (default: FENCEDLEASE_PREFIX, else fencedlease).",
        ),
        click.option(
            "--url",
            callback=url_option,
            help="The Redis: redis://, rediss://, unix://, redis+sentinel:// (the primary the"
            " sentinels name) or redis+cluster:// (every primary); default: FENCEDLEASE_URL.",
        ),
    )
    for option in options:
        command = option(command)
    return command


#: What a Redis, or a cluster client that cannot place a key, raises: reported, exit 2.
_REDIS_ERRORS = (redis.RedisError, redis.exceptions.RedisClusterException, FencedLeaseError)


@contextmanager
def _target(url: str | None, prefix: str) -> Iterator[RedisTarget]:
    """The store ``url`` names (`open_target`); a URL that names none is a usage error, a Redis
    or library error in the block is reported and exits 2 (`_fail`)."""
    if not url:
        raise click.UsageError("no Redis: give --url or set FENCEDLEASE_URL")
    with ExitStack() as stack:
        try:
            target = stack.enter_context(open_target(url, prefix))
        except ValidationError as exc:
            raise click.UsageError(str(exc)) from None
        except _REDIS_ERRORS as exc:
            _fail(url, exc)
        try:
            yield target
        except _REDIS_ERRORS as exc:
            _fail(url, exc)


def _shown(url: str) -> str:
    """``url`` as the output shows it: its password ``***``, and any other part holding a piece
    of it (a host equal to it) too."""
    return redact_text(url, url)


def _fail(url: str, exc: BaseException) -> NoReturn:
    """Report a Redis or library error (password redacted) and exit 2."""
    click.echo(f"error: {redact_text(f'{type(exc).__name__}: {exc}', url)}", err=True)
    sys.exit(2)


def _emit_json(document: object) -> None:
    click.echo(json.dumps(document, indent=2))


def _rich_table(title: str, columns: list[str], rows: list[list[str]]) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = Console()
    table = Table(title=title, title_justify="left")
    for column in columns:
        if column in ("key", "semaphore"):  # copied into `release`: whole, folded if it must be
            table.add_column(column, overflow="fold")
        else:
            table.add_column(column, no_wrap=column == "holder")  # 16 hex: shown whole
    for row in rows:
        table.add_row(*(escape(cell) for cell in row))
    console.print(table)


# doctor ------------------------------------------------------------------------------------------

_STYLE = {"pass": "green", "warn": "yellow", "fail": "bold red"}


@click.command()
@_common
@click.option("--strict", is_flag=True, help="Exit 1 on a warning too.")
@click.option(
    "--allow-rdb",
    is_flag=True,
    help="Accept RDB snapshots without AOF (a restart reissues the tokens granted since the"
    " last snapshot): a warning instead of a failure.",
)
@click.option(
    "--acl-user",
    help="Check this ACL user's rights (needs an admin connection; default: the"
    " connection's own user).",
)
@click.option(
    "--pings",
    default=20,
    show_default=True,
    type=click.IntRange(1, 10_000),
    help="PING round trips for the latency check.",
)
@click.option(
    "--max-skew-ms",
    default=250,
    show_default=True,
    type=click.IntRange(0),
    help="Warn when the server clock is further than this from the local one.",
)
@click.option(
    "--max-latency-ms",
    default=100,
    show_default=True,
    type=click.IntRange(0),
    help="Warn when a PING round trip takes longer.",
)
def doctor(
    url: str | None,
    prefix: str,
    as_json: bool,
    strict: bool,
    allow_rdb: bool,
    acl_user: str | None,
    pings: int,
    max_skew_ms: int,
    max_latency_ms: int,
) -> None:
    """Check that a Redis gives fencing tokens their meaning.

    Eviction policy, persistence, version, replication, topology, the ACL user's commands,
    clock skew and latency, each pass / warn / fail with the remedy. Reads only.
    A redis+cluster:// URL: every primary of the cluster (checks named check@host:port);
    redis+sentinel://: the primary the sentinels name now, after a check naming them.

    An evicting maxmemory-policy (allkeys-*, volatile-*) fails, and so do RDB
    snapshots without AOF unless --allow-rdb (then a warning).

    \b
    Exit status: 0 every check passed (warnings allowed unless --strict),
    1 a check failed (--strict: or warned), 2 a usage error.
    """

    def run(client: redis.Redis) -> list[Check]:
        return run_checks(
            client,
            prefix=prefix,
            acl_user=acl_user,
            pings=pings,
            max_skew_ms=max_skew_ms,
            max_latency_ms=max_latency_ms,
            allow_rdb=allow_rdb,
        )

    with _target(url, prefix) as target:
        checks = topology_checks(target, run)
    assert url is not None
    checks = [
        Check(c.name, c.status, redact_text(c.detail, url), redact_text(c.remedy, url))
        for c in checks
    ]
    code = exit_code(checks, strict=strict)
    counts = {status: sum(c.status == status for c in checks) for status in _STYLE}
    if as_json:
        _emit_json(
            {
                "url": _shown(url),
                "prefix": prefix,
                "strict": strict,
                "exit_code": code,
                "summary": counts,
                "checks": [
                    {"name": c.name, "status": c.status, "detail": c.detail, "remedy": c.remedy}
                    for c in checks
                ],
            }
        )
        sys.exit(code)
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    table = Table(
        title=f"fencedlease doctor: {escape(_shown(url))} (prefix {escape(prefix)})",
        title_justify="left",
        show_lines=True,
    )
    for column in ("check", "status", "found", "remedy"):
        table.add_column(column)
    for c in checks:
        style = _STYLE[c.status]
        table.add_row(c.name, f"[{style}]{c.status}[/]", escape(c.detail), escape(c.remedy))
    console = Console()
    console.print(table)
    console.print(f"{counts['pass']} passed, {counts['warn']} warned, {counts['fail']} failed")
    sys.exit(code)


# inspect, list, release --------------------------------------------------------------------------


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
    [`scan_lease_names`][fencedlease.lab.operator_cli.scan_lease_names] finds leases.

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
    }


def _cells(row: dict[str, Any]) -> list[str]:
    return [
        "-" if row[k] is None else str(row[k])
        for k in ("key", "fencing_token", "holder", "ttl_ms", "last_issued_token")
    ]


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
    """List the leases held now under --prefix: holder fingerprint, fencing token, TTL left;
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
    _rich_table(f"leases under {prefix} ({len(rows)})", _COLUMNS, [_cells(r) for r in rows])
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
    token, TTL left, and the last token the key's counter issued (also when nobody holds it);
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
        }
    )
    row = {**row, "held": info is not None, "redis_key": layout(prefix, key).lease}
    if as_json:
        _emit_json({**row, "semaphore": semaphore})
        return
    title = f"{key!r} is {'held' if info is not None else 'not held'} ({row['redis_key']})"
    _rich_table(title, _COLUMNS, [_cells(row)])
    if semaphore is not None:
        slots = semaphore["slots"]
        _rich_table(
            f"semaphore {key!r}: {len(slots)} live slot(s), last issued token"
            f" {semaphore['last_issued_token']}",
            ["holder", "fencing token", "TTL left (ms)"],
            [_slot_cells(slot) for slot in slots],
        )


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
