"""What the operator's commands share: the ``--url``, ``--prefix`` and ``--json`` options, the
store a URL names, and how a failure and a table are shown."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any, NoReturn, TypeVar

import click
import redis

from fencedlease import FencedLeaseError, ValidationError, redact_text
from fencedlease import redis_keys as layout

from ..commands import url_option
from ..redis_target import RedisTarget, open_target

F = TypeVar("F", bound=Callable[..., Any])


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
