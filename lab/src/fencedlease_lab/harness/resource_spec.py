"""What every resource kind shares: the kinds, the tables,
[`ResourceSpec`][fencedlease_lab.harness.resource_spec.ResourceSpec] and the
[`CounterStore`][fencedlease_lab.harness.resource_spec.CounterStore] protocol
([`resources`][fencedlease_lab.harness.resources] opens the stores)."""

from __future__ import annotations

from typing import Final, Literal, Protocol, get_args

import attrs

from fencedlease import Lease

__all__ = [
    "COUNTER_TABLE",
    "LIST_TABLE",
    "MIXED_KINDS",
    "RESOURCES",
    "CounterStore",
    "ResourceKind",
    "ResourceSpec",
    "access_key",
]

ResourceKind = Literal[
    "mixed",
    "sqlite",
    "redis",
    "postgres",
    "sqlite-rows",
    "postgres-rows",
    "sqlite-strict",
    "redis-strict",
    "sqlite-append",
    "postgres-append",
    "memory",
    "memory-strict",
]

#: Every kind, in the order ``--resource`` lists them.
RESOURCES: Final[tuple[ResourceKind, ...]] = get_args(ResourceKind)

#: The kinds ``mixed`` deals the keys to, in turn (key i: ``MIXED_KINDS[i % 7]``): the SQL guard,
#: ``FencedResource`` (not strict), ``RedisFencedResource``, the fenced rows, ``FencedResource``
#: strict, the SQL guard strict, ``RedisFencedResource`` strict; so every run meets every fencing
#: surface these cover.
MIXED_KINDS: Final[tuple[ResourceKind, ...]] = (
    "sqlite", "memory", "redis", "sqlite-rows", "memory-strict", "sqlite-strict", "redis-strict",
)  # fmt: skip

#: The counters' table in the SQL resources (one row per key).
COUNTER_TABLE: Final = "fencedlease_check_counter"
#: The lists of the list-append resources (one row per list; see :mod:`.resources_txn`).
LIST_TABLE: Final = "fencedlease_check_lists"


@attrs.frozen
class ResourceSpec:
    """Where the counters live: ``kind`` and ``target`` (an SQLite path, a Redis URL, a
    PostgreSQL DSN, the ``host:port`` of the memory resource's process); ``name`` prefixes the
    fenced resources' names (guard rows and Redis resources are ``<name>/<key>``); ``secret`` is
    the memory resource process's authentication key (hex; never shown). ``keys``: the run's
    lease keys (each has a counter, read at the end even when never written); empty: the keys
    written. ``parts``: for ``mixed`` (whose ``target`` is empty), the spec of each kind of
    [`MIXED_KINDS`][fencedlease_lab.harness.resource_spec.MIXED_KINDS], in that order, each
    with the keys dealt to it ([`part`][fencedlease_lab.harness.resource_spec.ResourceSpec.part]);
    empty for the others. ``timeout_ms``: the client's socket timeout on a networked target (a
    reply later than that is an access of unknown outcome)."""

    kind: ResourceKind
    target: str
    name: str = "check-counter"
    secret: str = attrs.field(default="", repr=False)
    keys: tuple[str, ...] = ()
    parts: tuple[ResourceSpec, ...] = ()
    timeout_ms: int = 5000

    @property
    def family(self) -> Literal["sqlite", "postgres", "redis", "memory", "mixed"]:
        """Where the data lives: ``sqlite``, ``postgres``, ``redis``, ``memory``, or ``mixed``
        (in the ``parts``)."""
        return self.kind.split("-")[0]  # type: ignore[return-value]

    def part(self, key: str) -> ResourceSpec:
        """The spec that holds the counter of ``key``: for ``mixed``, the part of the kind the
        key's index in ``keys`` is dealt (``MIXED_KINDS[index % 7]``; a key not in ``keys``:
        the first part); else this spec."""
        if not self.parts:
            return self
        index = self.keys.index(key) if key in self.keys else 0
        return self.parts[index % len(self.parts)]

    @staticmethod
    def dealt(keys: tuple[str, ...], kind: str) -> tuple[str, ...]:
        """The keys of ``keys`` that ``mixed`` deals to ``kind`` (one of
        [`MIXED_KINDS`][fencedlease_lab.harness.resource_spec.MIXED_KINDS])."""
        at = MIXED_KINDS.index(kind)
        return tuple(key for i, key in enumerate(keys) if i % len(MIXED_KINDS) == at)

    def resource_name(self, key: str) -> str:
        """The fenced resource's name for the counter of ``key``: ``<name>/<key>``."""
        return f"{self.name}/{key}"


class CounterStore(Protocol):
    """One process's handle on the counters. ``read``/``write`` the counter of ``key`` (the
    lease's key when None), fenced with ``lease`` when told; both raise
    [`StaleTokenError`][fencedlease.StaleTokenError] when refused and
    [`BackendError`][fencedlease.BackendError] when the store fails (the write's effect is then
    unknown). ``finals`` maps each key ever written to its counter."""

    def read(self, lease: Lease, *, fenced: bool, key: str | None = None) -> int: ...

    def write(self, value: int, lease: Lease, *, fenced: bool, key: str | None = None) -> None: ...

    def finals(self) -> dict[str, int]: ...

    def prepare(self) -> None: ...

    def close(self) -> None: ...


def access_key(lease: Lease, key: str | None) -> str:
    """The key an access is for: ``key``, else the lease's."""
    return key if key is not None else str(lease.key)
