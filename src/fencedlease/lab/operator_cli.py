"""The operator's commands: ``fencedlease doctor``, ``inspect``, ``list`` and ``release``.

Each takes the Redis URL from ``--url``, else ``FENCEDLEASE_URL`` (``redis://``, ``rediss://``,
``unix://``, ``redis+sentinel://``, ``redis+cluster://``: `fencedlease.lab.redis_target`, every
primary of a cluster walked), and the key prefix from
``--prefix``, else ``FENCEDLEASE_PREFIX``, else ``fencedlease`` (the names
`LeaseManager.from_env` reads); ``--json`` prints one JSON document on stdout instead of a table.
A password in the URL is shown as ``***`` everywhere, and an owner token never at all (a lease's
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
    redact_url,
)
from fencedlease import redis_keys as layout

from .commands import url_option
from .doctor import Check, exit_code, run_checks
from .doctor_acl import glob_escape
from .doctor_targets import topology_checks
from .redis_target import RedisTarget, open_target

__all__ = [
    "doctor",
    "inspect_lease",
    "list_leases",
    "release",
    "release_holder",
    "scan_lease_names",
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
        if column == "key":  # copied from here into `release`: whole, folded if it must be
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
                "url": redact_url(url),
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
        title=f"fencedlease doctor: {escape(redact_url(url))} (prefix {escape(prefix)})",
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


_COLUMNS = ["key", "fencing token", "holder", "TTL left (ms)", "last issued token"]


def _counter(client: redis.Redis, prefix: str, key: str) -> int | None:
    value = client.get(layout(prefix, key).fence)
    return None if value is None else int(value)


@click.command("list")
@_common
@click.option("--match", default="*", show_default=True, help="Redis glob over lease names.")
def list_leases(url: str | None, prefix: str, as_json: bool, match: str) -> None:
    """List the leases held now under --prefix: holder fingerprint, fencing token, TTL left;
    and the semaphores with live slots (how many, and the last token issued).

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
                semaphores.append({
                    "name": name, "slots": len(seen["slots"]),
                    "last_issued_token": seen["last_issued_token"],
                })  # fmt: skip
    assert url is not None
    if as_json:
        _emit_json(
            {"url": redact_url(url), "prefix": prefix, "leases": rows, "semaphores": semaphores}
        )
        return
    _rich_table(f"leases under {prefix} ({len(rows)})", _COLUMNS, [_cells(r) for r in rows])
    if semaphores:
        _rich_table(
            f"semaphores under {prefix} ({len(semaphores)})",
            ["semaphore", "live slots", "last issued token"],
            [[r["name"], str(r["slots"]), str(r["last_issued_token"])] for r in semaphores],
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
            [[s["holder"], str(s["fencing_token"]), str(s["ttl_ms"])] for s in slots],
        )


_RELEASE_REFUSED = (
    "release deletes a lease whose holder may still be working: the holder learns it only when"
    " its next renewal is refused, and meanwhile another client can be granted the key. Fenced"
    " storage then refuses the old holder's writes; unfenced work overlaps. Give --force to"
    " release anyway (it asks first unless --yes)."
)


def release_holder(client: redis.Redis, prefix: str, key: str, holder: str) -> bool | None:
    """Delete the lease on ``key`` if ``holder`` (an owner fingerprint) still holds it: ``True``
    deleted, ``False`` nobody holds it, ``None`` another holder has it now (nothing deleted).

    ``WATCH`` on the lease key, ``GET``, then ``MULTI``/``DEL``/``EXEC``: a grant between the
    read and the delete aborts the delete, so an operator never releases a lease other than the
    one shown to them. The owner token read here is compared, never shown.
    """
    lease_key = layout(prefix, key).lease
    with client.pipeline(transaction=True) as pipe:
        try:
            pipe.watch(lease_key)  # type: ignore[no-untyped-call]
            value = pipe.get(lease_key)
            if value is None:
                return False
            text = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
            owner = text.partition(":")[2]
            if not owner or owner_fingerprint(owner) != holder:
                return None
            pipe.multi()
            pipe.delete(lease_key)
            return bool(pipe.execute()[0])
        except redis.WatchError:
            return None


@click.command()
@_common
@click.argument("key")
@click.option("--force", is_flag=True, help="Release whoever holds KEY (required).")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def release(url: str | None, prefix: str, as_json: bool, key: str, force: bool, yes: bool) -> None:
    """Delete the lease on KEY whoever holds it (an operator's escape hatch; needs --force).

    It shows the holder and asks (unless --yes), then deletes that holder's lease only: if the
    lease changed hands meanwhile nothing is deleted (exit 1). The fencing counter stays: the next
    grant gets a larger token than the released one.
    """
    if not force:
        raise click.UsageError(_RELEASE_REFUSED)
    with _target(url, prefix) as target:
        info = target.manager.inspect(key)
        if info is not None and not yes:
            click.confirm(
                f"release {key!r}, held by {info.owner_fingerprint} with fencing token"
                f" {info.fencing_token}, {info.ttl_ms} ms left?",
                abort=True,
                err=True,
            )
        outcome = (
            False
            if info is None
            else release_holder(target.client_for(key), prefix, key, info.owner_fingerprint)
        )
    released, moved = outcome is True, info is not None and outcome is None
    if as_json:
        row = None if info is None else _lease_row(info)
        _emit_json({"key": key, "released": released, "changed_hands": moved, "lease": row})
    elif moved:
        click.echo(f"{key!r} changed hands since it was read: nothing released; run again")
    elif released:
        assert info is not None
        click.echo(
            f"released {key!r} (holder {info.owner_fingerprint}, fencing token"
            f" {info.fencing_token})"
        )
    else:
        click.echo(f"{key!r} was not held: nothing released")
    sys.exit(1 if moved else 0)
