"""A link: one direction of a proxied connection, its bytes passed through the chain of toxics
of that direction (Toxiproxy's ``link.go``). Runs on the server's loop thread."""

from __future__ import annotations

import asyncio
import socket
from typing import Final, Protocol

from ._model import ToxicSpec
from ._toxics import Chunk, Queue, Stub

__all__ = ["ConnectionHooks", "Link"]

_READ_SIZE: Final = 32 * 1024  # what Go's io.Copy reads at a time
# Bytes a link may hold between reading and writing before it stops reading, so a slow toxic
# pushes back on the sender through TCP instead of growing memory without bound.
_MAX_BUFFERED: Final = 4 * 1024 * 1024


class ConnectionHooks(Protocol):
    """What a link may ask of the connection that owns it."""

    def link_finished(self, link: Link) -> None:
        """``link`` wrote its last byte: the connection closes what it must."""


class Link:
    """One direction of one connection: reader -> stubs (noop first, then toxics) -> writer."""

    def __init__(
        self,
        connection: ConnectionHooks,
        direction: str,
        source: socket.socket,
        dest: socket.socket,
        chain: list[ToxicSpec],
    ) -> None:
        self.connection = connection
        self.direction = direction
        self.source = source
        self.dest = dest
        self.input: Queue = asyncio.Queue()
        self.output: Queue = asyncio.Queue()
        self.stubs: list[Stub] = []
        queue = self.input
        toxics: list[ToxicSpec | None] = [None, *chain]
        for position, toxic in enumerate(toxics):
            following: Queue = asyncio.Queue() if position + 1 < len(toxics) else self.output
            self.stubs.append(Stub(queue, following, self, toxic))
            queue = following
        self._buffered = 0
        self._room = asyncio.Event()
        self._room.set()
        self.tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        """Start reading, the stubs and writing."""
        loop = asyncio.get_running_loop()
        for stub in self.stubs:
            stub.start()
        self.tasks = [loop.create_task(self._read()), loop.create_task(self._write())]

    def all_tasks(self) -> list[asyncio.Task[None]]:
        """Every task this link runs now."""
        return self.tasks + [stub.task for stub in self.stubs if stub.task is not None]

    async def _read(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while True:
                while self._buffered >= _MAX_BUFFERED:
                    self._room.clear()
                    await self._room.wait()
                data = await loop.sock_recv(self.source, _READ_SIZE)
                if not data:
                    break
                self._buffered += len(data)
                self.input.put_nowait(Chunk(data, loop.time()))
        except OSError:
            pass
        self.input.put_nowait(None)

    async def _write(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while True:
                chunk = await self.output.get()
                if chunk is None:
                    break
                await loop.sock_sendall(self.dest, chunk.data)
                self.discarded(len(chunk.data))
        except OSError:
            pass
        self.connection.link_finished(self)

    def discarded(self, size: int) -> None:
        """``size`` buffered bytes are gone (written or dropped)."""
        self._buffered -= size
        if self._buffered < _MAX_BUFFERED:
            self._room.set()

    def _find(self, name: str) -> int | None:
        for position, stub in enumerate(self.stubs):
            if stub.toxic is not None and stub.toxic.name == name:
                return position
        return None

    async def add_toxic(self, toxic: ToxicSpec) -> None:
        """Append ``toxic`` to the chain of this live link."""
        last = self.stubs[-1]
        new_input: Queue = asyncio.Queue()
        stub = Stub(new_input, last.output, self, toxic)
        if await last.interrupt():
            last.output = new_input
            self.stubs.append(stub)
            stub.start()
            last.start()
        # Otherwise the stream has ended in this link: there is nothing left to poison.

    async def update_toxic(self, toxic: ToxicSpec) -> None:
        """Restart the stub of ``toxic.name`` with new attributes (and so a new toxicity draw)."""
        position = self._find(toxic.name)
        if position is None:
            return
        stub = self.stubs[position]
        if await stub.interrupt():
            stub.toxic = toxic
            stub.start()

    async def remove_toxic(self, name: str) -> None:
        """Take toxic ``name`` out of the chain, passing on what it had not taken yet."""
        position = self._find(name)
        if position is None:
            return
        stub = self.stubs[position]
        if not await stub.interrupt():
            return
        assert stub.toxic is not None
        if stub.toxic.type == "timeout":
            # The real server's timeout toxic closes the stream on removal (CleanupToxic).
            stub.close()
            return
        previous = self.stubs[position - 1]
        resume = await previous.interrupt()
        while not stub.input.empty():
            chunk = stub.input.get_nowait()
            if chunk is None:
                stub.close()
                return
            stub.output.put_nowait(chunk)
        previous.output = stub.output
        del self.stubs[position]
        if resume:
            previous.start()
