"""The servers a run of ``fencedlease check`` needs: the Redis the leases live in, the resource
the counter lives in (marked as the check's, counter at 0) and one Toxiproxy proxy per worker.

Each is entered on the run's `ExitStack`, so it is stopped (or its proxy
destroyed) when the run ends; what cannot be had is noted in ``notes``, not raised, where the run
can go on without it.
"""

from __future__ import annotations

import contextlib
from contextlib import ExitStack
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import attrs

from fencedlease import redact_text, redact_url

from ..servers.redis import RedisServer, find_redis_binary, redis_endpoint
from .model import CheckConfig
from .resource_links import proxied_spec
from .resource_spec import MIXED_KINDS
from .resources import ResourceSpec, prepare_resource
from .safety import mark_resource, remove_sqlite_resource
from .topology import Deployment, start_deployment

__all__ = [
    "LeaseRedis",
    "Network",
    "ResourceUnavailable",
    "check_redis_url",
    "delete_run_keys",
    "start_proxies",
    "start_redis",
    "start_resource",
]


class ResourceUnavailable(RuntimeError):
    """The lease Redis or the resource cannot be reached or used (a connection refused, a wrong
    password, a missing permission): the run cannot be done. The message is one line, with
    every password shown as ``***``."""


def _one_line(exc: BaseException, *urls: str | None) -> str:
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    for url in urls:
        if url:
            text = redact_text(text, url)
    return text


@attrs.frozen
class LeaseRedis:
    """The Redis the leases live in: its URL, where it came from, its process if ours, and
    ``own``: whether the check started it (only then may a fault act on the whole server);
    ``deployment``: the Sentinel deployment or Redis Cluster the check started (``--topology``),
    whose workers' ``url`` is ``redis+sentinel://`` or ``redis+cluster://``."""

    url: str
    kind: str
    server: RedisServer | None
    own: bool = True
    deployment: Deployment | None = None

    @property
    def admin_url(self) -> str:
        """A ``redis://`` URL of the lease Redis (of the first primary, on a deployment)."""
        return self.url if self.deployment is None else self.deployment.admin_url


@attrs.frozen
class Network:
    """Each worker's Redis URL (through its Toxiproxy proxy when there is one); ``netns``: each
    worker's network namespace, when the workers have links of their own (the kernel faults),
    else empty."""

    worker_urls: list[str]
    proxies: dict[int, Any]
    kind: str | None
    netns: tuple[str, ...] = ()
    #: The workers' resource spec through the resource proxies (None: direct), and the proxies.
    resource_spec: ResourceSpec | None = None
    resource_proxies: list[Any] = attrs.field(factory=list)


def start_redis(config: CheckConfig, stack: ExitStack, notes: list[str], prefix: str) -> LeaseRedis:
    """The given Redis, else a redis-server of our own (AOF on), else one in Docker.

    A given Redis must answer ``PING`` first; when the run ends, every key under ``prefix`` (the
    run's own, with its random id) is deleted from it, and nothing else.

    With ``config.topology`` ``sentinel`` or ``cluster``: that deployment, started here
    ([`start_deployment`][fencedlease_lab.harness.topology.start_deployment]).

    Raises:
        ResourceUnavailable: the given Redis does not answer (refused, wrong password).
        RedisUnavailable: a deployment that could not be started.
    """
    if config.topology != "standalone":
        deployment = start_deployment(config.topology, stack)
        return LeaseRedis(deployment.url, deployment.describe(), None, deployment=deployment)
    if config.redis_url:
        _ping(config.redis_url)
        # Registered now, run when the run ends (after its workers stopped), even on an error.
        stack.callback(_delete_run_keys_noted, config.redis_url, prefix, notes)
        return LeaseRedis(config.redis_url, "external", None, own=False)
    if find_redis_binary() is not None:
        server = stack.enter_context(RedisServer(appendonly=True, appendfsync="always"))
        kind = f"embedded redis-server {server.version()} (AOF, appendfsync always)"
        return LeaseRedis(server.url, kind, server)
    # No binary: the rest of the documented order (Docker through testcontainers).
    found = stack.enter_context(redis_endpoint(appendonly=True))
    notes.append(
        "no redis-server binary: Redis ran in Docker, so the Redis process faults are unavailable"
    )
    return LeaseRedis(found.url, f"Redis in {found.kind}", None)


def _ping(url: str) -> None:
    import redis

    try:
        with redis.Redis.from_url(url, socket_timeout=5.0, socket_connect_timeout=5.0) as client:
            client.ping()
    except redis.RedisError as exc:
        raise ResourceUnavailable(
            f"cannot use the Redis at {redact_url(url)}: {_one_line(exc, url)}"
        ) from None


def _glob_escape(text: str) -> str:
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


def delete_run_keys(url: str, prefix: str) -> int:
    """Delete from the Redis at ``url`` every key that starts with ``prefix + ":"`` (a run's
    key prefix, random id included: the keys that run made), nothing else; the number deleted.

    Raises:
        redis.RedisError: the Redis failed.
    """
    import redis

    pattern = _glob_escape(prefix) + ":*"
    deleted = 0
    with redis.Redis.from_url(url, socket_timeout=5.0, socket_connect_timeout=5.0) as client:
        batch: list[bytes] = []
        for key in client.scan_iter(match=pattern, count=500):
            batch.append(key)
            if len(batch) >= 500:
                deleted += int(client.unlink(*batch))
                batch = []
        if batch:
            deleted += int(client.unlink(*batch))
    return deleted


def _delete_run_keys_noted(url: str, prefix: str, notes: list[str]) -> None:
    try:
        delete_run_keys(url, prefix)
    except Exception as exc:  # said, never raised over the run's own outcome
        notes.append(
            f"the run's keys {prefix}:* could not be deleted from the Redis at"
            f" {redact_url(url)}: {_one_line(exc, url)}"
        )


def start_resource(
    config: CheckConfig, out_dir: Path, redis_url: str, stack: ExitStack, notes: list[str]
) -> ResourceSpec:
    """Find or start the resource, mark it as the check's, and set the counter to 0. A Redis
    resource whose marker this run set gets its counter, fence and marker keys deleted when the
    run ends (a Redis that held them before keeps them).

    Raises:
        ResourceUnavailable: the resource cannot be reached or used (one line, redacted).
        UnsafeTargetError: it holds data the check did not make.
    """
    spec = attrs.evolve(_resource(config, out_dir, redis_url, stack, notes), keys=config.lease_keys)
    try:
        for part in spec.parts or (spec,):
            made = mark_resource(part)
            if made and part.family == "redis":
                stack.callback(_delete_redis_resource_noted, part, notes)
        prepare_resource(spec)
    except ValueError:
        raise
    except Exception as exc:
        if not _is_backend_error(exc):
            raise
        raise ResourceUnavailable(
            f"cannot use the {spec.kind} resource {redact_url(spec.target)}:"
            f" {_one_line(exc, spec.target, redis_url)}"
        ) from None
    return spec


def _is_backend_error(exc: Exception) -> bool:
    """A connection or database error of the resource's driver (redis-py, psycopg, sqlite3)."""
    import sqlite3

    import redis

    if isinstance(exc, (redis.RedisError, sqlite3.Error, OSError)):
        return True
    try:
        import psycopg
    except ImportError:  # pragma: no cover - the lab extra brings it
        return False
    return isinstance(exc, psycopg.Error)


def _delete_redis_resource_noted(spec: ResourceSpec, notes: list[str]) -> None:
    import redis

    from .resources import open_store
    from .safety import redis_marker_key

    try:
        store = open_store(spec)
        try:
            made = store.data_keys()
        finally:
            store.close()
        with redis.Redis.from_url(spec.target, socket_timeout=5.0) as client:
            client.delete(*made, redis_marker_key(spec))
    except Exception as exc:
        notes.append(
            f"the Redis resource's keys could not be deleted from {redact_url(spec.target)}:"
            f" {_one_line(exc, spec.target)}"
        )


def _resource(
    config: CheckConfig, out_dir: Path, redis_url: str, stack: ExitStack, notes: list[str]
) -> ResourceSpec:
    kind = config.resource
    family = ResourceSpec(kind, "").family
    if family == "mixed":  # one of each part's kind, each part with the keys dealt to it
        parts = tuple(
            attrs.evolve(
                _resource(attrs.evolve(config, resource=part), out_dir, redis_url, stack, notes),
                keys=ResourceSpec.dealt(config.lease_keys, part),
            )
            for part in MIXED_KINDS
        )
        return ResourceSpec(kind, "", parts=parts)
    if family == "sqlite":
        path = config.resource_url or str(out_dir / "resource.sqlite3")
        # Only a file of the check's own (marked) is removed; any other was refused above.
        remove_sqlite_resource(path)
        return ResourceSpec(kind, path)
    if family == "memory":
        import multiprocessing

        from .resources_memory import start_memory_resource

        spec, manager = start_memory_resource(
            multiprocessing.get_context("spawn"), kind, ResourceSpec(kind, "").name
        )
        stack.enter_context(manager)  # keeps it alive; shut down when the run ends
        return spec
    if family == "redis":
        if config.resource_url:
            return ResourceSpec(kind, config.resource_url)
        if config.redis_url:
            notes.append("the Redis resource shares the external Redis (another key)")
            return ResourceSpec(kind, redis_url)
        # A server of its own, with AOF: the nemeses restart the lease Redis, not the data's.
        data = stack.enter_context(RedisServer(appendonly=True, appendfsync="always"))
        return ResourceSpec(kind, data.url)
    if config.resource_url:
        return ResourceSpec(kind, config.resource_url)
    from ..servers.postgres import postgres_dsn

    return ResourceSpec(kind, stack.enter_context(postgres_dsn()))


def start_proxies(
    config: CheckConfig,
    names: list[str],
    run_id: str,
    redis_url: str,
    stack: ExitStack,
    notes: list[str],
    listen_hosts: list[str] | None = None,
    resource: ResourceSpec | None = None,
    resource_timeout_ms: int = 5000,
) -> Network:
    """One Toxiproxy proxy per worker in front of the lease Redis, listening on 127.0.0.1 or on
    ``listen_hosts[index]``, and, given the ``resource``, one the workers share in front of each of
    its networked servers (its client timeout then ``resource_timeout_ms``,
    [`proxied_spec`][fencedlease_lab.harness.resource_links.proxied_spec]); without Toxiproxy
    (or with a URL it cannot proxy) the workers connect straight, and a note says so."""
    direct = Network([redis_url] * config.workers, {}, None)
    upstream = _upstream(redis_url)
    if not config.toxiproxy:
        return direct
    if config.topology != "standalone":
        notes.append(
            f"--topology {config.topology}: the workers find the nodes through the"
            f" {'sentinels' if config.topology == 'sentinel' else 'cluster'}, so no Toxiproxy"
            " and no network faults"
        )
        return direct
    if upstream is None:
        notes.append("Redis URL is not redis://host:port: no Toxiproxy, no network faults")
        return direct
    worker_urls = list(direct.worker_urls)
    proxies: dict[int, Any] = {}
    try:
        from ..servers.toxiproxy import toxiproxy_endpoint

        endpoint = stack.enter_context(toxiproxy_endpoint())
        client = endpoint.client()
        for index, name in enumerate(names):
            proxy = client.create(
                upstream=f"{upstream[0]}:{upstream[1]}",
                name=f"fencedlease-check-{run_id}-{name}",
                listen=f"{listen_hosts[index] if listen_hosts else '127.0.0.1'}:0",
            )
            stack.callback(_destroy, endpoint, proxy)
            proxies[index] = proxy
            worker_urls[index] = _proxied_url(redis_url, proxy.listen)
        kind = f"{endpoint.kind} Toxiproxy at {endpoint.api_url}"
        spec: ResourceSpec | None = None
        resource_proxies: list[Any] = []
        if resource is not None:

            def make(upstream: str) -> Any:
                made = client.create(
                    upstream=upstream,
                    name=f"fencedlease-check-{run_id}-data-{upstream.replace(':', '-')}",
                    listen="127.0.0.1:0",
                )
                stack.callback(_destroy, endpoint, made)
                return made

            spec, resource_proxies = proxied_spec(resource, make, resource_timeout_ms)
    except Exception as exc:  # no Toxiproxy: run without network faults, and say so
        notes.append(f"Toxiproxy unavailable ({type(exc).__name__}: {exc}): no network faults")
        return direct
    return Network(
        worker_urls, proxies, kind, resource_spec=spec, resource_proxies=resource_proxies
    )


def _upstream(url: str) -> tuple[str, int, str] | None:
    """``(host, port, db path)`` of a ``redis://`` URL, None for other schemes."""
    parts = urlsplit(url)
    if parts.scheme not in ("redis",) or parts.hostname is None:
        return None
    return parts.hostname, parts.port or 6379, parts.path or "/0"


def _proxied_url(url: str, listen: str) -> str:
    parts = urlsplit(url)
    auth = ""
    if parts.username or parts.password:
        auth = f"{parts.username or ''}:{parts.password or ''}@"
    return f"redis://{auth}{listen}{parts.path or '/0'}"


def _destroy(endpoint: Any, proxy: Any) -> None:
    with contextlib.suppress(Exception):
        endpoint.client()
        proxy.destroy()


def check_redis_url(url: str) -> None:
    """A Redis URL the library takes (scheme, port, options), checked with no I/O before any
    process starts.

    Raises:
        ValidationError: (a ``ValueError``) naming what is wrong, the password shown as ``***``.
    """
    from fencedlease import LeaseManager, ValidationError

    if url.partition("://")[0].lower() not in ("redis", "rediss", "unix"):
        raise ValidationError(
            "redis_url",
            f"a Redis URL is redis://, rediss:// or unix://; got {redact_text(url, url)!r}",
        )
    LeaseManager.from_url(url, prefix="fencedlease-check").close()
