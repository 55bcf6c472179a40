"""The properties the checker judges, one module each, and their registry.

A property is a module with a ``PROPERTY`` ([`Property`][._base.Property]): its key, letter, title
and ``check`` (a [`Context`][._base.Context] in, an [`Outcome`][._base.Outcome] out). A new property
is one module here plus its name in [`MODULES`][fencedlease_lab.harness.properties.MODULES]; the
checker runs them in that order and ``report.json`` lists them so.
"""

from __future__ import annotations

from importlib import import_module
from typing import Final

from ._base import Property

__all__ = ["MODULES", "REGISTRY"]

#: The property modules, in report order (a, b, c...).
MODULES: Final = (
    "accepted",
    "lost_update",
    "loss_reported",
    "grant_tokens",
    "recovery",
    "mutual_exclusion",
    "register",
    "transactions",
)

#: Every property, in report order.
REGISTRY: Final[tuple[Property, ...]] = tuple(
    import_module(f".{name}", __name__).PROPERTY for name in MODULES
)
