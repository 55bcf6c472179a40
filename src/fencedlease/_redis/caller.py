"""The release that ends a ``hold``/``with_lease``, run on the caller's own thread (sync face, a
plain Redis on redis-py's non-blocking pool).

A hold's release must not keep its caller past the lease's deadline however the store fails (a
paused Redis, a black-holed link, a client with no timeouts), so the manager runs it on a worker
thread it waits for a bounded time (`fencedlease._renewer.BoundedCalls`). That hop cost more than
the release's own round trip: on two cores a hold ran at about half the rate of an acquire and a
release (the two thread wake-ups, and the acquire after them on a cold core). Here the release
goes out on the caller's thread instead, on a connection of the manager's own that is already
connected, and every wait is bounded by the library:

- the command is sent on an idle connection that is in step (nothing unread), and a few hundred
  bytes into an empty socket buffer do not block;
- its reply is read with a timeout (redis-py's ``read_response(timeout=...)``): the bound first,
  then as long as renewals still move the lease's deadline (`fencedlease._state`, rule 4), and
  the connection is dropped when none comes;
- a connection is made (connect and handshake, which have no bound of the library's) on a
  background thread, never on the caller's: with none ready the release takes the worker thread.

A refused ``EVALSHA`` (``NOSCRIPT``) or a connection that broke while idle (a restart, a
``CLIENT KILL``) hands the release to the worker thread, as before, for the rest of the bound.
"""

from __future__ import annotations

import inspect
import logging
import threading
from collections.abc import Callable
from typing import Any, Final, Protocol

import redis
from redis.exceptions import NoScriptError

from .._errors import BackendError
from .._threads import DaemonThreadPool
from .errors import STORE_ERRORS, store_error
from .replies import decode_release

__all__ = ["CallerReleases", "no_reply"]

log = logging.getLogger("fencedlease.release")


class PackingBackend(Protocol):
    """The Redis backend as seen here (`fencedlease.RedisBackend`)."""

    client: redis.Redis

    def packed_release(self, key: str, owner_token: str) -> bytes | None:
        """``release.lua``'s command as one RESP frame, or None where it is not sent packed."""
        ...


MAX_IDLE: Final = 8
"""Connections kept ready at most (one per thread releasing at once); more are closed."""


def no_reply(what: str, waited_s: float) -> BackendError:
    """The error of a release that got no reply within ``waited_s`` seconds (the command may have
    run: ``sent`` and ``wrote`` are ``"maybe"``); a builtin ``TimeoutError`` as its cause."""
    ms = round(waited_s * 1000)
    error = BackendError(
        f"{what}: no reply within {ms} ms; the lease lapses at its ttl",
        sent="maybe",
        wrote="maybe",
        timed_out=True,
    )
    error.__cause__ = TimeoutError(f"no reply within {ms} ms")
    return error


def _bounds_reads(connection_class: Any) -> bool:
    """Whether redis-py's ``connection_class`` reads a reply with a timeout of the caller's,
    keeping the connection on a timeout, and says whether it is connected (redis-py 5.0.1, the
    oldest supported, may not)."""
    params = inspect.signature(connection_class.read_response).parameters
    connected = isinstance(getattr(connection_class, "is_connected", None), property)
    return connected and "timeout" in params and "disconnect_on_error" in params


class CallerReleases:
    """Connections of one manager's own for releases on the caller's thread (see the module
    doc). Thread-safe; `close` disconnects them; `_after_fork_in_child` forgets the parent's."""

    def __init__(self, backend: PackingBackend) -> None:
        pool: Any = backend.client.connection_pool  # redis-py's pool: no annotations
        self.backend = backend
        self._make: Callable[[], Any] = lambda: pool.connection_class(**pool.connection_kwargs)
        self._lock = threading.Lock()
        self._idle: list[Any] = []
        self._making = False
        self._maker: DaemonThreadPool | None = None
        self._closed = False

    @classmethod
    def for_backend(cls, backend: PackingBackend) -> CallerReleases | None:
        """Releases on the caller's thread for ``backend``, or None where they cannot be bounded
        or would change what a release does: a client holding a connection of its own, a
        blocking pool (a release waits for its connection while renewals go on), Sentinel's pool
        (the primary is asked per connection), client-side caching, a redis-py without a read
        timeout. No I/O."""
        client = backend.client
        if type(client) is not redis.Redis or client.connection is not None:
            return None
        pool = client.connection_pool
        if type(pool) is not redis.ConnectionPool or getattr(pool, "cache", None) is not None:
            return None
        return cls(backend) if _bounds_reads(pool.connection_class) else None

    def ready(self) -> int:
        """How many connections are ready now."""
        with self._lock:
            return len(self._idle)

    def take(self) -> Any | None:
        """A connected connection nobody else uses, or None; with none ready, one is made in the
        background for the next release."""
        with self._lock:
            if self._closed:
                return None
            while self._idle:
                conn = self._idle.pop()
                if conn.is_connected:
                    return conn
            self._make_one()
        return None

    def replace(self, conn: Any) -> None:
        """Drop ``conn`` (broken) and make another in the background."""
        conn.disconnect()
        with self._lock:
            if not self._closed:
                self._make_one()

    def _make_one(self) -> None:  # under _lock
        if not self._making:
            self._making = True
            if self._maker is None:
                self._maker = DaemonThreadPool(1, "fencedlease-release-connect")
            self._maker.submit(self._connect_one)

    def _connect_one(self) -> None:
        conn = self._make()
        try:
            conn.connect()
        except Exception as exc:  # the next release goes to the worker thread and asks again
            log.debug("fencedlease: a connection for releases could not be made: %r", exc)
            conn.disconnect()
            return
        finally:
            with self._lock:
                self._making = False
        self.give_back(conn)

    def give_back(self, conn: Any) -> None:
        """Keep ``conn`` (in step: its last reply read) for the next release."""
        with self._lock:
            if not self._closed and len(self._idle) < MAX_IDLE:
                self._idle.append(conn)
                return
        conn.disconnect()

    def release(
        self,
        conn: Any,
        bound_s: float,
        more_s: Callable[[], float | None],
        on_worker: Callable[[str, str], bool],
    ) -> _OnCaller:
        """One release on ``conn`` (from `take`), its reply awaited ``bound_s`` seconds, then as
        long as ``more_s()`` allows; ``on_worker(key, owner_token)`` runs it on the worker thread
        instead (after ``NOSCRIPT`` or a broken connection)."""
        return _OnCaller(self, conn, bound_s, more_s, on_worker)

    def close(self) -> None:
        """Disconnect the idle connections and stop making new ones."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
            maker, self._maker = self._maker, None
        for conn in idle:
            conn.disconnect()
        if maker is not None:
            maker.shutdown(wait=False)

    def _after_fork_in_child(self) -> None:
        """Forget the parent's connections without closing them (their sockets are the
        parent's) and its maker thread (it does not exist here)."""
        self._lock = threading.Lock()
        self._idle, self._making, self._maker = [], False, None


class _OnCaller:
    """One release on the caller's thread, a `fencedlease._backend.Releases`."""

    def __init__(
        self,
        owner: CallerReleases,
        conn: Any,
        bound_s: float,
        more_s: Callable[[], float | None],
        on_worker: Callable[[str, str], bool],
    ) -> None:
        self._owner, self._conn = owner, conn
        self._bound_s, self._more_s = bound_s, more_s
        self._on_worker = on_worker

    def release(self, key: str, owner_token: str) -> bool:
        """``release.lua`` for ``key`` and ``owner_token`` on the connection, bounded.

        Raises:
            BackendError: no reply in time (``timed_out``; the connection dropped), an error
                reply, or the worker thread's own error.
        """
        owner, conn = self._owner, self._conn
        packed = owner.backend.packed_release(key, owner_token)
        if packed is None:  # pragma: no cover - for_backend admits only packing clients
            owner.give_back(conn)
            return self._on_worker(key, owner_token)
        try:
            conn.send_packed_command([packed], check_health=False)
            reply = self._read(conn, f"release {key!r}")
        except NoScriptError:  # a reply: in step; the worker's path sends EVAL of the source
            owner.give_back(conn)
            return self._on_worker(key, owner_token)
        except redis.ConnectionError:  # closed while idle: the worker's path sends anew
            owner.replace(conn)
            return self._on_worker(key, owner_token)
        except redis.ResponseError as exc:
            owner.give_back(conn)
            raise store_error(f"release {key!r}", exc)  # noqa: B904
        except STORE_ERRORS as exc:
            conn.disconnect()
            raise store_error(f"release {key!r}", exc)  # noqa: B904
        except BaseException:
            conn.disconnect()  # a reply may still be on its way: never reuse the connection
            raise
        owner.give_back(conn)
        return decode_release(reply, key)

    def _read(self, conn: Any, what: str) -> Any:
        wait, waited = self._bound_s, 0.0
        while True:
            try:
                return conn.read_response(timeout=wait, disconnect_on_error=False)
            except redis.TimeoutError:
                waited += wait
            more = self._more_s()
            if more is None:
                conn.disconnect()
                raise no_reply(what, waited)
            wait = more
