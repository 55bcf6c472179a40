"""The workers' Toxiproxy links to the networked resources (the Redis resource, PostgreSQL), so
that the nemesis can fault the data's links as it does the lease's, and some accesses end
with an unknown outcome (a reply lost or late past the client's timeout: the access may have
happened).

[`proxied_spec`][fencedlease_lab.harness.resource_links.proxied_spec] rewrites the workers'
resource spec to reach each server through a proxy (one per server: the parts of ``mixed`` that
share a server share it); SQLite and the memory resource stay direct.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import attrs

from .resource_spec import ResourceSpec

__all__ = ["NETWORKED", "proxied_spec", "resource_timeout_ms"]

#: The resource families reached over TCP, hence through a proxy.
NETWORKED = frozenset({"redis", "postgres"})


def resource_timeout_ms(ttl_ms: int) -> int:
    """The resource client's socket timeout behind a proxy, in milliseconds: ttl/2 (at least
    100), the lease client's, so that a reply late past it is an unknown outcome well within
    the lease."""
    return max(100, ttl_ms // 2)


def _upstream(target: str) -> str | None:
    """``host:port`` of a ``redis://`` or ``postgresql://`` URL, None for any other target."""
    parts = urlsplit(target)
    if parts.scheme not in ("redis", "postgresql", "postgres") or parts.hostname is None:
        return None
    return f"{parts.hostname}:{parts.port or (6379 if parts.scheme == 'redis' else 5432)}"


def _through(target: str, listen: str) -> str:
    """``target`` with its host and port replaced by ``listen`` (credentials, path and query
    kept)."""
    parts = urlsplit(target)
    auth = parts.netloc.rpartition("@")[0]
    return urlunsplit(parts._replace(netloc=f"{auth}@{listen}" if auth else listen))


def proxied_spec(
    spec: ResourceSpec, make_proxy: Callable[[str], Any], timeout_ms: int
) -> tuple[ResourceSpec, list[Any]]:
    """``spec`` (a part of ``mixed`` each) with every networked target reached through a proxy
    ``make_proxy(upstream)`` makes (``upstream``: ``host:port``; the proxy's ``listen`` is its
    ``host:port``), its client timeout ``timeout_ms``; and the proxies made, in order. Targets
    that are not a ``redis://`` or ``postgresql://`` URL stay as they are."""
    made: dict[str, Any] = {}

    def rewrite(part: ResourceSpec) -> ResourceSpec:
        upstream = _upstream(part.target) if part.family in NETWORKED else None
        if upstream is None:
            return part
        if upstream not in made:
            made[upstream] = make_proxy(upstream)
        return attrs.evolve(
            part, target=_through(part.target, made[upstream].listen), timeout_ms=timeout_ms
        )

    if spec.parts:
        return attrs.evolve(spec, parts=tuple(rewrite(p) for p in spec.parts)), list(made.values())
    return rewrite(spec), list(made.values())
