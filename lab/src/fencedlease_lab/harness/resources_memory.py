"""The in-process resources: [`fencedlease.FencedResource`][] in a resource process.

A [`FencedResource`][fencedlease.FencedResource] protects only what lives in its own process, so the
counters and their fences live in one *resource process* (a `multiprocessing.managers`
server, started by the run) and the workers talk to it over an authenticated local connection.
The server serves each worker's connection in a thread of its own, so one ``FencedResource`` per
key is shared by several threads of that process, which is how an application uses it.

- ``memory``: ``FencedResource(name)``; a read is ``accept`` then the value, a write ``accept``
  then the store, each under the key's lock (the check and the data in one step).
- ``memory-strict``: ``FencedResource(name, strict=True)``: a token is accepted once, so each
  grant makes one ``accept``: its first fenced access (the read in ``fenced`` mode, the write in
  ``write-fenced`` mode). A later access of the same lease lands only while the fence is still
  that lease's (``last_token`` and ``last_fingerprint`` are its own); anything else goes to
  ``accept``, which refuses an equal token (``strict``) and an older one.

What a worker sends for a lease is a
[`LeaseView`][fencedlease_lab.harness.resources_memory.LeaseView]: the token, the key, the fencing
scope and the lease's owner *fingerprint* in place of its owner token, which never leaves the
worker.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Callable
from multiprocessing.managers import BaseManager
from typing import Any

import attrs

from fencedlease import BackendError, FencedResource, Lease, StaleTokenError, owner_fingerprint

from .resource_spec import ResourceSpec, access_key

__all__ = ["LeaseView", "MemoryCounters", "MemoryStore", "start_memory_resource"]


@attrs.frozen
class LeaseView:
    """What the resource process needs of a lease (picklable): ``fencing_token``, ``key``,
    ``fencing_scope``, and as ``owner_token`` the fingerprint of the real owner token (a
    stand-in that is as unique per lease and reveals nothing)."""

    fencing_token: int | None
    owner_token: str
    key: str
    fencing_scope: str | None

    @classmethod
    def of(cls, lease: Lease) -> LeaseView:
        return cls(
            lease.fencing_token,
            owner_fingerprint(lease.owner_token),
            str(lease.key),
            getattr(lease, "fencing_scope", None),  # a backend may name no scope
        )


# A reply: ("ok", value) or ("stale", last_token, message).
Reply = tuple[Any, ...]


class MemoryCounters:
    """The resource process's state: one counter and one
    [`FencedResource`][fencedlease.FencedResource] per key."""

    def __init__(self, name: str, strict: bool) -> None:
        self._name = name
        self._strict = strict
        self._lock = threading.Lock()
        self._keys: dict[str, tuple[threading.Lock, FencedResource]] = {}
        self._values: dict[str, int] = {}

    def _key(self, key: str) -> tuple[threading.Lock, FencedResource]:
        with self._lock:
            entry = self._keys.get(key)
            if entry is None:
                resource = FencedResource(f"{self._name}/{key}", strict=self._strict)
                entry = self._keys[key] = (threading.Lock(), resource)
            return entry

    def read(self, key: str, view: LeaseView, fenced: bool) -> Reply:
        """The counter of ``key``; fenced: ``accept`` first (the fence moves)."""
        return self._access(key, view, fenced, lambda: self._values.get(key, 0))

    def write(self, key: str, value: int, view: LeaseView, fenced: bool) -> Reply:
        """Set the counter of ``key``; fenced: ``accept`` first (module docstring for strict)."""
        return self._access(key, view, fenced, lambda: self._values.__setitem__(key, value))

    def _access(self, key: str, view: LeaseView, fenced: bool, then: Callable[[], Any]) -> Reply:
        """Under the key's lock: admit ``view`` (when ``fenced``), then ``then()``; the reply."""
        lock, resource = self._key(key)
        with lock:
            if fenced:
                refused = self._admit(resource, view)
                if refused is not None:
                    return refused
            return ("ok", then())

    def _admit(self, resource: FencedResource, view: LeaseView) -> Reply | None:
        if self._strict and (
            resource.last_token == view.fencing_token
            and resource.last_fingerprint == owner_fingerprint(view.owner_token)
        ):
            return None  # this lease's own fence: its token was accepted once already
        try:
            resource.accept(view)
        except StaleTokenError as exc:
            return ("stale", exc.last_token, str(exc))
        return None

    def finals(self) -> dict[str, int]:
        with self._lock:
            return dict(sorted(self._values.items()))

    def served_by(self) -> int:
        """The identifier of the thread serving this call (each connection has one)."""
        return threading.get_ident()

    def reset(self) -> None:
        with self._lock:
            self._keys.clear()
            self._values.clear()


_COUNTERS: MemoryCounters | None = None


def _init_server(name: str, strict: bool) -> None:
    global _COUNTERS
    _COUNTERS = MemoryCounters(name, strict)


def _counters() -> MemoryCounters:
    assert _COUNTERS is not None
    return _COUNTERS


class _Manager(BaseManager):
    pass


_Manager.register("counters", callable=_counters)


def start_memory_resource(ctx: Any, kind: str, name: str) -> tuple[ResourceSpec, Any]:
    """Start the resource process (``ctx``: a multiprocessing context) for ``kind``
    (``memory`` or ``memory-strict``) on a free local port; return its spec and the manager
    (keep a reference: the process stops when the manager is collected; ``shutdown()``
    stops it)."""
    secret = secrets.token_hex(16)
    manager = _Manager(address=("127.0.0.1", 0), authkey=bytes.fromhex(secret), ctx=ctx)
    manager.start(_init_server, (name, kind == "memory-strict"))
    address: Any = manager.address
    host, port = address
    return ResourceSpec(kind, f"{host}:{port}", name, secret), manager  # type: ignore[arg-type]


class MemoryStore:
    """A worker's handle on the resource process (a [`CounterStore`][])."""

    def __init__(self, spec: ResourceSpec) -> None:
        host, _, port = spec.target.rpartition(":")
        self._manager = _Manager(address=(host, int(port)), authkey=bytes.fromhex(spec.secret))
        try:
            self._manager.connect()
            self._counters: Any = self._manager.counters()  # type: ignore[attr-defined]
        except (OSError, EOFError) as exc:
            raise BackendError(f"memory resource at {spec.target}: {exc}") from exc
        self._name = spec.name

    def _call(self, method: str, *args: Any) -> Any:
        try:
            reply = getattr(self._counters, method)(*args)
        except (OSError, EOFError) as exc:
            raise BackendError(f"memory resource {method} failed: {exc}") from exc
        return reply

    def _check(self, reply: Reply, key: str, token: int | None) -> Any:
        if reply[0] == "stale":
            raise StaleTokenError(f"{self._name}/{key}", token or 0, reply[1], reply[2])
        return reply[1]

    def read(self, lease: Lease, *, fenced: bool, key: str | None = None) -> int:
        name = access_key(lease, key)
        reply = self._call("read", name, LeaseView.of(lease), fenced)
        return int(self._check(reply, name, lease.fencing_token))

    def write(self, value: int, lease: Lease, *, fenced: bool, key: str | None = None) -> None:
        name = access_key(lease, key)
        reply = self._call("write", name, value, LeaseView.of(lease), fenced)
        self._check(reply, name, lease.fencing_token)

    def finals(self) -> dict[str, int]:
        return dict(self._call("finals"))

    def prepare(self) -> None:
        self._call("reset")

    def served_by(self) -> int:
        """The identifier of the resource process's thread that serves this handle."""
        return int(self._call("served_by"))

    def close(self) -> None:
        self._counters = None
