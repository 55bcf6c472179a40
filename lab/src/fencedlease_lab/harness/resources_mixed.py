"""The ``mixed`` resource: the run's keys dealt in turn to the kinds of
[`MIXED_KINDS`][fencedlease_lab.harness.resource_spec.MIXED_KINDS] (the SQL guard, an in-memory
``FencedResource`` shared by the resource process's threads, ``RedisFencedResource``, fenced
rows, a strict ``FencedResource``, the strict SQL guard, a strict ``RedisFencedResource``), so
that one run meets every one of those fencing surfaces.

Each key keeps one counter in the store of its kind; the checker judges each key on its own, so
the kinds do not meet. A [`MixedStore`][fencedlease_lab.harness.resources_mixed.MixedStore] opens
one store per part and sends each access to the store of its key.
"""

from __future__ import annotations

from typing import Any

from fencedlease import Lease

from .resource_spec import ResourceSpec, access_key

__all__ = ["MixedStore"]


class MixedStore:
    """A worker's handle on a ``mixed`` resource (a
    [`CounterStore`][fencedlease_lab.harness.resource_spec.CounterStore]): one store per part of
    ``spec``, each access sent to the store of its key."""

    def __init__(self, spec: ResourceSpec, open_part: Any) -> None:
        self._spec = spec
        self._stores: dict[ResourceSpec, Any] = {}
        try:
            for part in spec.parts:
                self._stores[part] = open_part(part)
        except BaseException:
            self.close()
            raise

    def _store(self, lease: Lease, key: str | None) -> Any:
        return self._stores[self._spec.part(access_key(lease, key))]

    def read(self, lease: Lease, *, fenced: bool, key: str | None = None) -> int:
        return int(self._store(lease, key).read(lease, fenced=fenced, key=key))

    def write(self, value: int, lease: Lease, *, fenced: bool, key: str | None = None) -> None:
        self._store(lease, key).write(value, lease, fenced=fenced, key=key)

    def strict_key(self, key: str) -> bool:
        """Whether the store of ``key`` accepts each token once and answers ``recheck``."""
        store = self._stores[self._spec.part(key)]
        return bool(getattr(store, "strict_key", lambda _: False)(key))

    def races(self, key: str) -> bool:
        """Whether the store of ``key`` lets two accesses of it race on purpose."""
        store = self._stores[self._spec.part(key)]
        return bool(getattr(store, "races", lambda _: False)(key))

    def recheck(self, lease: Lease, key: str | None = None) -> bool:
        return bool(self._store(lease, key).recheck(lease, key=key))

    def finals(self) -> dict[str, int]:
        """Each part's counters of the keys dealt to it (two SQL parts share one file)."""
        out: dict[str, int] = {}
        for part, store in self._stores.items():
            out.update(
                (key, value)
                for key, value in store.finals().items()
                if self._spec.part(key) == part
            )
        return out

    def prepare(self) -> None:
        for store in self._stores.values():
            store.prepare()

    def close(self) -> None:
        for store in self._stores.values():
            store.close()
