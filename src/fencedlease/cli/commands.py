"""The ``fencedlease`` command group and what its commands share.

[`main`][fencedlease.cli.commands.main] is the click group behind the ``fencedlease`` script and
``python -m fencedlease``. It imports a command's module only when that command runs (or
``--help`` lists it): the operator's ``doctor``, ``inspect``, ``list`` and ``release``
(`fencedlease.cli.operator_cli`) need the ``cli`` extra only (click, rich) and never import the
harness, while ``check`` (`fencedlease_lab.cli`) needs the ``lab`` extra and says so when a
package of it is missing (`require_extra`). The store's URL comes from the option, else
``FENCEDLEASE_URL`` (`store_url`).
"""

from __future__ import annotations

import importlib
import importlib.util
import warnings
from collections.abc import Mapping
from typing import Any, Final

import click
from click.core import ParameterSource

from fencedlease import url_from_env

from .extras import install_line

__all__ = [
    "COMMANDS",
    "main",
    "require_extra",
    "store_url",
    "url_option",
]

#: Each command, and the ``module:attribute`` it is (imported when the command is asked for).
COMMANDS: Final = {
    "check": "fencedlease_lab.cli:check",
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


class _LazyGroup(click.Group):
    """A group that imports a command of `COMMANDS` when it is first asked for."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            module, _, attribute = COMMANDS[cmd_name].partition(":")
            command: Any = getattr(importlib.import_module(module), attribute)
            self.add_command(command, cmd_name)
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
