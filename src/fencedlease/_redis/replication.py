"""What a grant asks of Redis replication, with no I/O: the grant options (``replica_acks``,
``replica_ack_timeout_ms``, ``fencing``), the check of a ``WAIT`` reply, and the watch on the
primary's replication id that tells a failover.

Redis replicates asynchronously: a failover to a replica that had not received the last grant rolls
the fencing counter back, and the next grant would repeat a token already handed out. Three
answers:

- ``replica_acks=n``: every acquire and renewal script is followed, on the same connection and in
  the same round trip, by ``WAIT n replica_ack_timeout_ms`` (Redisson's ``syncedEval``). ``WAIT``
  counts the replicas that hold every write the connection made, so it must run on the connection
  that made them: a pipeline of the two. A grant with fewer acks is released again and not
  returned; a renewal with fewer acks does not move the lease's deadline
  ([`ReplicationError`][fencedlease.ReplicationError]). A hand-off grant is acknowledged
  through its claim: the waiter's acquire writes the same key (its TTL), so its ``WAIT`` covers
  the grant.
- ``fencing="clock"``: the token is ``max(counter + 1, Redis TIME in microseconds)`` (see
  ``lease_common.lua``), so tokens granted after a rollback still exceed every earlier one, as
  long as the new primary's clock is not behind the old one's by more than the time the failover
  took (Kleppmann's argument for counters plus a clock-derived epoch).

- ``fencing="epoch"`` (the default of ``redis+sentinel://`` and ``redis+cluster://`` URLs): the
  token is ``epoch * 2**40 + counter``, granted at or above the floor of the failover epoch a
  majority names (the sentinels' ``config-epoch``; the cluster primaries' view of the slot
  owner's ``configEpoch``), and counted only when that majority confirms it afterwards
  (`fencedlease._core.epochs`; no clock involved). On a plain Redis it grants as ``counter``.

Any way the acquire script reports the primary's replication id (``master_replid``): a promoted
replica starts a new one, so a manager that sees it change records the change
(`PrimaryWatch`) and never lets a possible rollback pass in silence. A connection reads the id on
its first acquire (and after a reconnect or an error) and keeps it; a grant reads it anew, unless
no connection outlives a promotion of its server (`fencedlease._redis.wire.PrimaryReads`). That
holds over Sentinel, which promotes a replica with ``CLIENT KILL TYPE normal`` in the same
``MULTI`` as ``REPLICAOF NO ONE``; it does not on a plain Redis or a Cluster, where
``REPLICAOF``, ``REPLICAOF NO ONE`` and ``FAILOVER`` keep every client connection open (Redis
6.2.5 and 7.0.15), and no key can stand in for the id: a replicated marker holds the same stale
value as the counter, and an unreplicated one survives a partial resynchronisation, after which
a server promoted again behind its new primary repeats that primary's last tokens.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Final, Literal

import attrs

from fencedlease._core.epochs import epoch_of
from fencedlease._core.errors import ReplicationError, ValidationError
from fencedlease._core.protocol import AcquireReply
from fencedlease._core.validate import check_ms

from .replies import decode_acquire

__all__ = [
    "FENCING_MODES",
    "Fencing",
    "GrantOptions",
    "PrimaryWatch",
    "default_fencing",
    "older_token",
    "use_grant_options",
]

log = logging.getLogger("fencedlease")

Fencing = Literal["counter", "clock", "epoch"]
FENCING_MODES: Final = ("counter", "clock", "epoch")
# The URLs whose managers take epoch tokens unless told otherwise: the replicated deployments,
# whose failovers name an epoch a majority agrees on.
REPLICATED_SCHEMES: Final = ("redis+sentinel://", "redis+cluster://")
MAX_REPLICA_ACKS: Final = 2_147_483_647


@attrs.frozen
class GrantOptions:
    """How a Redis backend grants and renews (see the module docstring)."""

    replica_acks: int = 0
    replica_ack_timeout_ms: int = 100
    fencing: Fencing = "counter"

    @classmethod
    def checked(
        cls, replica_acks: object, replica_ack_timeout_ms: object, fencing: object
    ) -> GrantOptions:
        """The options, each checked.

        Raises:
            ValidationError: ``replica_acks`` not an int in 0..2,147,483,647,
                ``replica_ack_timeout_ms`` not an int in 1..2,147,483,647 (``WAIT`` with 0 would
                block for ever), ``fencing`` not one of ``"counter"``, ``"clock"``, ``"epoch"``.
        """
        if (
            not isinstance(replica_acks, int)
            or isinstance(replica_acks, bool)
            or not 0 <= replica_acks <= MAX_REPLICA_ACKS
        ):
            raise ValidationError(
                "replica_acks",
                f"replica_acks must be an int (a number of replicas),"
                f" 0 <= replica_acks <= {MAX_REPLICA_ACKS}; got {replica_acks!r}",
            )
        acks = replica_acks
        timeout = check_ms("replica_ack_timeout_ms", replica_ack_timeout_ms, 1)
        if fencing not in FENCING_MODES or not isinstance(fencing, str):
            raise ValidationError(
                "fencing", f"fencing must be 'counter', 'clock' or 'epoch'; got {fencing!r}"
            )
        return cls(acks, timeout, fencing)

    def mode_arg(self, floor: int) -> str:
        """The fencing mode as the acquire script's argument: ``fencing`` itself, or with
        ``"epoch"`` ``"floor:<floor>"`` (``floor`` the lowest token of the epoch a majority
        names, `fencedlease._core.epochs.floor`; ``"counter"`` for epoch 0, a plain Redis's or a
        fresh deployment's: the floor is no constraint there)."""
        if self.fencing != "epoch":
            return self.fencing
        return f"floor:{floor}" if floor > 0 else "counter"

    def mode_args(self, floor: int = 0) -> tuple[str, ...]:
        """The fencing mode of a release's hand-off grant as the script's last argument: none
        where `mode_arg` is ``"counter"`` (the script's default), else ``(mode_arg(floor),)``."""
        mode = self.mode_arg(floor)
        return () if mode == "counter" else (mode,)

    def short(self, acks: int | None) -> bool:
        """Whether a ``WAIT`` reply of ``acks`` replicas is fewer than asked (None: no ``WAIT``
        was sent, nothing was asked)."""
        return acks is not None and acks < self.replica_acks

    def refusal(
        self,
        what: str,
        acks: int,
        *,
        wrote: Literal["no", "maybe"] = "no",
        doubt: str | None = None,
    ) -> ReplicationError:
        """The error for ``what`` (e.g. ``"acquire 'k'"``) acknowledged by ``acks`` replicas, or
        (``doubt``) not confirmed by the majority for that reason."""
        return ReplicationError(
            f"{what}: {doubt}"
            if doubt is not None
            else f"{what}: {acks} of {self.replica_acks} replicas acknowledged it within"
            f" {self.replica_ack_timeout_ms} ms",
            acks=acks,
            wanted=self.replica_acks,
            wrote=wrote,
        )


class PrimaryWatch:
    """The replication id of the Redis primary that answered the last acquire, and how many
    times it changed (a failover: the counter may have rolled back). Thread-safe; no I/O.

    ``place``: where a name's primary is (a Redis Cluster: the name's hash slot), each place's
    primary watched on its own; None: one primary for every name."""

    def __init__(self, place: Callable[[str], object] | None = None) -> None:
        self._lock = threading.Lock()
        self._place = place
        self._ids: dict[object, str] = {}
        self.primary_id: str | None = None
        self.changes = 0
        #: Called with ``(key, before, after)`` after a change is logged (the manager's event).
        self.on_change: Callable[[str, str, str], object] | None = None

    def seen(self, reply: AcquireReply, key: str) -> None:
        """Note the primary that answered ``reply``; a change is counted and logged."""
        primary = reply.primary_id
        if primary is None:
            return
        place = None if self._place is None else self._place(key)
        if self.primary_id == primary and self._ids.get(place) == primary:
            return  # the usual case, on every acquire: nothing changed, no lock taken
        with self._lock:
            before, self._ids[place] = self._ids.get(place), primary
            self.primary_id = primary
            if before is None or before == primary:
                return
            self.changes += 1
        log.warning(
            "fencedlease: the Redis primary changed (replication id %s -> %s, seen by acquire %r):"
            " a failover; with fencing='counter' and replica_acks=0 a token may repeat",
            before,
            primary,
            key,
        )
        if self.on_change is not None:
            self.on_change(key, before, primary)


def older_token(reply: object, key: str, epoch: int) -> str | None:
    """Why a confirmed grant of ``key`` (``acquire.lua``'s ``reply``) still does not count: its
    token is of an epoch older than ``epoch`` (a hand-off a release made with an older floor);
    None when it is not (or nothing was granted). No I/O."""
    if epoch_of(decode_acquire(reply, key).fencing_token) < epoch:
        return f"its token is of an epoch older than {epoch}, the majority's"
    return None


def default_fencing(url: object) -> Fencing:
    """The fencing mode a manager made from ``url`` uses when none is given: ``"epoch"`` for
    Redis Sentinel and Redis Cluster (``redis+sentinel://``, ``redis+cluster://``: tokens never
    repeat across a failover, `fencedlease._core.epochs`), ``"counter"`` for any other (a ``url``
    that is not a str included: the URL's own check refuses it)."""
    replicated = isinstance(url, str) and url.lower().startswith(REPLICATED_SCHEMES)
    return "epoch" if replicated else "counter"


def use_grant_options(backend: object, options: GrantOptions, *, made_here: bool) -> None:
    """Give a manager's ``options`` to its backend: a Redis backend the manager made (from a
    client or a URL) takes them; another backend only takes the defaults (a Redis backend object
    the caller made has its own options, given to its constructor).

    Raises:
        ValidationError: naming the first option that differs from its default, when the backend
            cannot take it.
    """
    if isinstance(getattr(backend, "grants", None), GrantOptions) and made_here:
        backend.grants = options  # type: ignore[attr-defined]
        return
    default = GrantOptions()
    for name in ("replica_acks", "replica_ack_timeout_ms", "fencing"):
        if getattr(options, name) != getattr(default, name):
            raise ValidationError(
                name,
                f"{name} is an option of a Redis store given as a client or a URL; a backend"
                f" object takes its own ({type(backend).__name__}); got {name}="
                f"{getattr(options, name)!r}",
            )
