# GENERATED from src/fencedlease/_async/redis_eviction.py by `python scripts/unasync.py`:
# do not edit. Edit that source, then run it again (CI runs it with --check, failing while
# stale).
"""The Redis backend's eviction check (`fencedlease._redis.eviction` decides, without I/O): the
store's ``maxmemory-policy`` read once per backend, after the first acquire the store answered, off
the caller's path. A base of [`RedisBackend`][fencedlease.RedisBackend] (the cluster
backend reads each primary's policy)."""

from __future__ import annotations

import contextlib

import redis

from fencedlease._redis.errors import STORE_ERRORS, CommandRefused, map_exceptions
from fencedlease._redis.eviction import EvictionCheck, policy_of

from .clients import dedicated_client
from .primitives import Background

__all__ = ["EvictionReads"]


class EvictionReads:
    """The eviction check's reads over ``client``, noted in ``eviction``; the read after an
    acquire runs in ``_eviction_read``. The backend sets the three."""

    client: redis.Redis
    eviction: EvictionCheck
    _eviction_read: Background

    def read_eviction(
        self, client: redis.Redis | None = None
    ) -> tuple[str | None, tuple[str, ...]]:
        """Read the store's ``maxmemory-policy`` now and note it (`EvictionCheck.seen`: an
        evicting one is warned about once per backend and server). ``client``: another client
        to the same server to ask over (a health check's own connection; default: the
        backend's).

        Returns:
            The policy (None when the server refuses ``INFO``: an ACL; the check is then skipped,
            logged at debug) and, for each server whose policy evicts, what it risks and the fix.

        Raises:
            redis.RedisError: the connection's error (nothing is noted).
        """
        try:
            with map_exceptions(CommandRefused):
                policies = self._memory_policies(client)
        except CommandRefused as exc:  # NOPERM (an ACL), a managed service's renamed INFO
            self.eviction.skipped(exc.cause)
            return None, ()
        return self.eviction.seen(policies)

    def _memory_policies(self, client: redis.Redis | None = None) -> dict[str, str | None]:
        """The ``maxmemory_policy`` field of ``INFO memory`` (no ``CONFIG`` permission needed),
        by server: ``""``, the backend's one primary, asked over ``client`` (default: the
        backend's). None where the reply has no such field."""
        return {"": policy_of((client or self.client).info("memory"))}

    def answered(self) -> None:
        """The store answered an acquire (a lease's or a semaphore slot's): the eviction check
        starts, once per backend, off the caller's path (a round trip there would delay a new
        lease's first renewal by as much, and at a slow round trip cost it). No I/O here."""
        if self.eviction.due:  # the store answered, so it answers INFO too
            self._eviction_read.start(self._check_eviction)

    def _check_eviction(self) -> None:
        """`read_eviction` once per backend (`EvictionCheck.claim`: not while another call
        reads). A failed or cancelled read leaves it to the next acquire; no failure is raised
        (the acquire's own reply stands)."""
        eviction = self.eviction
        if not eviction.claim():
            return
        # a connection of its own: the pool's idle ones stay for the renewals (taking the one a
        # new client has would make the first renewal open another, a handshake late)
        probe = dedicated_client(self.client)
        try:
            self.read_eviction(None if probe is self.client else probe)
        except STORE_ERRORS as exc:
            eviction.again(exc)
        except BaseException:
            eviction.again(None)
            raise
        finally:
            if probe is not self.client:
                with contextlib.suppress(*STORE_ERRORS):
                    probe.connection_pool.disconnect()  # its own pool: not closed with it
