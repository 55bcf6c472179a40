"""Proxies and their connections, on one asyncio loop (Toxiproxy's ``proxy.go``); the two links
of a connection are in `_link` (``link.go``).

Everything here runs on the server's loop thread; nothing is shared with other threads.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import socket
import struct
from collections.abc import Coroutine
from typing import Any, Final

from ._link import Link
from ._model import ToxicSpec, format_address, split_address

__all__ = [
    "Connection",
    "Link",
    "Proxy",
    "ProxyStartError",
    "ToxicCollection",
    "resolve_tcp_address",
]

_LINGER_RESET: Final = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close() sends RST


class ProxyStartError(Exception):
    """The proxy could not listen on its address; the message is the real server's wording."""


def _shutdown(sock: socket.socket) -> None:
    # shutdown, not close: sends FIN and wakes a pending read on the same socket with EOF, while
    # the fd stays valid until the connection closes it once every task using it is done.
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


async def resolve_tcp_address(address: str) -> str:
    """``address`` as Go's ``net.ResolveTCPAddr("tcp", address).String()`` renders it.

    ``""`` -> ``":0"``; ``"localhost:80"`` -> ``"127.0.0.1:80"`` (a name resolves to its first
    IPv4 address when it has one); IPv6 hosts come back bracketed. The real server compares
    this form with a proxy's ``listen`` to tell whether an update or ``/populate`` moves it.
    Raises ``ValueError`` with Go's wording for an address without a port or a host that does
    not resolve.
    """
    if not address:
        return ":0"
    host, port = split_address(address)
    if not host:
        return f":{port}"
    try:
        return format_address(str(ipaddress.ip_address(host)), port)
    except ValueError:
        pass
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise ValueError(f"lookup {host}: no such host") from exc
    addresses = [str(info[4][0]) for info in infos]
    ipv4 = [a for a in addresses if ":" not in a]
    return format_address((ipv4 or addresses)[0], port)


class Connection:
    """A client socket, its upstream socket, and the two links between them."""

    def __init__(self, proxy: Proxy, client: socket.socket, upstream: socket.socket) -> None:
        self.proxy = proxy
        self.client = client
        self.upstream = upstream
        toxics = proxy.toxics
        self.links = (
            Link(self, "upstream", client, upstream, list(toxics.chain["upstream"])),
            Link(self, "downstream", upstream, client, list(toxics.chain["downstream"])),
        )
        # The real server sets SO_LINGER 0 on both sockets when a link starts with a reset_peer
        # toxic in its chain, and never clears it: every close of such a connection sends RST.
        self.reset_on_close = any(
            toxic.type == "reset_peer" for chain in toxics.chain.values() for toxic in chain
        )
        self._finished: set[str] = set()
        self._extra: set[asyncio.Task[None]] = set()
        self.closed = False

    def start(self) -> None:
        """Register the links with the proxy's toxics and start moving bytes."""
        for link in self.links:
            self.proxy.toxics.links.add(link)
            link.start()

    def link_finished(self, link: Link) -> None:
        """A link wrote its last byte: close its destination, as the real server does.

        The other link then reads EOF from that socket and runs the end of stream through its own
        toxics (a slow_close delays it); when both are done the connection closes. A connection
        that resets on close (see ``reset_on_close``) closes both sockets with RST at once, as
        the real server's close with SO_LINGER 0 does to the destination (the other socket
        follows there as soon as its link ends).
        """
        if self.reset_on_close:
            self._spawn(self.close())
            return
        _shutdown(link.dest)
        self._finished.add(link.direction)
        if len(self._finished) == 2:
            self._spawn(self.close())

    def _spawn(self, coroutine: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._extra.add(task)
        task.add_done_callback(self._extra.discard)

    async def close(self) -> None:
        """Stop every task of this connection, then close both sockets (RST when it resets on
        close, FIN otherwise)."""
        if self.closed:
            return
        self.closed = True
        current = asyncio.current_task()
        tasks = {t for link in self.links for t in link.all_tasks()} | self._extra
        tasks = {t for t in tasks if t is not current}
        for task in tasks:
            task.cancel()
        if tasks:
            # Wait before closing the sockets: a cancelled sock_recv unregisters its fd only when
            # its future's callbacks run, and a closed fd number may already belong to another.
            await asyncio.wait(tasks)
        for sock in (self.client, self.upstream):
            if self.reset_on_close:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RESET)
            sock.close()
        for link in self.links:
            self.proxy.toxics.links.discard(link)
        self.proxy.connections.discard(self)


class ToxicCollection:
    """A proxy's toxics, one chain per direction, and the live links they apply to."""

    def __init__(self) -> None:
        self.chain: dict[str, list[ToxicSpec]] = {"upstream": [], "downstream": []}
        self.links: set[Link] = set()

    def all(self) -> list[ToxicSpec]:
        """Every toxic, upstream chain first, each in the order added (as the real server lists)."""
        return [*self.chain["upstream"], *self.chain["downstream"]]

    def get(self, name: str) -> ToxicSpec | None:
        """The toxic called ``name``, or None."""
        return next((toxic for toxic in self.all() if toxic.name == name), None)

    def _links(self, direction: str) -> list[Link]:
        return [link for link in self.links if link.direction == direction]

    async def add(self, toxic: ToxicSpec) -> None:
        """Add ``toxic`` for new connections and to every open one."""
        self.chain[toxic.direction].append(toxic)
        await asyncio.gather(*(link.add_toxic(toxic) for link in self._links(toxic.direction)))

    async def update(self, toxic: ToxicSpec) -> None:
        """Replace the toxic of the same name, on new and open connections."""
        chain = self.chain[toxic.direction]
        chain[:] = [toxic if t.name == toxic.name else t for t in chain]
        await asyncio.gather(*(link.update_toxic(toxic) for link in self._links(toxic.direction)))

    async def remove(self, name: str) -> None:
        """Remove toxic ``name`` from new and open connections (no-op when absent)."""
        toxic = self.get(name)
        if toxic is None:
            return
        self.chain[toxic.direction].remove(toxic)
        await asyncio.gather(*(link.remove_toxic(name) for link in self._links(toxic.direction)))

    async def reset(self) -> None:
        """Remove every toxic."""
        for toxic in self.all():
            await self.remove(toxic.name)


class Proxy:
    """A named listener that forwards each accepted connection to ``upstream`` through toxics."""

    def __init__(self, name: str, listen: str, upstream: str) -> None:
        self.name = name
        self.listen = listen
        self.upstream = upstream
        self.enabled = False
        self.toxics = ToxicCollection()
        self.connections: set[Connection] = set()
        self._listener: socket.socket | None = None
        self._accepting: asyncio.Task[None] | None = None
        self._dialing: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        """Listen on ``listen``; port 0 becomes the bound port in ``listen``.

        Raises `ProxyStartError` when the address cannot be resolved or bound.
        """
        loop = asyncio.get_running_loop()
        try:
            host, port = split_address(self.listen)
            infos = await loop.getaddrinfo(
                host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
            )
            family, kind, proto, _, address = infos[0]
            listener = socket.socket(family, kind, proto)
        except (OSError, ValueError) as exc:
            raise ProxyStartError(f"listen tcp {self.listen}: {exc}") from exc
        try:
            # Go sets SO_REUSEADDR on listeners; without it re-enabling a proxy whose old
            # connections sit in TIME_WAIT could not bind the same port again.
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind(address)
            listener.listen(128)
            listener.setblocking(False)
        except OSError as exc:
            listener.close()
            raise ProxyStartError(f"listen tcp {self.listen}: bind: {exc.strerror}") from exc
        bound_host, bound_port = listener.getsockname()[:2]
        self.listen = format_address(bound_host, bound_port)
        self._listener = listener
        self._accepting = loop.create_task(self._accept())
        self.enabled = True

    async def stop(self) -> None:
        """Stop listening and close every open connection (no-op when disabled)."""
        if not self.enabled:
            return
        self.enabled = False
        pending = [t for t in (self._accepting, *self._dialing) if t is not None]
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending)
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        await asyncio.gather(*(c.close() for c in list(self.connections)))

    async def _accept(self) -> None:
        loop = asyncio.get_running_loop()
        assert self._listener is not None
        while True:
            try:
                client, _ = await loop.sock_accept(self._listener)
            except OSError:
                await asyncio.sleep(0.05)  # e.g. EMFILE: back off rather than spin
                continue
            task = loop.create_task(self._connect(client))
            self._dialing.add(task)
            task.add_done_callback(self._dialing.discard)

    async def _connect(self, client: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        upstream: socket.socket | None = None
        try:
            host, port = split_address(self.upstream)
            infos = await loop.getaddrinfo(host or None, port, type=socket.SOCK_STREAM)
            family, kind, proto, _, address = infos[0]
            upstream = socket.socket(family, kind, proto)
            upstream.setblocking(False)
            await loop.sock_connect(upstream, address)
        except (OSError, ValueError):
            # As the real server: a client whose upstream cannot be reached is just closed.
            client.close()
            if upstream is not None:
                upstream.close()
            return
        except BaseException:
            client.close()
            if upstream is not None:
                upstream.close()
            raise
        for sock in (client, upstream):
            # Go enables TCP_NODELAY on every connection; without it small writes wait for ACKs
            # and add up to 40 ms that no toxic asked for.
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        connection = Connection(self, client, upstream)
        self.connections.add(connection)
        connection.start()
