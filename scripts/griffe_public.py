"""A Griffe extension for the reference site: signatures as a caller reads them, and the backend
methods documented by the protocol they implement.

Loaded by ``mkdocs.yml`` (``plugins.mkdocstrings.handlers.python.options.extensions``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import griffe

__all__ = ["PublicSignatures"]


def _objects(obj: griffe.Object) -> Iterator[griffe.Object]:
    yield obj
    for member in obj.members.values():
        if isinstance(member, griffe.Object):
            yield from _objects(member)


def _public_signatures(package: griffe.Module) -> None:
    """Signatures as a caller should read them: a private parameter (``_owns_client``, for the
    library's own use) is left out, and a parameter whose default is a named constant shows the
    constant's value (``ttl_ms: int = 30000``, not ``= DEFAULT_TTL_MS``)."""
    for obj in _objects(package):
        if not isinstance(obj, griffe.Function):
            continue
        for parameter in list(obj.parameters):
            if parameter.name.startswith("_") and not parameter.name.startswith("__"):
                del obj.parameters[parameter.name]
        for parameter in obj.parameters:
            default = parameter.default
            if not isinstance(default, griffe.ExprName):
                continue
            try:
                constant = package.modules_collection[default.canonical_path]
            except (KeyError, ValueError, griffe.AliasResolutionError, griffe.CyclicAliasError):
                continue
            value = getattr(constant, "value", None)
            if value is not None and len(str(value)) <= 40:
                parameter.default = value


def _protocol_docstrings(package: griffe.Module) -> None:
    """A backend method without a docstring takes the one of the protocol method it implements
    (``RedisBackend.acquire`` says what ``LeaseBackend.acquire`` promises): a class implements
    ``LeaseBackend`` (or ``AsyncLeaseBackend``, for ``async def``) when it has all its methods."""
    protocols = []
    for path in ("_core.backend.LeaseBackend", "_core.backend.AsyncLeaseBackend"):
        protocol = package[path]
        if isinstance(protocol, griffe.Class):
            methods = {n: m for n, m in protocol.members.items() if isinstance(m, griffe.Function)}
            protocols.append((protocol, methods))
    for cls in _objects(package):
        if not isinstance(cls, griffe.Class):
            continue
        for protocol, methods in protocols:
            if cls is protocol or not set(methods) <= set(cls.members):
                continue
            for name, method in methods.items():
                own = cls.members[name]
                is_async = "async" in own.labels
                if (
                    isinstance(own, griffe.Function)
                    and own.docstring is None
                    and method.docstring is not None
                    and is_async == ("async" in method.labels)
                ):
                    own.docstring = griffe.Docstring(
                        method.docstring.value, lineno=method.docstring.lineno, parent=own
                    )


class PublicSignatures(griffe.Extension):
    """Applies ``_public_signatures`` and ``_protocol_docstrings`` to a loaded package."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        _public_signatures(pkg)
        _protocol_docstrings(pkg)
