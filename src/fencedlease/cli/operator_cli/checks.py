"""``fencedlease doctor``: the checks of [`fencedlease.cli.doctor`][] run against a Redis, shown
as a table or one JSON document."""

from __future__ import annotations

import sys

import click
import redis

from fencedlease import redact_text

from ..doctor import Check, check_eviction, check_persistence, exit_code, run_checks
from ..doctor_targets import topology_checks
from .options import _common, _emit_json, _shown, _target

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
    A redis+cluster:// URL: every node of the cluster (checks named check@host:port): each
    primary's checks, its role (replicas and their lag) and cluster-require-full-coverage,
    each replica's role, eviction policy and persistence. redis+sentinel://: how many
    sentinels name which primary, then the primary they name now and its replicas, as on a
    cluster.

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

    def run_replica(client: redis.Redis) -> list[Check]:
        return [check_eviction(client), check_persistence(client, allow_rdb=allow_rdb)]

    with _target(url, prefix) as target:
        checks = topology_checks(target, run, run_replica)
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
