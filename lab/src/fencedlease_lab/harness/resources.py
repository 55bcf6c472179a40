"""Where the workload's counters live: one
[`CounterStore`][fencedlease_lab.harness.resource_spec.CounterStore] per fencing surface of the
library.

One counter per key: every access names the key it is for (the lease's key unless told
otherwise), so a workload over many keys gets one counter, row or Redis key per key. The kinds,
selected by ``fencedlease check --resource``:

- ``sqlite``, ``postgres``: [`fencedlease.db.fence_guard`][] on one guard row per key, inside
  each access's transaction (it refuses duplicate grants too); [`.resources_sql`][].
- ``sqlite-rows``, ``postgres-rows``: [`fencedlease.db.fenced_read`][] and
  [`fencedlease.db.fenced_update`][] on the counter's own row (token and lease-key columns);
  [`.resources_sql`][].
- ``sqlite-append``, ``postgres-append``: the guard, and each critical section is also a
  list-append transaction over the key's lists, checked by [`.elle`][]; [`.resources_txn`][].
- ``sqlite-strict``: the guard in strict mode (a token accepted once); [`.resources_sql`][].
- ``redis``, ``redis-strict``: a [`fencedlease.RedisFencedResource`][] per key (not strict,
  strict: a lease's first fenced access strict, its later ones not, and a
  ``recheck`` before its write, which the
  strict resource must refuse); this module.
- ``memory``, ``memory-strict``: an in-process [`fencedlease.FencedResource`][] (not strict,
  strict) per key, in a resource process the workers talk to, whose connection threads share
  them; [`.resources_memory`][].
- ``mixed`` (the default): the keys dealt in turn to ``sqlite``, ``memory``, ``redis``,
  ``sqlite-rows``, ``memory-strict``, ``sqlite-strict`` and ``redis-strict``;
  [`.resources_mixed`][].

A plain access (``fenced=False``) checks nothing. Each process opens its own handle with
[`open_store`][fencedlease_lab.harness.resources.open_store]. An access raises
[`StaleTokenError`][fencedlease.StaleTokenError] when refused (``last_token`` as the resource
reported it) and [`BackendError`][fencedlease.BackendError] when the store fails (the effect is
unknown).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from fencedlease import BackendError, Lease, RedisFencedResource, StaleTokenError, redis_keys
from fencedlease.redis_fencing import DEFAULT_PREFIX

from .resource_spec import (
    COUNTER_TABLE,
    LIST_TABLE,
    RESOURCES,
    CounterStore,
    ResourceKind,
    ResourceSpec,
    access_key,
)

T = TypeVar("T")

__all__ = [
    "COUNTER_TABLE",
    "LIST_TABLE",
    "RESOURCES",
    "CounterStore",
    "ResourceKind",
    "ResourceSpec",
    "access_key",
    "base_data_key",
    "open_store",
    "prepare_resource",
    "read_final_counter",
    "read_final_counters",
    "registry_key",
]


class _RedisStore:
    """The counters in Redis, one [`RedisFencedResource`][fencedlease.RedisFencedResource] string
    per key (named by its spec's
    [`resource_name`][fencedlease_lab.harness.resource_spec.ResourceSpec.resource_name]);
    plain GET/SET unfenced. The keys ever used are kept in a set
    ([`registry_key`][fencedlease_lab.harness.resources.registry_key]), so that the final read and
    the clean-up find them all."""

    def __init__(self, spec: ResourceSpec) -> None:
        self._spec = spec
        timeout_s = spec.timeout_ms / 1000
        # No transparent retry: an access whose reply was lost is sent once, its outcome unknown
        # (a second send would be a second access the history does not show).
        self._client = redis.Redis.from_url(
            spec.target,
            socket_timeout=timeout_s,
            socket_connect_timeout=timeout_s,
            retry=Retry(NoBackoff(), 0),
        )
        self._resources: dict[str, RedisFencedResource] = {}
        self._registry = registry_key(spec)
        self._strict = spec.kind.endswith("-strict")
        # key -> (token, owner token) of the lease whose fenced access was last accepted here
        # (strict kind: that lease's next access is not its first).
        self._admitted: dict[str, tuple[int | None, str]] = {}

    def _resource(self, key: str, strict: bool = False) -> RedisFencedResource:
        resource = self._resources.get(key)
        if resource is None:
            resource = RedisFencedResource(self._client, self._spec.resource_name(key))
            with _redis_errors("SADD"):
                self._client.sadd(self._registry, key)
            self._resources[key] = resource
        if strict:
            return RedisFencedResource(self._client, self._spec.resource_name(key), strict=True)
        return resource

    def _fenced(self, lease: Lease, key: str, access: Callable[[RedisFencedResource], T]) -> T:
        """``access`` on the resource of ``key`` for a fenced access of ``lease`` (strict kind:
        strict for the lease's first accepted access of ``key``)."""
        ident = (lease.fencing_token, lease.owner_token)
        strict = self._strict and self._admitted.get(key) != ident
        result = access(self._resource(key, strict))
        if self._strict:
            self._admitted[key] = ident
        return result

    def strict_key(self, key: str) -> bool:
        """Whether ``key``'s resource accepts each token once (the strict kind)."""
        return self._strict

    def recheck(self, lease: Lease, key: str | None = None) -> bool:
        """A strict fenced read of ``key`` (the lease's) once more with ``lease``, whose token
        the resource has accepted already: True when accepted again (a strict resource must
        not), False when refused."""
        try:
            self._resource(access_key(lease, key), strict=True).get(lease)
        except StaleTokenError:
            return False
        return True

    def prepare(self) -> None:
        """Delete the counters and fences of an earlier run's keys (those of the registry)."""
        for key in self.keys():
            resource = RedisFencedResource(self._client, self._spec.resource_name(key))
            self._client.delete(resource.data_key, resource.fence_key)
        self._client.delete(self._registry)

    def keys(self) -> list[str]:
        """The keys in the registry, sorted."""
        return sorted(k.decode() for k in self._client.smembers(self._registry))  # type: ignore[union-attr]

    def data_keys(self) -> list[str]:
        """Every Redis key this resource made: the registry and each key's data and fence."""
        made = [self._registry]
        for key in self.keys():
            resource = RedisFencedResource(self._client, self._spec.resource_name(key))
            made += [resource.data_key, resource.fence_key]
        return made

    def read(self, lease: Lease, *, fenced: bool, key: str | None = None) -> int:
        resource = self._resource(access_key(lease, key))
        if fenced:
            raw = self._fenced(lease, access_key(lease, key), lambda r: r.get(lease))
        else:
            with _redis_errors("GET"):
                raw = self._client.get(resource.data_key)
        return int(raw or 0)

    def write(self, value: int, lease: Lease, *, fenced: bool, key: str | None = None) -> None:
        resource = self._resource(access_key(lease, key))
        if fenced:
            self._fenced(lease, access_key(lease, key), lambda r: r.set(value, lease))
            return
        with _redis_errors("SET"):
            self._client.set(resource.data_key, value)

    def finals(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for key in self.keys():
            resource = RedisFencedResource(self._client, self._spec.resource_name(key))
            out[key] = int(self._client.get(resource.data_key) or 0)
        return out

    def close(self) -> None:
        self._client.close()


def base_data_key(spec: ResourceSpec) -> str:
    """The data key a [`RedisFencedResource`][fencedlease.RedisFencedResource] named ``spec.name``
    would have (the check's keys of a Redis resource are named after it)."""
    return f"{redis_keys(DEFAULT_PREFIX, spec.name).base}:resource"


def registry_key(spec: ResourceSpec) -> str:
    """The Redis set naming every key a Redis resource was used for."""
    return f"{base_data_key(spec)}:keys"


@contextlib.contextmanager
def _redis_errors(what: str) -> Iterator[None]:
    """A redis-py error inside is a [`BackendError`][fencedlease.BackendError] (the original in
    ``__cause__``)."""
    try:
        yield
    except redis.RedisError as exc:
        raise BackendError(f"redis {what} failed: {exc}") from exc


def open_store(spec: ResourceSpec) -> Any:
    """A new handle on the counters described by ``spec`` (one per process): a
    [`CounterStore`][fencedlease_lab.harness.resource_spec.CounterStore]."""
    if spec.family == "mixed":
        from .resources_mixed import MixedStore

        return MixedStore(spec, open_store)
    if spec.family == "redis":
        return _RedisStore(spec)
    if spec.family == "memory":
        from .resources_memory import MemoryStore

        return MemoryStore(spec)
    if spec.kind.endswith("-append"):
        from .resources_txn import AppendStore

        return AppendStore(spec)
    from .resources_sql import open_sql_store

    return open_sql_store(spec)


def prepare_resource(spec: ResourceSpec) -> None:
    """Empty the counters and clear the fences of ``spec`` (before the workers start)."""
    store = open_store(spec)
    try:
        store.prepare()
    finally:
        store.close()


def read_final_counters(spec: ResourceSpec) -> dict[str, int]:
    """Each key's counter, read plainly (after the workers stopped): every key of
    ``spec.keys`` in their order (0 when never written), then any other key written."""
    store = open_store(spec)
    try:
        finals = dict(store.finals())
    finally:
        store.close()
    out = {key: finals.pop(key, 0) for key in spec.keys}
    out.update(finals)
    return out


def read_final_counter(spec: ResourceSpec) -> int:
    """The sum of the counters, read plainly (after the workers stopped): with one key, its
    counter; with many, the number of increments every key's counter holds together."""
    return sum(read_final_counters(spec).values())
