"""The in-process resources: [`fencedlease.FencedResource`][] in a resource process.

A [`FencedResource`][fencedlease.FencedResource] protects only what lives in its own process, so the
counters and their fences live in one *resource process* (a `multiprocessing.managers`
server, started by the run) and the workers talk to it over an authenticated local connection.
The server serves each worker's connection in a thread of its own, so one ``FencedResource`` per
key is shared by several threads of that process, which is how an application uses it.

- ``memory``: ``FencedResource(name)``; a read is ``accept`` then the value, a write ``accept``
  then the store. The ``accept`` runs outside any lock of the harness, so two holders' accesses
  to one key interleave inside the resource (only its own atomicity keeps the fence right); the
  data step runs under the key's lock after a second look that the fence is still the
  access's own (a newer lease accepted in between refuses it), so a correct resource loses no
  update.
- ``memory-strict``: ``FencedResource(name, strict=True)``: a token is accepted once, so each
  grant makes one ``accept``: its first fenced access (the read in ``fenced`` mode, the write in
  ``write-fenced`` mode). A later access of the same lease lands only while the fence is still
  that lease's (``last_token`` and ``last_fingerprint`` are its own); anything else goes to
  ``accept``, which refuses an equal token (``strict``) and an older one.

What a worker sends for a lease is a
[`LeaseView`][fencedlease_lab.harness.resources_memory.LeaseView]: the token, the key, the fencing
scope and the lease's owner *fingerprint* in place of its owner token, which never leaves the
worker.

A *race* ([`racing`][fencedlease_lab.harness.resources_memory.racing]) makes two accesses of one
key interleave on purpose: the ``held`` one stops at its ``accept``'s first taking of the
resource's lock (before the fence is read in a correct resource; between reading and recording
it in one whose check and record are split; a strict lease on its own fence, which makes no
``accept``, before its data step) until the ``after`` one, sent next, has passed its own
``accept``. The wait is on events, bounded by
[`RACE_WAIT_S`][fencedlease_lab.harness.resources_memory.RACE_WAIT_S].
"""

from __future__ import annotations

import contextlib
import contextvars
import secrets
import threading
from collections.abc import Callable, Iterator
from multiprocessing.managers import BaseManager
from typing import Any, Final, Literal

import attrs

from fencedlease import BackendError, FencedResource, Lease, StaleTokenError, owner_fingerprint

from .resource_spec import ResourceSpec, access_key

__all__ = [
    "RACE_WAIT_S",
    "LeaseView",
    "MemoryCounters",
    "MemoryStore",
    "Race",
    "racing",
    "start_memory_resource",
]

#: A racing access's part: none, held inside its ``accept``, or sent after a held one.
Race = Literal["", "held", "after"]
#: The most a racing access waits for its partner, in seconds (a partner that never comes, e.g.
#: refused by the worker's own checks, costs this once).
RACE_WAIT_S: Final = 1.0

_race: contextvars.ContextVar[Race] = contextvars.ContextVar("race", default="")


@contextlib.contextmanager
def racing(part: Race) -> Iterator[None]:
    """Within the block, this context's memory-resource accesses race as ``part``."""
    reset = _race.set(part)
    try:
        yield
    finally:
        _race.reset(reset)


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


class _Key:
    """One key's entry in the resource process: its data lock, its resource, and the events of
    a race on it."""

    def __init__(self, name: str, strict: bool) -> None:
        self.lock = threading.Lock()
        self.resource = FencedResource(name, strict=strict)
        self.armed = threading.Event()  # a held access waits inside its accept
        self.passed = threading.Event()  # the access after it has passed its accept
        self._holding = threading.local()
        # The hook: the resource's own lock, taken by ``accept``, stops a held access the first
        # time it is taken (its ``_lock`` is the one place between reading and recording the
        # fence that a resource splitting the two still passes through).
        self.resource._lock = _HoldingLock(self)  # type: ignore[assignment]

    def accept(self, view: LeaseView, *, held: bool) -> None:
        """``accept`` on the resource (``held``: stopped once by the hook); raises what it
        raises."""
        self._holding.on = held
        try:
            self.resource.accept(view)
        finally:
            self._holding.on = False

    def hold(self) -> None:
        """Stop here if this thread's access is held (once): until the access after it passed
        its accept."""
        if getattr(self._holding, "on", False):
            self._holding.on = False
            self.wait_partner()

    def wait_partner(self) -> None:
        """Let the access after this one go, and wait until it has passed its accept."""
        self.passed.clear()
        self.armed.set()
        self.passed.wait(RACE_WAIT_S)


class _HoldingLock:
    """A lock that runs its key's ``hold`` before each taking."""

    def __init__(self, key: _Key) -> None:
        self._key, self._lock = key, threading.Lock()

    def __enter__(self) -> bool:
        self._key.hold()
        return self._lock.__enter__()

    def __exit__(self, *exc: object) -> None:
        self._lock.release()


class MemoryCounters:
    """The resource process's state: one counter and one
    [`FencedResource`][fencedlease.FencedResource] per key."""

    def __init__(self, name: str, strict: bool) -> None:
        self._name = name
        self._strict = strict
        self._lock = threading.Lock()
        self._keys: dict[str, _Key] = {}
        self._values: dict[str, int] = {}

    def _key(self, key: str) -> _Key:
        with self._lock:
            entry = self._keys.get(key)
            if entry is None:
                entry = self._keys[key] = _Key(f"{self._name}/{key}", self._strict)
            return entry

    def read(self, key: str, view: LeaseView, fenced: bool, race: Race = "") -> Reply:
        """The counter of ``key``; fenced: ``accept`` first (the fence moves)."""
        return self._access(key, view, fenced, race, lambda: self._values.get(key, 0))

    def write(self, key: str, value: int, view: LeaseView, fenced: bool, race: Race = "") -> Reply:
        """Set the counter of ``key``; fenced: ``accept`` first (module docstring for strict)."""
        return self._access(key, view, fenced, race, lambda: self._values.__setitem__(key, value))

    def _access(
        self, key: str, view: LeaseView, fenced: bool, race: Race, then: Callable[[], Any]
    ) -> Reply:
        """Admit ``view`` (when ``fenced``; outside the key's lock), then under the key's lock,
        if the fence is still ``view``'s, ``then()``; the reply."""
        entry = self._key(key)
        if race == "after":
            entry.armed.wait(RACE_WAIT_S)
        try:
            return self._admit_then(entry, view, fenced, race == "held", then)
        finally:
            if race == "after":
                entry.armed.clear()
                entry.passed.set()

    def _admit_then(
        self, entry: _Key, view: LeaseView, fenced: bool, held: bool, then: Callable[[], Any]
    ) -> Reply:
        # strict: a lease's later accesses land on its own fence (its token was accepted once)
        if fenced and not (self._strict and self._own(entry.resource, view)):
            try:
                entry.accept(view, held=held)
            except StaleTokenError as exc:
                return ("stale", exc.last_token, str(exc))
        elif held:
            entry.wait_partner()  # no accept to stop in: its data step comes after the other
        with entry.lock:
            if fenced and not self._own(entry.resource, view):
                # a newer lease was accepted since: the data is no longer this access's
                last = entry.resource.last_token
                return ("stale", last, f"{entry.resource.name}: a newer token {last} came first")
            return ("ok", then())

    def recheck(self, key: str, view: LeaseView) -> bool:
        """``view``'s token, accepted already, presented by a twin: another lease with the same
        token, as a duplicate grant (a lease counter that started again) presents it. Every
        resource must refuse it (strict or not); True when accepted. Nothing else moves."""
        twin = attrs.evolve(view, owner_token=owner_fingerprint(view.owner_token))
        try:
            self._key(key).resource.accept(twin)
        except StaleTokenError:
            return False
        return True

    def _own(self, resource: FencedResource, view: LeaseView) -> bool:
        """Whether the fence of ``resource`` is ``view``'s: its token and lease on record."""
        return (
            resource.last_token == view.fencing_token
            and resource.last_fingerprint == owner_fingerprint(view.owner_token)
        )

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
        self._strict = spec.kind == "memory-strict"

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
        reply = self._call("read", name, LeaseView.of(lease), fenced, _race.get())
        return int(self._check(reply, name, lease.fencing_token))

    def write(self, value: int, lease: Lease, *, fenced: bool, key: str | None = None) -> None:
        name = access_key(lease, key)
        reply = self._call("write", name, value, LeaseView.of(lease), fenced, _race.get())
        self._check(reply, name, lease.fencing_token)

    def strict_key(self, key: str) -> bool:
        """Whether ``key``'s resource is strict (it then answers ``recheck``)."""
        return self._strict

    def recheck(self, lease: Lease, key: str | None = None) -> bool:
        """``lease``'s token presented once more by a twin lease
        ([`MemoryCounters.recheck`][fencedlease_lab.harness.resources_memory.MemoryCounters.recheck]):
        True when accepted (a violation), False when refused."""
        return bool(self._call("recheck", access_key(lease, key), LeaseView.of(lease)))

    def races(self, key: str) -> bool:
        """Whether accesses of ``key`` can race here
        ([`racing`][fencedlease_lab.harness.resources_memory.racing]): always."""
        return True

    def finals(self) -> dict[str, int]:
        return dict(self._call("finals"))

    def prepare(self) -> None:
        self._call("reset")

    def served_by(self) -> int:
        """The identifier of the resource process's thread that serves this handle."""
        return int(self._call("served_by"))

    def close(self) -> None:
        self._counters = None
