"""Redis Sentinel (sync; the asyncio twins are in `fencedlease._redis.sentinel_aio`): the
``redis+sentinel://`` URL, the client it names (redis-py's ``redis.sentinel``), and the watch on
``+switch-master`` that moves a manager to a new primary at once.

```
redis+sentinel://[[user]:password@]host:port[,host:port...]/service_name[/db]
```

The hosts are the sentinels (port 26379 when left out); user and password are the primary's
(``sentinel_kwargs={"password": ...}`` as a keyword argument for sentinels that ask for one); the
other keyword arguments go to the primary's connections, as for ``redis://``. The client asks the
sentinels for the primary when it connects (``Sentinel.master_for``).

A connection made before a failover stays on the old primary until it fails. redis-py drops it
when the old primary, turned replica, refuses a write (``READONLY``); but a deposed primary stays
a writable master until the sentinels reach it (seconds), and renewals there confirm a lease the
new primary may have handed to someone else. So the backend subscribes to ``+switch-master`` on the
sentinels (`SwitchWatcher`): on the event it drops every connection of the client's pool (the
next command asks the sentinels again) and its manager renews every lease at once, on the new
primary. The event can be missed (a holder cut off from the sentinels, a subscription dropped and
made again after it), so a renewal batch is also checked (`PrimaryCheck`): it moves deadlines
only if, once it ran, a sentinel names the address it ran on as the primary. A sentinel naming
another address drops the pool's connections and the batch runs again there; no sentinel
answering leaves the leases to end at their deadlines, within ``ttl_ms``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar
from urllib.parse import unquote

import attrs
import redis
import redis.sentinel
from redis.backoff import NoBackoff
from redis.retry import Retry

from fencedlease._core.errors import ValidationError
from fencedlease._core.redact import url_error

from .errors import RedisCallError, map_exceptions
from .options import check_connection_options
from .replies import text

__all__ = [
    "SWITCH_POLL_S",
    "PrimaryCheck",
    "PrimaryCheckBase",
    "SentinelURL",
    "SwitchWatcher",
    "parse_sentinel_url",
    "sentinel_client",
    "sentinel_clients",
    "switched_service",
    "unusable_sentinel",
]

log = logging.getLogger("fencedlease")

DEFAULT_SENTINEL_PORT = 26379
SWITCH_CHANNEL = "+switch-master"
SWITCH_POLL_S = 0.2
"""Both faces' ``+switch-master`` watcher: how long one read of the subscription waits for a
message (seconds), and how long it waits before it tries the next sentinel after one failed.
Short, so that the sync watcher's thread sees its stop flag within it (``close`` joins it)."""

T = TypeVar("T")
Address = tuple[str, int]


@attrs.frozen
class SentinelURL:
    """A parsed ``redis+sentinel://`` URL."""

    sentinels: tuple[tuple[str, int], ...]
    service: str
    db: int
    username: str | None
    password: str | None


def _bad(url: str, message: str) -> ValidationError:
    return url_error(url, message)


def unusable_sentinel(url: str, exc: Exception) -> ValidationError:
    """The error of a Sentinel client redis-py refused to make with ``exc`` (either face)."""
    return url_error(url, "not a usable Sentinel client with these options", "kwargs", exc)


def parse_sentinel_url(url: str) -> SentinelURL:
    """``redis+sentinel://[[user]:password@]host:port[,host:port...]/service_name[/db]``.

    Raises:
        ValidationError: no sentinel, a port that is not in 1..65535, no service name, a db that
            is not an int in 0..2**31-1, a query or a fragment (options are keyword arguments).
    """
    rest = url.partition("://")[2]
    netloc, _, path = rest.partition("/")
    if "?" in rest or "#" in rest:
        raise _bad(url, "a redis+sentinel URL takes no query or fragment: pass keyword arguments")
    userinfo, at, hosts = netloc.rpartition("@")
    username = password = None
    if at:
        user, colon, secret = userinfo.partition(":")
        username = unquote(user) or None
        password = unquote(secret) if colon else None
    sentinels: list[tuple[str, int]] = []
    for item in hosts.split(","):
        host, port = item, str(DEFAULT_SENTINEL_PORT)
        if item.startswith("["):  # [IPv6]:port
            host, _, tail = item[1:].partition("]")
            if tail:
                port = tail.removeprefix(":")
        elif ":" in item:
            host, _, port = item.rpartition(":")
        if not host or not (port.isascii() and port.isdigit() and 1 <= int(port) <= 65535):
            raise _bad(url, "each sentinel is host[:port], port in 1..65535, comma-separated")
        sentinels.append((host, int(port)))
    parts = path.split("/") if path else []
    if not parts or not parts[0] or len(parts) > 2:
        raise _bad(url, "a redis+sentinel URL names the service: .../service_name[/db]")
    db = 0
    if len(parts) == 2 and parts[1]:
        if not (parts[1].isascii() and parts[1].isdigit() and int(parts[1]) <= 2**31 - 1):
            raise _bad(url, "the db of a redis+sentinel URL is an int in 0..2147483647")
        db = int(parts[1])
    return SentinelURL(tuple(sentinels), unquote(parts[0]), db, username, password)


def client_options(parsed: SentinelURL, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The primary's connection options: ``kwargs`` with the URL's user and password.

    Raises:
        ValidationError: an option given both in the URL and as an argument, or out of bounds.
    """
    options = dict(kwargs)
    for name in ("username", "password"):
        value = getattr(parsed, name)
        if value is not None:
            if name in options:
                raise ValidationError(name, f"{name} is given both in the URL and as an argument")
            options[name] = value
    check_connection_options(options)
    return options


def sentinel_client(url: str, kwargs: dict[str, Any]) -> redis.Redis:
    """The client of the primary a ``redis+sentinel://`` URL names:
    ``Sentinel(sentinels, sentinel_kwargs=..., **kwargs).master_for(service, db=db)``. No I/O.

    Raises:
        ValidationError: a malformed URL, or an option redis-py does not take (named).
    """
    parsed = parse_sentinel_url(url)
    options = client_options(parsed, kwargs)
    sentinel_kwargs = options.pop("sentinel_kwargs", None)
    try:
        sentinel = redis.sentinel.Sentinel(  # type: ignore[no-untyped-call, unused-ignore]
            list(parsed.sentinels), sentinel_kwargs=sentinel_kwargs, **options
        )
        client: redis.Redis = sentinel.master_for(  # type: ignore[no-untyped-call, unused-ignore]
            parsed.service, db=parsed.db
        )
        pool = client.connection_pool
        pool.connection_class(**pool.connection_kwargs)  # a wrong option fails here, not later
    except (TypeError, ValueError) as exc:
        error = unusable_sentinel(url, exc)
    else:
        return client
    raise error  # here, with no exception holding the URL chained to it


def sentinel_clients(client: object) -> list[Any]:
    """The sentinels' clients behind a ``master_for`` client (empty for any other client)."""
    manager = getattr(getattr(client, "connection_pool", None), "sentinel_manager", None)
    return list(getattr(manager, "sentinels", ()))


def named_address(client: object, reply: object) -> Address | None:
    """The primary's address in a ``SENTINEL GET-MASTER-ADDR-BY-NAME`` ``reply`` (redis-py's
    ``(ip, port)``), as ``client``'s connections reach it: the ``force_master_ip`` of its
    ``Sentinel``, if set, stands for the ip. None for no address (a sentinel that does not
    know the service)."""
    if not isinstance(reply, (tuple, list)) or len(reply) != 2:
        return None
    manager = getattr(getattr(client, "connection_pool", None), "sentinel_manager", None)
    forced = getattr(manager, "_force_master_ip", None)  # redis-py keeps it private
    return (text(reply[0]) if forced is None else str(forced), int(reply[1]))


def connection_address(connection: object) -> Address:
    """Where a connection is (or last was) connected: ``(host, port)``."""
    return (text(getattr(connection, "host", "")), int(getattr(connection, "port", 0)))


def doubt(ran_on: Address, named: Address | None, service: str) -> str | None:
    """Why a batch that ran on ``ran_on`` is not confirmed when the sentinels name ``named``
    (None: no sentinel named one); None when it is."""
    if named is None:
        return f"not confirmed: no sentinel named the primary of {service!r}"
    if named != ran_on:
        return (
            f"not confirmed: it ran on {ran_on[0]}:{ran_on[1]}, the sentinels name"
            f" {named[0]}:{named[1]} the primary of {service!r}"
        )
    return None


def unretried(sentinel: Any) -> redis.Redis:
    """A client of the sentinel ``sentinel`` (a ``redis.Redis``) on a pool of its own, made
    from its options, that tries each command once: asked after a renewal, a sentinel that does
    not answer is skipped for the next one, not retried with backoff for seconds. No I/O."""
    pool = sentinel.connection_pool
    kwargs = {**pool.connection_kwargs, "retry": Retry(NoBackoff(), 0)}
    own = redis.ConnectionPool(connection_class=pool.connection_class, **kwargs)
    return redis.Redis(connection_pool=own)


_C = TypeVar("_C")


class PrimaryCheckBase(Generic[_C]):
    """What both faces' checks hold: the ``master_for`` client, its sentinels, and a client of
    the check's own per sentinel (``own``, of type ``_C``: the face's `unretried`), made now
    (no I/O), not on first use: two renewal threads may check at once."""

    def __init__(self, client: Any, own: Callable[[Any], _C]) -> None:
        self._client = client
        self._sentinels = sentinel_clients(client)
        self._asked = [own(sentinel) for sentinel in self._sentinels]
        self.checks = 0  #: how many times the sentinels were asked

    @property
    def active(self) -> bool:
        """Whether there is anything to check (a ``master_for`` client)."""
        return bool(self._sentinels)


class PrimaryCheck(PrimaryCheckBase[redis.Redis]):
    """Whether a renewal batch ran on the primary the sentinels name, for a ``master_for``
    client (`active`; nothing to check for another client).

    `run` runs the batch on one connection of the client's pool, then asks the sentinels, one
    at a time until one answers, ``SENTINEL GET-MASTER-ADDR-BY-NAME`` (one round trip per
    batch, after it: a primary named after the batch ran there was still the primary when it
    ran, or the sentinels would name the new one). A deposed primary stays a writable master
    for seconds after a planned failover, and a holder that missed ``+switch-master`` would go
    on renewing there while the new primary hands its key to another. Each sentinel is asked
    once per check, on a client of the check's own (`unretried`), closed by `close`.

    With ``replica_acks`` the script and its ``WAIT`` go out as a pipeline, which redis-py
    gives a connection of the pool's own choosing, maybe not ``one``'s: the address checked is
    then ``one``'s. The ``WAIT`` covers that case: a renewal a deposed primary answered gets no
    replica's acknowledgement there and does not count either."""

    _client: redis.Redis

    def __init__(self, client: redis.Redis) -> None:
        super().__init__(client, unretried)

    def named(self) -> Address | None:
        """The primary's address as the first sentinel that answers names it; None when none
        does (each one's error is dropped: the next is asked)."""
        self.checks += 1
        service = self._client.connection_pool.service_name  # type: ignore[attr-defined]
        for sentinel in self._asked:
            address = named_address(self._client, self._ask(sentinel, service))
            if address is not None:
                return address
        return None

    @staticmethod
    def _ask(sentinel: redis.Redis, service: str) -> object:
        """``sentinel``'s ``SENTINEL GET-MASTER-ADDR-BY-NAME`` reply; None when it failed."""
        try:
            with map_exceptions(RedisCallError):
                return sentinel.sentinel_get_master_addr_by_name(service)
        except (RedisCallError, OSError):
            return None

    def _once(self, fn: Callable[[redis.Redis], T]) -> tuple[T, Address, Address | None]:
        # one connection of the pool, whose address is known
        one = self._client.client()  # type: ignore[no-untyped-call]
        try:
            result = fn(one)
            ran_on = connection_address(one.connection)
        finally:
            one.close()
        return result, ran_on, self.named()

    def run(
        self, fn: Callable[[redis.Redis], T], switched: Callable[[], object]
    ) -> tuple[T, str | None]:
        """``fn(one)``'s result, ``one`` a client on a single connection of the pool, and None
        when the sentinels confirm the primary it ran on; else why not (see `doubt`). When a
        sentinel names another address, ``switched()`` is called (it drops the pool's idle
        connections, so the next one asks the sentinels; the backend's also renews every
        lease at once) and ``fn`` runs once more, on a new connection, checked again.

        Raises:
            redis.RedisError: what ``fn`` raised, or the connection's error.
        """
        service = self._client.connection_pool.service_name  # type: ignore[attr-defined]
        result, ran_on, named = self._once(fn)
        if named is None or named == ran_on:
            return result, doubt(ran_on, named, service)
        log.warning(
            "fencedlease: a renewal ran on %s:%s, the sentinels name %s:%s the primary of %r",
            *ran_on, *named, service,
        )  # fmt: skip
        switched()
        result, ran_on, named = self._once(fn)
        return result, doubt(ran_on, named, service)

    def close(self) -> None:
        """Close the check's own sentinel clients."""
        for sentinel in self._asked:
            sentinel.close()
            sentinel.connection_pool.disconnect()


def switched_service(message: object, service: str) -> bool:
    """Whether a pub/sub ``message`` is a ``+switch-master`` of ``service`` (its data is
    ``"<service> <old ip> <old port> <new ip> <new port>"``)."""
    if not isinstance(message, dict) or message.get("type") != "message":
        return False
    fields = text(message.get("data")).split()
    return len(fields) == 5 and fields[0] == service


class SwitchWatcher:
    """A daemon thread subscribed to ``+switch-master`` on the sentinels of a ``master_for``
    client (one at a time: the next when one fails). On the event of the client's service it
    drops every connection of the client's pool and calls ``on_switch()`` (an exception it raises
    is logged). Started by `start`, stopped by `close`; nothing for another client."""

    def __init__(self, client: redis.Redis, on_switch: Callable[[], object]) -> None:
        self._client = client
        self._on_switch = on_switch
        self._sentinels = sentinel_clients(client)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.switches = 0

    @property
    def active(self) -> bool:
        return bool(self._sentinels)

    def start(self) -> None:
        if not self._sentinels or (self._thread is not None and self._thread.is_alive()):
            return  # (a thread made before os.fork is not alive in the child: a new one starts)
        self._thread = threading.Thread(target=self._run, name="fencedlease-sentinel", daemon=True)
        self._thread.start()

    def switched(self) -> None:
        """Apply a switch: drop the pool's connections, then ``on_switch()``."""
        self.switches += 1
        self._client.connection_pool.disconnect()
        try:
            self._on_switch()
        except Exception:
            log.exception("fencedlease: on_switch after +switch-master failed")

    def _run(self) -> None:
        service = self._client.connection_pool.service_name  # type: ignore[attr-defined]
        index = 0
        while not self._stop.is_set():
            sentinel = self._sentinels[index % len(self._sentinels)]
            index += 1
            try:
                with (
                    map_exceptions(RedisCallError),
                    sentinel.pubsub(ignore_subscribe_messages=True) as pubsub,
                ):
                    pubsub.subscribe(SWITCH_CHANNEL)
                    while not self._stop.is_set():
                        if switched_service(pubsub.get_message(timeout=SWITCH_POLL_S), service):
                            log.warning("fencedlease: +switch-master for %r", service)
                            self.switched()
            except (RedisCallError, OSError):
                self._stop.wait(SWITCH_POLL_S)  # the next sentinel

    def close(self, *, sentinels: bool = True) -> None:
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(2.0)
        if sentinels:  # the sentinels' clients, when the client is ours
            for sentinel in self._sentinels:
                sentinel.close()
