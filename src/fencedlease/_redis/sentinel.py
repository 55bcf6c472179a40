"""Redis Sentinel without I/O: the ``redis+sentinel://`` URL, the client's options, and the
reading of the sentinels' replies and events. The client it names (redis-py's
``redis.sentinel``), the watch on ``+switch-master`` that moves a manager to a new primary at once
and the check of a renewal's primary are `fencedlease._async.sentinel`'s (the sync face's
generated from it).

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
made again after it, a minority sentinel still naming the old primary), so a renewal batch is
also checked (`PrimaryCheck`): it moves deadlines only if, once it ran, a majority of the
configured sentinels, asked at once, name the address it ran on as the primary, with one epoch
(`fencedlease._core.epochs.Majority`). A majority naming another address drops the pool's idle
connections and the batch runs again there; no majority leaves the leases to end at their
deadlines, within ``ttl_ms``. With epoch tokens a grant is checked the same way
(`PrimaryCheck.grant`).
"""

from __future__ import annotations

import logging
from typing import Any, TypeVar
from urllib.parse import unquote

import attrs

from fencedlease._core.epochs import Majority
from fencedlease._core.errors import ValidationError
from fencedlease._core.redact import url_error

from .options import check_connection_options, with_node_timeouts
from .replies import text

__all__ = [
    "MAJORITY_BOUND_S",
    "SWITCH_POLL_S",
    "SentinelURL",
    "parse_sentinel_url",
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
    """The primary's connection options: ``kwargs`` with the URL's user and password, and the
    bounds of a node's connections the caller did not set (`with_node_timeouts`: a sentinel or
    primary cut off by a partition gives way to the next one within a second).

    Raises:
        ValidationError: an option given both in the URL and as an argument, or out of bounds.
    """
    options = with_node_timeouts(kwargs)
    for name in ("username", "password"):
        value = getattr(parsed, name)
        if value is not None:
            if name in options:
                raise ValidationError(name, f"{name} is given both in the URL and as an argument")
            options[name] = value
    check_connection_options(options)
    return options


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


MAJORITY_BOUND_S = 2.0
"""How long the sentinels asked for their word (in parallel) have to answer, in seconds: one
that has not answered by then counts against the majority (it confirms nothing)."""


def master_epoch(client: object, reply: object) -> tuple[Address, int] | None:
    """The primary's address (as `named_address` reads it) and its ``config-epoch`` from a
    ``SENTINEL MASTER <service>`` ``reply`` (redis-py's dict, keys str or bytes); None when a
    field is missing or not a number (a sentinel that does not know the service)."""
    if not isinstance(reply, dict):
        return None
    fields = {text(name): value for name, value in reply.items()}
    try:
        epoch = int(text(fields["config-epoch"]))
        address = named_address(client, (fields["ip"], int(text(fields["port"]))))
    except (KeyError, ValueError):
        return None
    return None if address is None else (address, epoch)


def connection_address(connection: object) -> Address:
    """Where a connection is (or last was) connected: ``(host, port)``."""
    return (text(getattr(connection, "host", "")), int(getattr(connection, "port", 0)))


def doubt(ran_on: Address, majority: Majority[Address], service: str) -> str | None:
    """Why a batch that ran on ``ran_on`` is not confirmed by ``majority`` (the sentinels'
    decision, `fencedlease._core.epochs.Majority`); None when it is."""
    named = majority.named
    if named is None:
        return f"not confirmed: the sentinels of {service!r} name no primary: {majority.why}"
    if named.address != ran_on:
        return (
            f"not confirmed: it ran on {ran_on[0]}:{ran_on[1]}, the sentinels name"
            f" {named.address[0]}:{named.address[1]} the primary of {service!r}"
        )
    return None


def switched_service(message: object, service: str) -> bool:
    """Whether a pub/sub ``message`` is a ``+switch-master`` of ``service`` (its data is
    ``"<service> <old ip> <old port> <new ip> <new port>"``)."""
    if not isinstance(message, dict) or message.get("type") != "message":
        return False
    fields = text(message.get("data")).split()
    return len(fields) == 5 and fields[0] == service
