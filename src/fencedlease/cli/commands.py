"""The ``fencedlease`` command group and what its commands share.

[`main`][fencedlease.cli.commands.main] is the click group behind the ``fencedlease`` script and
``python -m fencedlease``. It imports a command's module only when that command runs (or
``--help`` lists it). The operator's ``doctor``, ``inspect``, ``list`` and ``release``
(`fencedlease.cli.operator_cli`, `COMMANDS`) need the ``cli`` extra only (click, rich). Other
commands come from installed distributions through the entry-point group `COMMAND_GROUP`
(``fencedlease.commands``, ``name = "module:attribute"``): the lab (the ``fencedlease-lab``
distribution) adds ``check`` there, so the library never imports the lab, and without the lab
``fencedlease check`` says in one line how to install it (exit status 2, `LAB_COMMANDS`). A
command of a distribution says when a package of its extra is missing (`require_extra`). The
store's URL comes from the option, else ``FENCEDLEASE_URL`` (`store_url`).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import warnings
from collections.abc import Mapping
from typing import Any, Final

import click
from click.core import ParameterSource

from fencedlease import url_from_env

from .extras import LAB_COMMANDS, install_line

__all__ = [
    "COMMANDS",
    "COMMAND_GROUP",
    "main",
    "require_extra",
    "store_url",
    "url_option",
]

#: Each command of the library, and the ``module:attribute`` it is (imported when the command is
#: asked for).
COMMANDS: Final = {
    "doctor": "fencedlease.cli.operator_cli:doctor",
    "inspect": "fencedlease.cli.operator_cli:inspect_lease",
    "list": "fencedlease.cli.operator_cli:list_leases",
    "release": "fencedlease.cli.operator_cli:release",
}


def require_extra(who: str, extra: str, packages: Mapping[str, str]) -> None:
    """Stop command ``who`` with exit status 2 and the `install_line` of ``extra`` when a package
    of ``packages`` (import name -> distribution) cannot be imported; called before anything
    starts, so a long run does not fail at its end. Imports nothing
    (``importlib.util.find_spec``)."""
    for module, distribution in packages.items():
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):  # a blocked import, or a module without a spec
            found = False
        if not found:
            click.echo(install_line(f"fencedlease {who}", extra, distribution), err=True)
            raise SystemExit(2)


#: The entry-point group where an installed distribution adds commands (the lab's ``check``).
COMMAND_GROUP: Final = "fencedlease.commands"


def _installed_commands() -> dict[str, str]:
    """The commands of `COMMAND_GROUP` (name -> ``module:attribute``); the library's own
    `COMMANDS` win a name both have."""
    found = {
        entry.name: entry.value
        for entry in importlib.metadata.entry_points(group=COMMAND_GROUP)
        if entry.name not in COMMANDS
    }
    return {**found, **COMMANDS}


def _not_installed(name: str) -> click.Command:
    """Command ``name`` of the lab when the lab is not installed: whatever its arguments, the
    `install_line` of the ``lab`` extra on stderr and exit status 2."""

    def say(args: tuple[str, ...]) -> None:
        click.echo(install_line(f"fencedlease {name}", "lab", "fencedlease-lab"), err=True)
        raise SystemExit(2)

    return click.Command(
        name,
        callback=say,
        params=[click.Argument(["args"], nargs=-1, type=click.UNPROCESSED)],
        context_settings={"ignore_unknown_options": True},
        add_help_option=False,
        help="Needs the lab (the fencedlease-lab distribution): not installed.",
    )


class _LazyGroup(click.Group):
    """A group that imports a command (`COMMANDS`, then `COMMAND_GROUP`) when it is first asked
    for."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *_installed_commands(), *LAB_COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands:
            where = _installed_commands().get(cmd_name)
            if where is not None:
                module, _, attribute = where.partition(":")
                command: Any = getattr(importlib.import_module(module), attribute)
                self.add_command(command, cmd_name)
            elif cmd_name in LAB_COMMANDS:
                return _not_installed(cmd_name)  # not kept: the lab may be installed later
        return super().get_command(ctx, cmd_name)


@click.group(cls=_LazyGroup)
@click.version_option(package_name="fencedlease")
def main() -> None:
    """fencedlease: distributed leases on Redis with fencing tokens."""


def store_url(given: str | None) -> str | None:
    """``given`` (an option's value) when not None, else [`url_from_env`][fencedlease.url_from_env]
    of ``os.environ``; its ``DeprecationWarning`` (the old ``FENCEDLEASE_REDIS_URL``) is printed on
    stderr as ``warning: ...``, since Python hides that category outside ``__main__``."""
    if given is not None:
        return given
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", DeprecationWarning)
        url = url_from_env()
    for warning in caught:
        click.echo(f"warning: {warning.message}", err=True)
    return url


def url_option(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A click callback for a URL option: `store_url` of its value; a URL taken from the
    environment is recorded as the option's ``ParameterSource.ENVIRONMENT``, as click's own
    ``envvar`` would have it."""
    url = store_url(value)
    if value is None and url is not None and param.name is not None:
        ctx.set_parameter_source(param.name, ParameterSource.ENVIRONMENT)
    return url
