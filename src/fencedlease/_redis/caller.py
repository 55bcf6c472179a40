"""The release that ends a ``hold``/``with_lease``, run on the caller's own thread (sync face, a
plain Redis on redis-py's non-blocking pool).

A hold's release must not keep its caller past the lease's deadline however the store fails (a
paused Redis, a black-holed link, a client with no timeouts), so the manager runs it on a worker
thread it waits for a bounded time (`fencedlease._core.threads.BoundedCalls`). That hop cost more
than the release's own round trip: on two cores a hold ran at about half the rate of an acquire and
a release (the two thread wake-ups, and the acquire after them on a cold core). Here the release
goes out on the caller's thread instead, on a connection of the manager's own that is already
connected, and every wait is bounded by the library:

- the command is sent on an idle connection that is in step (nothing unread), and a few hundred
  bytes into an empty socket buffer do not block;
- its reply is read with a timeout (by hiredis on the lean path, `fencedlease._redis.lean`, the
  socket's timeout set for the read; else redis-py's ``read_response(timeout=...)``) until one
  give-up instant, fixed when the release begins (the lease's deadline, at least the floor
  after the start), each read at most the client's ``socket_timeout``; with no reply by then the
  connection is dropped, and while renewals still move the lease's deadline (Redis answers
  others: this connection may be a flow dropped silently) the release is handed to the worker
  thread, which sends it anew on a pooled connection (`fencedlease._core.state`, rule 4);
- a connection idle longer than the client's ``health_check_interval`` is not used (redis-py
  would PING it first);
- a connection is made (connect and handshake, which have no bound of the library's) on a
  background thread, never on the caller's: with none ready the release takes the worker thread.

A refused ``EVALSHA`` (``NOSCRIPT``) or a connection that broke while idle (a restart, a
``CLIENT KILL``) hands the release to the worker thread, as before, for the rest of the bound.
"""

from __future__ import annotations

import inspect
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Final, Protocol, cast

import redis

from fencedlease._core.errors import no_reply
from fencedlease._core.threads import DaemonThreadPool, shutdown_pool
from fencedlease._redis.errors import (
    CommandRefused,
    ConnectionLost,
    ScriptNotLoaded,
    TimedOut,
    map_exceptions,
)

from .errors import STORE_ERRORS, socket_failed, store_error
from .lean import NOT_YET, READ_SIZE, fed, leftover, reader_for, reply_of
from .replies import decode_release

__all__ = ["CallerReleases", "caller_releases_for"]

log = logging.getLogger("fencedlease.release")


class PackingBackend(Protocol):
    """The Redis backend as seen here (`fencedlease.RedisBackend`)."""

    client: redis.Redis

    def packed_release(self, key: str, owner_token: str) -> bytes | None:
        """``release.lua``'s command as one RESP frame, or None where it is not sent packed."""
        ...


MAX_IDLE: Final = 8
"""Connections kept ready at most (one per thread releasing at once); more are closed."""


def _bounds_reads(connection_class: Any) -> bool:
    """Whether redis-py's ``connection_class`` reads a reply with a timeout of the caller's,
    keeping the connection on a timeout, and says whether it is connected (redis-py 5.0.1, the
    oldest supported, may not)."""
    params = inspect.signature(connection_class.read_response).parameters
    connected = isinstance(getattr(connection_class, "is_connected", None), property)
    return connected and "timeout" in params and "disconnect_on_error" in params


def _stale(conn: Any) -> bool:
    """Whether ``conn`` sat idle longer than its client's ``health_check_interval`` (seconds; 0:
    none), after which redis-py would PING it first: a flow a firewall or a NAT dropped
    silently is not trusted with a release (another is made)."""
    interval = getattr(conn, "health_check_interval", 0) or 0
    idle_since = getattr(conn, "fencedlease_idle_since", None)
    return bool(interval) and idle_since is not None and time.monotonic() - idle_since > interval


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
                if conn.is_connected and not _stale(conn):
                    return conn
                conn.disconnect()  # closed, or idle past the client's health check interval
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
        conn.fencedlease_idle_since = time.monotonic()
        with self._lock:
            if not self._closed and len(self._idle) < MAX_IDLE:
                self._idle.append(conn)
                return
        conn.disconnect()

    def release(
        self,
        conn: Any,
        give_up: float,
        now: Callable[[], float],
        more_s: Callable[[], float | None],
        on_worker: Callable[[str, str], bool],
    ) -> _OnCaller:
        """One release on ``conn`` (from `take`), its reply awaited until the instant
        ``give_up`` of the clock ``now`` (monotonic seconds); ``on_worker(key, owner_token)``
        runs it on the worker thread instead (after ``NOSCRIPT``, a broken connection, or no
        reply by then while renewals still move the lease's deadline: ``more_s()`` not None)."""
        return _OnCaller(self, conn, give_up, now, more_s, on_worker)

    def close(self, until: float | None = None) -> int:
        """Disconnect the idle connections, stop making new ones and join the thread that makes
        them until the monotonic instant ``until`` at most (None: no bound); whether it is still
        running (1: a connect hung on a store that does not answer; it ends at the client's
        timeouts, and its connection is closed then)."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
            maker, self._maker = self._maker, None
        for conn in idle:
            conn.disconnect()
        return shutdown_pool(maker, until)

    def _after_fork_in_child(self) -> None:
        """Forget the parent's connections without closing them (their sockets are the
        parent's) and its maker thread (it does not exist here)."""
        self._lock = threading.Lock()
        self._idle, self._making, self._maker = [], False, None


class _OnCaller:
    """One release on the caller's thread, a `fencedlease._core.backend.Releases`."""

    def __init__(
        self,
        owner: CallerReleases,
        conn: Any,
        give_up: float,
        now: Callable[[], float],
        more_s: Callable[[], float | None],
        on_worker: Callable[[str, str], bool],
    ) -> None:
        self._owner, self._conn = owner, conn
        self._give_up, self._now, self._more_s = give_up, now, more_s
        self._on_worker = on_worker

    def release(self, key: str, owner_token: str) -> bool:
        """``release.lua`` for ``key`` and ``owner_token`` on the connection, its reply awaited
        until the give-up instant and each read at most the client's ``socket_timeout``.

        Raises:
            BackendError: no reply in time (``timed_out``; the connection dropped), an error
                reply, the client's socket timeout, or the worker thread's own error.
        """
        owner, conn = self._owner, self._conn
        what = f"release {key!r}"
        try:
            packed = owner.backend.packed_release(key, owner_token)
        except BaseException:
            owner.give_back(conn)  # nothing sent
            raise
        if packed is None:  # pragma: no cover - for_backend admits only packing clients
            owner.give_back(conn)
            return self._on_worker(key, owner_token)
        reader = reader_for(conn)  # None: redis-py reads (no hiredis)
        try:
            with map_exceptions(ScriptNotLoaded, ConnectionLost, CommandRefused):
                if reader is None:
                    conn.send_packed_command([packed], check_health=False)
                else:
                    _send_lean(conn, packed)
                reply = self._read(conn, reader)
        except _Silent as silent:
            conn.disconnect()  # a reply may still be on its way: never reuse the connection
            if self._more_s() is None:
                raise no_reply(what, silent.waited_s)  # noqa: B904 - its cause is set
            # renewals still move the deadline, so Redis answers others: the worker's path
            # sends anew on a pooled connection (this one may be a flow dropped silently)
            return self._on_worker(key, owner_token)
        except ScriptNotLoaded:  # a reply: in step; the worker's path sends EVAL of the source
            owner.give_back(conn)
            return self._on_worker(key, owner_token)
        except ConnectionLost:  # closed while idle: the worker's path sends anew
            owner.replace(conn)
            return self._on_worker(key, owner_token)
        except CommandRefused as exc:
            owner.give_back(conn)
            raise store_error(what, exc)  # noqa: B904
        except STORE_ERRORS as exc:
            conn.disconnect()
            raise store_error(what, exc)  # noqa: B904
        except BaseException:
            conn.disconnect()  # a reply may still be on its way: never reuse the connection
            raise
        owner.give_back(conn)
        return decode_release(reply, key)

    def _read(self, conn: Any, reader: Any | None) -> Any:
        """The reply, each read waiting until the give-up instant and at most the client's
        ``socket_timeout`` (whose expiry raises redis-py's ``TimeoutError``, as on the pool);
        read by ``reader`` (hiredis, `fencedlease._redis.lean`), or by redis-py where None.

        Raises:
            _Silent: no reply by the give-up instant.
        """
        socket_timeout = conn.socket_timeout
        started = self._now()
        left = self._give_up - started
        if socket_timeout is not None and socket_timeout < left:
            return _read_within(conn, reader, socket_timeout, disconnect_on_error=True)
        try:
            with map_exceptions(TimedOut):
                return _read_within(conn, reader, max(left, 0.0), disconnect_on_error=False)
        except TimedOut:
            raise _Silent(self._now() - started) from None


def _read_within(conn: Any, reader: Any | None, timeout_s: float, disconnect_on_error: bool) -> Any:
    """``conn``'s reply, each read of its socket waiting ``timeout_s`` seconds at most: redis-py's
    ``read_response(timeout=...)`` where ``reader`` is None, else the lean path's read (as
    `fencedlease._sync.wire.read_lean`, which this module may not import: the faces are built on
    it) with the socket's timeout set for it and put back after.

    Raises:
        redis.TimeoutError: nothing came within ``timeout_s``.
    """
    if reader is None:
        return conn.read_response(timeout=timeout_s, disconnect_on_error=disconnect_on_error)
    sock = conn._sock
    sock.settimeout(timeout_s)
    try:
        reply = reply_of(reader)
        while reply is NOT_YET:
            try:
                data = sock.recv(READ_SIZE)
            except OSError as exc:
                raise socket_failed(conn, exc) from exc
            reply = fed(reader, data)
    finally:
        sock.settimeout(conn.socket_timeout)
    if leftover(reader):  # out of step: answered, and never used again
        conn.disconnect()
    return reply


def _send_lean(conn: Any, packed: bytes) -> None:
    """``packed`` written on ``conn``'s socket (the lean path; no health check: an idle
    connection past its interval is not taken, `_stale`).

    Raises:
        redis.ConnectionError, redis.TimeoutError: the socket's error, as redis-py words it.
    """
    try:
        conn._sock.sendall(packed)
    except OSError as exc:
        raise socket_failed(conn, exc, reading=False) from exc


class _Silent(Exception):
    """No reply by the give-up instant; ``waited_s`` seconds were waited."""

    def __init__(self, waited_s: float) -> None:
        super().__init__(waited_s)
        self.waited_s = waited_s


def caller_releases_for(backend: object) -> CallerReleases | None:
    """`CallerReleases.for_backend` for any lease backend: None but for a sync Redis backend
    (a ``redis.Redis`` client and packed releases) whose releases can be bounded. No I/O."""
    client = getattr(backend, "client", None)
    if not isinstance(client, redis.Redis) or not hasattr(backend, "packed_release"):
        return None
    return CallerReleases.for_backend(cast(PackingBackend, backend))
