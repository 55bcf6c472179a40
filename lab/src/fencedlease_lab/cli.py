"""``fencedlease check``: the correctness harness (``docs/harness.md``), a command of the library's
``fencedlease`` script ([`fencedlease.cli.commands.main`][]), which finds it through the
entry-point group ``fencedlease.commands`` this distribution registers (``check``), so the library
never imports the lab. ``doctor``, ``inspect``, ``list`` and ``release`` are the library's own
(`fencedlease.cli.operator_cli`, ``docs/operations.md``).

Exit status of ``check``: 0 when the run has no violation and proved something, 1 when it has
violations, 2 for a usage error, a run that could not be done (no Redis, a wrong password, an
unreachable resource, workers that would not start) or one that proved nothing (no grant, no
access accepted by the resource, no fault injected though faults were asked for).
"""

from __future__ import annotations

import secrets
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import click
from click.core import ParameterSource

from fencedlease.cli.commands import require_extra, url_option
from fencedlease.cli.extras import LAB_PACKAGES

from .harness.kinds import (
    DEFAULT_FAULTS,
    FENCINGS,
    TOPOLOGIES,
    TOPOLOGY_DEFAULTS,
    default_replica_acks,
)
from .harness.nemesis import FAULTS, parse_faults
from .harness.resources import RESOURCES
from .harness.workload import MODES, WORKER_KINDS

if TYPE_CHECKING:
    from rich.table import Table

    from .harness.campaign import CampaignRow
    from .harness.model import CheckConfig, CheckResult
    from .harness.run import Progress

__all__ = ["check"]


def _faults(ctx: click.Context, param: click.Parameter, value: str) -> tuple[str, ...]:
    try:
        return tuple(parse_faults(value))
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


@click.command()
@click.option(
    "--redis-url",
    callback=url_option,
    help="Use this Redis (default: FENCEDLEASE_URL, else start our own redis-server).",
)
@click.option("--workers", default=8, show_default=True, type=click.IntRange(2, 32))
@click.option(
    "--keys",
    default=32,
    show_default=True,
    type=click.IntRange(1, 4096),
    help="Independent lease keys (each with its own counter) the workers pick from at random.",
)
@click.option(
    "--body",
    "body_ms",
    default=20,
    show_default=True,
    type=click.IntRange(0),
    help="Milliseconds each critical section sleeps between its read and its write.",
)
@click.option(
    "--duration", default=55.0, show_default=True, type=click.FloatRange(1, 3600),
    help="Seconds of workload.",
)  # fmt: skip
@click.option(
    "--faults",
    default="default",
    show_default=True,
    callback=_faults,
    help=f"Comma-separated fault kinds, scheduled at random from --seed (each once, some "
    f"overlapping), 'default' (the first ten, clock, evict and slow-cut once per worker kind, "
    f"slow-grant, slow-handoff), 'all' (every kind) or "
    f"'none'. Kinds: {', '.join(FAULTS)}.",
)
@click.option("--mode", type=click.Choice(MODES), default="fenced", show_default=True)
@click.option(
    "--resource", type=click.Choice(RESOURCES), default="mixed", show_default=True,
    help="Where the counters live, every key on it; 'mixed': the keys dealt in turn to sqlite,"
    " memory, redis, sqlite-rows, memory-strict, sqlite-strict and redis-strict (every fencing"
    " surface in one run).",
)  # fmt: skip
@click.option(
    "--resource-url",
    help="Where the resource lives (SQLite path, Redis URL, DSN). The check drops and recreates its"
    " counter there, so it refuses an existing SQLite file, counter table or Redis key it did not"
    " create itself.",
)
@click.option("--ttl", "ttl_ms", default=1000, show_default=True, type=click.IntRange(100),
              help="Lease TTL in milliseconds.")  # fmt: skip
@click.option(
    "--seed", type=int,
    help="Seed for every random choice: the fault schedule, the workers' choices (default: random)."
    " With --runs, the first of the campaign's seeds.",
)  # fmt: skip
@click.option(
    "--out", "out_dir", default="check-out", show_default=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Directory for the run's files: a new or empty one (then marked as the check's), or one"
    " an earlier check made. A non-empty directory the check did not make is refused; in its own"
    " directory the check replaces only its own files.",
)  # fmt: skip
@click.option("--no-toxiproxy", is_flag=True, help="Connect workers straight to Redis.")
@click.option(
    "--workers-kind",
    type=click.Choice(WORKER_KINDS),
    help="Run every worker this way: sync (one thread), threads (threads sharing one"
    " LeaseManager), asyncio (tasks sharing one AsyncLeaseManager). Default: chosen per worker"
    " from the seed.",
)
@click.option(
    "--allow-server-faults",
    is_flag=True,
    help="Also run the faults that act on the whole Redis server (script-flush: every"
    " application's cached scripts; redis-pause/-restart-*: the process and CONFIG SET) on a"
    " --redis-url Redis. Without it they run only on a Redis the check started itself and are"
    " left out otherwise (the summary and report.json say so).",
)
@click.option(
    "--topology", type=click.Choice(TOPOLOGIES), default="standalone", show_default=True,
    help="Where the leases live: one redis-server (or --redis-url); a Sentinel deployment the"
    " check starts (a primary, a replica, three sentinels; workers use redis+sentinel://); a"
    " Redis Cluster it starts (three masters, a replica each; redis+cluster://). --faults"
    " default is then that topology's failover faults.",
)  # fmt: skip
@click.option(
    "--replica-acks", default=None, type=click.IntRange(0, 1),
    help="Replicas that must acknowledge (WAIT) each grant and renewal (--topology sentinel)."
    "  [default: 1 with --topology sentinel, else 0; --replica-acks 0 there is the control:"
    " a failover hands counter tokens out twice]",
)  # fmt: skip
@click.option(
    "--fencing", type=click.Choice(FENCINGS), default="counter", show_default=True,
    help="The workers' tokens: the per-key counter, or clock (max(counter + 1, Redis TIME in"
    " microseconds): they still increase after a failover lost the counter's last writes).",
)  # fmt: skip
@click.option(
    "--replay", type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Run again what this report.json records: its seed, settings and fault schedule. Options"
    " given too (--out, --redis-url, ...) replace the recorded ones; --seed may not be given.",
)  # fmt: skip
@click.option(
    "--runs", type=click.IntRange(1, 10_000), default=1, show_default=True,
    help="A campaign: this many runs, seeds --seed, --seed + 1, ..., each in --out/seed-<seed>;"
    " a table of them is printed and written to --out/campaign.json. Exit 1 if any run found"
    " violations, else 2 if any proved nothing or could not be done.",
)  # fmt: skip
@click.pass_context
def check(
    ctx: click.Context,
    redis_url: str | None,
    workers: int,
    keys: int,
    body_ms: int,
    duration: float,
    faults: tuple[str, ...],
    mode: str,
    resource: str,
    resource_url: str | None,
    ttl_ms: int,
    seed: int | None,
    out_dir: Path,
    no_toxiproxy: bool,
    workers_kind: str | None,
    allow_server_faults: bool,
    topology: str,
    replica_acks: int | None,
    fencing: str,
    replay: Path | None,
    runs: int,
) -> None:
    """Run workers under faults, check the history, report.

    Writes history.jsonl, report.json and timeline.png (and resource.sqlite3 by default) to
    --out. It never deletes what it did not create: an --out or --resource-url holding other
    data is refused (exit 2); on a --redis-url Redis it deletes at the end exactly the keys the
    run made (under its random prefix), and runs no fault that acts on the whole server unless
    --allow-server-faults. Passwords in --redis-url and --resource-url are shown as ***.

    \b
    Exit status:
      0  no violation, and the run proved something
      1  violations (report.json explains each)
      2  the run could not be done (bad option, unreachable Redis or resource, wrong
         password) or proved nothing (no lease granted, no access accepted by the
         resource, no fault injected though faults were asked for)
    """
    require_extra("check", "lab", LAB_PACKAGES)
    import sqlite3

    import redis
    from rich.console import Console
    from rich.live import Live
    from rich.markup import escape

    from fencedlease import FencedLeaseError, redact_text

    from .harness.campaign import campaign_exit_code, read_replay, run_campaign
    from .harness.report import print_summary
    from .harness.run import (
        CheckConfig,
        UnsafeTargetError,
        check_out_dir,
        check_sqlite_resource,
        run_check,
    )
    from .servers.redis import RedisUnavailable

    def scrub(text: str) -> str:
        for url in (redis_url, resource_url, config.redis_url, config.resource_url):
            if url:
                text = redact_text(text, url)
        return text

    config = CheckConfig(
        redis_url=redis_url,
        workers=workers,
        duration_s=duration,
        faults=faults,
        mode=mode,  # type: ignore[arg-type]
        seed=seed,
        out_dir=out_dir,
        resource=resource,  # type: ignore[arg-type]
        resource_url=resource_url,
        ttl_ms=ttl_ms,
        toxiproxy=not no_toxiproxy,
        allow_server_faults=allow_server_faults,
        workers_kind=workers_kind,  # type: ignore[arg-type]
        keys=keys,
        body_ms=body_ms,
        topology=topology,  # type: ignore[arg-type]
        replica_acks=default_replica_acks(topology) if replica_acks is None else replica_acks,
        fencing=fencing,  # type: ignore[arg-type]
    )
    if topology != "standalone" and faults == DEFAULT_FAULTS:
        config = attrs.evolve(config, faults=TOPOLOGY_DEFAULTS[topology])
    if replay is not None:
        if seed is not None or runs > 1:
            raise click.UsageError("--replay runs the recorded seed once: leave out --seed, --runs")
        try:
            config = read_replay(replay, {**_given(ctx, config), "out_dir": out_dir})
        except ValueError as exc:
            raise click.UsageError(scrub(str(exc))) from None
    elif runs > 1 and seed is None:
        config = attrs.evolve(config, seed=secrets.randbelow(2**31))
    try:  # before anything starts: refuse a target holding someone else's data
        check_out_dir(out_dir)
        if config.resource.startswith("sqlite") and config.resource_url:
            check_sqlite_resource(config.resource_url)
    except UnsafeTargetError as exc:
        raise click.UsageError(str(exc)) from None
    console = Console()
    console.print(
        f"fencedlease check: {config.workers} workers, {config.keys} keys, {config.duration_s:g} s,"
        f" mode {config.mode}, topology {config.topology}, resource {config.resource}, faults:"
        f" {', '.join(config.faults) or 'none'}"
        + (f", replaying seed {config.seed} from {replay}" if replay is not None else "")
        + (f", {runs} runs from seed {config.seed}" if runs > 1 else "")
    )
    errors = (
        RedisUnavailable, RuntimeError, ValueError, OSError, redis.RedisError, FencedLeaseError,
        sqlite3.Error,
    )  # fmt: skip

    def one(run_config: CheckConfig) -> CheckResult:
        with Live(console=console, refresh_per_second=5, transient=True) as live:

            def show(progress: Progress) -> None:
                live.update(_progress_table(progress))

            return run_check(run_config, show)

    if runs > 1:

        def row_done(row: CampaignRow) -> None:
            console.print(f"seed {row.seed}: {row.verdict}, {row.violations} violation(s)"
                          + (f" ({escape(scrub(row.error))})" if row.error else ""))  # fmt: skip

        try:
            rows = run_campaign(config, runs, one, on_row=row_done, errors=errors)
        except UnsafeTargetError as exc:
            raise click.UsageError(scrub(str(exc))) from None
        console.print(_campaign_table(rows))
        console.print(f"campaign: {out_dir / 'campaign.json'}")
        sys.exit(campaign_exit_code(rows))
    try:
        result = one(config)
    except UnsafeTargetError as exc:
        raise click.UsageError(scrub(str(exc))) from None
    except errors as exc:
        console.print(f"[bold red]error:[/] {escape(scrub(f'{type(exc).__name__}: {exc}'))}")
        sys.exit(2)
    console.print(f"redis: {result.redis}; toxiproxy: {result.toxiproxy or 'none'}")
    print_summary(console, result)  # prints the notes too, once
    sys.exit(result.exit_code)


#: Options a replay takes anew when given, and the settings they replace.
_REPLACES = {
    "redis_url": "redis_url", "workers": "workers", "duration": "duration_s", "faults": "faults",
    "mode": "mode", "resource": "resource", "resource_url": "resource_url", "ttl_ms": "ttl_ms",
    "no_toxiproxy": "toxiproxy", "allow_server_faults": "allow_server_faults", "keys": "keys",
    "body_ms": "body_ms", "workers_kind": "workers_kind", "topology": "topology",
    "replica_acks": "replica_acks", "fencing": "fencing",
}  # fmt: skip


def _given(ctx: click.Context, config: CheckConfig) -> dict[str, Any]:
    """The settings of ``config`` whose options were given (command line or environment)."""
    given = (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)
    return {
        field: getattr(config, field)
        for param, field in _REPLACES.items()
        if ctx.get_parameter_source(param) in given
    }


def _campaign_table(rows: list[CampaignRow]) -> Table:
    from rich.table import Table

    table = Table(title="fencedlease check: campaign", title_justify="left")
    for column in ("seed", "verdict", "violations", "operations", "faults"):
        table.add_column(column, justify="left" if column == "verdict" else "right")
    for row in rows:
        style = {"pass": "green", "fail": "bold red"}.get(row.verdict, "yellow")
        table.add_row(
            str(row.seed), f"[{style}]{row.verdict}[/]", str(row.violations),
            str(row.operations), str(row.faults),
        )  # fmt: skip
    return table


def _progress_table(progress: Progress) -> Table:
    from rich.table import Table

    from .harness.workload import PHASES

    table = Table(
        title=f"{progress.elapsed_s:5.1f} / {progress.duration_s:g} s   fault: "
        f"{progress.current_fault or '-'}   done: {len(progress.faults_done)}/"
        f"{progress.faults_planned}",
        title_justify="left",
    )
    for column in ("worker", "phase", "token", "grants", "acked", "refused", "lost", "errors"):
        table.add_column(column, justify="right" if column != "phase" else "left")
    for index, fields in enumerate(progress.workers):
        table.add_row(
            f"w{index}",
            PHASES[fields["phase"]] if 0 <= fields["phase"] < len(PHASES) else "?",
            str(fields["token"] or "-"),
            *(str(fields[k]) for k in ("grants", "acked", "refused", "lost", "errors")),
        )
    return table
