"""The library's exceptions, in one place.

```
FencedLeaseError
├── LeaseNotAcquiredError   .key, .status_code = 409
│   └── NestedHoldError     .key: a hold inside this caller's own hold of the key
├── ReentrancyLimitError    .key, .max_depth: reentrant holds nested past their depth limit
├── LeaseLostError          .key
│   └── SemaphoreLeaseLostError .key (the semaphore's name): a slot was lost
├── StaleTokenError         .resource, .token, .last_token
│   └── LeaseKeyMismatchError   .lease_key, .presented_key (counters' scopes)
├── ValidationError         also a ValueError; says which argument and which bound
├── BackendError            the store could not be reached or refused; original in __cause__
│   │                       .sent (Sent), .wrote (Wrote), .timed_out: what may have happened
│   └── ReplicationError    fewer replicas acknowledged a grant or renewal than replica_acks
├── ManagerClosedError      also a RuntimeError; the lease manager is (or was just) closed
└── RowNotFoundError        also a LookupError; .table, .where (``fencedlease.db``)

UserWarning
└── UnsafeRedisWarning      the store's maxmemory-policy evicts keys: tokens may be reissued
```

Every error a store (Redis, SQLite, ...) raises while the library talks to it reaches the caller as
[`BackendError`][fencedlease.BackendError] with the store's own exception in ``__cause__``: one type
to catch, the detail still there. Nothing is swallowed, and an error is never counted as an acquired
lease. The backend that raises it says whether the command may have run (``sent``) or changed the
store (``wrote``), so nothing above the backend needs to know the store's own exceptions.

A call on a closed manager, or an acquire whose wait the manager's ``close()`` interrupted, raises
[`ManagerClosedError`][fencedlease.ManagerClosedError] on both faces; it is also a ``RuntimeError``,
which is what such calls raised before it existed, so older ``except RuntimeError`` code keeps
working.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Literal

# The errors both faces export (fencedlease.aio re-exports this list); the rest of the module
# (RowNotFoundError, Sent, Wrote) is imported by name where it is used.
__all__ = [
    "BackendError",
    "FencedLeaseError",
    "LeaseKeyMismatchError",
    "LeaseLostError",
    "LeaseNotAcquiredError",
    "ManagerClosedError",
    "NestedHoldError",
    "ReentrancyLimitError",
    "ReplicationError",
    "SemaphoreLeaseLostError",
    "StaleTokenError",
    "UnsafeRedisWarning",
    "ValidationError",
]

Sent = Literal["no", "maybe", "yes"]
"""Whether a failed command reached the store: ``"no"`` (it cannot have run), ``"maybe"`` (sent, no
reply: it may have run), ``"yes"`` (the store answered: an error reply, or a reply that could not be
decoded)."""

Wrote = Literal["no", "maybe"]
"""Whether a failed command may have changed the store."""


class FencedLeaseError(Exception):
    """Base class of every error this library raises on purpose."""


class UnsafeRedisWarning(UserWarning):
    """The Redis store is set up so that fencing tokens may lose their meaning: its
    ``maxmemory-policy`` evicts keys (``allkeys-*``: a fencing counter, and token 1 is granted
    again; ``volatile-*``: a held lease's key before its TTL ends). Issued once per backend and
    server, on the first acquire the store answers or the first health check, with the same text
    logged on the ``fencedlease`` logger; the message names the setting, its value, the risk and
    the fix (``maxmemory-policy noeviction``). A warning, not an error: nothing is refused.
    See `fencedlease._redis.eviction`.
    """


class LeaseNotAcquiredError(FencedLeaseError):
    """The lease on ``key`` is held by someone else and the wait budget ran out.

    ``status_code`` is 409 (Conflict), so a web framework that maps it answers the client sensibly.
    """

    status_code: int = 409

    def __init__(self, key: str, message: str | None = None) -> None:
        self.key = key
        super().__init__(message or f"lease {key!r} is held by another owner")

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.key, str(self)))


class NestedHoldError(LeaseNotAcquiredError):
    """A ``hold`` (or ``with_lease``) of ``key`` inside a hold of the same key by the same
    manager, in the same thread (asyncio: the same task), while that lease is still held.

    The inner acquire would find the key held by its own caller and wait out its whole
    ``wait_ms`` for a release that can come only after it gives up, so it is refused at once,
    before any round trip, whatever ``wait_ms``. A
    [`LeaseNotAcquiredError`][fencedlease.LeaseNotAcquiredError] (the key was not acquired), so
    existing ``except`` clauses keep working; ``with_lease`` raises it rather than returning a
    skipped outcome, since it is a mistake in the program, not contention. Holds in other threads
    (tasks) of the same manager wait for each other as usual, and so do slots of a semaphore.
    ``hold(key, reentrant=True)`` nests instead (see `fencedlease._core.reentry`).
    ``where`` names the caller in the message: ``"thread"`` or ``"task"``.
    """

    def __init__(self, key: str, message: str | None = None, *, where: str = "thread") -> None:
        super().__init__(
            key,
            message
            or (
                f"this manager already holds {key!r} in this {where} (an enclosing hold or "
                "keep_alive): a nested hold of the same key would wait for itself (hold it with "
                "reentrant=True to nest)"
            ),
        )


class ReentrancyLimitError(FencedLeaseError):
    """A ``hold(key, reentrant=True)`` would nest deeper than its ``max_depth`` (default 64,
    the outermost block counted): raised when it is entered, before anything is acquired,
    released or counted, so the enclosing blocks go on holding the lease. Unbounded nesting is
    almost always runaway recursion; the bound stops it while the lease is still held.
    """

    def __init__(self, key: str, max_depth: int, message: str | None = None) -> None:
        self.key = key
        self.max_depth = max_depth
        super().__init__(
            message
            or (
                f"reentrant holds of {key!r} would nest deeper than max_depth={max_depth} "
                "(the outermost hold counted)"
            )
        )

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.key, self.max_depth, str(self)))


class LeaseLostError(FencedLeaseError):
    """The lease on ``key`` is gone: expired, taken by another owner, or deleted by an operator.

    Work done under it may have overlapped another holder's: reconcile rather than assume.
    """

    def __init__(self, key: str, message: str | None = None) -> None:
        self.key = key
        super().__init__(message or f"lease {key!r} was lost")

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.key, str(self)))


class SemaphoreLeaseLostError(LeaseLostError):
    """A slot of the semaphore ``key`` is gone: its deadline passed with no confirmed renewal, or a
    renewal or the release found it gone (another caller may have taken it). A
    [`LeaseLostError`][fencedlease.LeaseLostError], so code that handles lost leases handles lost
    slots too.
    """


class StaleTokenError(FencedLeaseError):
    """A fenced resource refused an access: ``token`` is older than ``last_token`` (or equal under
    strict fencing, or the same number presented by a different lease)."""

    def __init__(
        self,
        resource: str,
        token: int,
        last_token: int | None,
        message: str | None = None,
    ) -> None:
        self.resource = resource
        self.token = token
        self.last_token = last_token
        super().__init__(
            message
            or f"resource {resource!r} refused fencing token {token}: it has seen {last_token}"
        )

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.resource, self.token, self.last_token, str(self)))


class LeaseKeyMismatchError(StaleTokenError):
    """A fenced resource refused a lease of another counter than the one that fences it.

    Fencing tokens are counted per counter (one key in one store namespace: the same key under two
    manager prefixes has two), so a token of one counter says nothing about a token of another: a
    resource records the counter of the first lease it accepts, its ``fencing_scope`` such as
    ``"appA:{orders}:fence"`` (``lease_key``), and refuses leases of any other counter
    (``presented_key``, the refused lease's scope), whatever their tokens. Either may be a bare
    key: a record of an earlier version, or a lease without a scope. Nothing was written. A
    [`StaleTokenError`][fencedlease.StaleTokenError], so code that rolls back on a refusal keeps
    doing so; the fix is to fence each key's data in a resource of its own, with one manager prefix.
    Scopes and keys are not secrets; owner tokens never appear.
    """

    def __init__(
        self,
        resource: str,
        token: int,
        last_token: int | None,
        lease_key: str,
        presented_key: str,
        message: str | None = None,
    ) -> None:
        self.lease_key = lease_key
        self.presented_key = presented_key
        super().__init__(
            resource,
            token,
            last_token,
            message
            or (
                f"resource {resource!r} refused a lease of {presented_key!r}: it is fenced by "
                f"leases of {lease_key!r}"
            ),
        )

    def __reduce__(self) -> tuple[object, ...]:
        return (
            type(self),
            (
                self.resource,
                self.token,
                self.last_token,
                self.lease_key,
                self.presented_key,
                str(self),
            ),
        )


class ValidationError(FencedLeaseError, ValueError):
    """An argument is out of its allowed range or of the wrong type.

    ``argument`` names it; the message states the bound.
    """

    def __init__(self, argument: str, message: str) -> None:
        self.argument = argument
        super().__init__(message)

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.argument, str(self)))


class BackendError(FencedLeaseError):
    """The lease store could not be reached, or it refused the command.

    The store's own exception (for Redis, a ``redis.RedisError``) is in ``__cause__``. The backend
    that raises it says what may have happened at the store, so the caller needs no knowledge of
    the store's exceptions:

    - ``sent``: ``"no"`` (never reached the store: nothing ran), ``"maybe"`` (sent, no reply:
      the command may have run; for acquire, only a resend with the same owner token is safe),
      ``"yes"`` (the store answered).
    - ``wrote``: ``"maybe"`` when the command may have changed the store (whatever it may have
      granted must be released with the same owner token), else ``"no"``.
    - ``timed_out``: a ``"maybe"`` that is a timeout (the store may be stalled), not a dropped
      connection.
    - ``busy``: the store turned the command away for a while, running nothing on its last try
      (a Redis Cluster slot being migrated to another node answers ``TRYAGAIN`` to a script
      whose keys are split between the two): an acquire with time left in its ``wait_ms`` waits
      and tries again, as after a refusal, instead of failing.

    The defaults, ``sent="yes"``, ``wrote="no"``, fit a store that answers every command
    atomically (memory, SQLite: a failed transaction wrote nothing); the Redis adapter classifies
    redis-py's errors (`fencedlease._redis.errors`).
    """

    busy: bool = False  # also for a subclass whose __init__ does not call this one

    def __init__(
        self,
        message: str,
        *,
        sent: Sent = "yes",
        wrote: Wrote = "no",
        timed_out: bool = False,
        busy: bool = False,
    ) -> None:
        super().__init__(message)
        self.sent: Sent = sent
        self.wrote: Wrote = wrote
        self.timed_out = timed_out
        self.busy = busy


def no_reply(what: str, waited_s: float) -> BackendError:
    """The error of a call that got no reply within ``waited_s`` seconds, ``what`` naming it
    (``"release 'k'"``): it may have run (``sent`` and ``wrote`` are ``"maybe"``, ``timed_out``),
    and the lease it was for lapses at its ttl; a builtin ``TimeoutError`` as its cause."""
    ms = round(waited_s * 1000)
    error = BackendError(
        f"{what}: no reply within {ms} ms; the lease lapses at its ttl",
        sent="maybe",
        wrote="maybe",
        timed_out=True,
    )
    error.__cause__ = TimeoutError(f"no reply within {ms} ms")
    error.__suppress_context__ = True  # as `raise ... from` would: the cause is the story
    return error


class ReplicationError(BackendError):
    """Fewer replicas acknowledged a grant or a renewal than the manager's ``replica_acks`` asked
    for within ``replica_ack_timeout_ms`` (Redis ``WAIT``, sent on the same connection right after
    the script; a ``WAIT`` a failover interrupted, or whose connection was cut, counts none). Or,
    with epoch tokens over Sentinel (`fencedlease._core.epochs`), a grant the majority of the
    sentinels did not confirm afterwards: the message says why. ``acks`` is how many replicas
    acknowledged, ``wanted`` how many were asked for.

    A grant that was not acknowledged was released again (never returned to the caller); a
    renewal that was not acknowledged did not move the lease's deadline. The idea is Redisson's
    ``syncedEval``: a write a failover can lose must not be reported as done.
    """

    def __init__(
        self, message: str, *, acks: int, wanted: int, sent: Sent = "yes", wrote: Wrote = "no"
    ) -> None:
        super().__init__(message, sent=sent, wrote=wrote)
        self.acks = acks
        self.wanted = wanted

    def __reduce__(self) -> tuple[object, ...]:
        return (
            _rebuild_replication_error,
            (str(self), self.acks, self.wanted, self.sent, self.wrote),
        )


def _rebuild_replication_error(
    message: str, acks: int, wanted: int, sent: Sent, wrote: Wrote
) -> ReplicationError:
    return ReplicationError(message, acks=acks, wanted=wanted, sent=sent, wrote=wrote)


class ManagerClosedError(FencedLeaseError, RuntimeError):
    """The lease manager is closed: ``acquire``, ``hold`` and ``with_lease`` on a closed manager,
    and an acquire whose wait between attempts ``close()`` interrupted (either face).

    Also a ``RuntimeError``, which these calls raised before this class existed.
    """

    WHILE_WAITING: ClassVar[str] = "the lease manager was closed while this acquire waited"

    def __init__(self, message: str = "the lease manager is closed") -> None:
        super().__init__(message)

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (str(self),))


class RowNotFoundError(FencedLeaseError, LookupError):
    """No row of ``table`` matches ``where``: nothing to fence, nothing was changed
    ([`fencedlease.db`][], which exports it too).

    Distinct from [`StaleTokenError`][fencedlease.StaleTokenError] (a row is there, with a larger
    token).
    """

    def __init__(self, table: str, where: Mapping[str, Any], message: str | None = None) -> None:
        self.table = table
        self.where = dict(where)
        super().__init__(message or f"no row of {table!r} matches {sorted(self.where)}")

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.table, self.where, str(self)))
