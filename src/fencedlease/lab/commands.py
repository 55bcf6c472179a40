"""What every ``fencedlease`` command shares: the store's URL from the environment, its
deprecation said on stderr (`store_url`)."""

from __future__ import annotations

import warnings

import click
from click.core import ParameterSource

from fencedlease import url_from_env

__all__ = ["store_url", "url_option"]


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
