"""The toxics: coroutines that sit in a link and delay, drop, cut or reset the bytes passing.

Toxiproxy's design, kept here (``toxics/toxic.go``, ``link.go``): each direction of a connection
is a *link*, a chain of *stubs*; each stub runs one toxic's ``pipe`` between an input queue and an
output queue; ``None`` in a queue is the end of the stream. To add, change or remove a toxic on a
live connection the link *interrupts* a stub (cancels its task): a toxic holding a chunk when
interrupted passes it on first, so data is never dropped by an interruption.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable, Mapping
from typing import Final, Protocol

import attrs

from ._model import ToxicSpec, slice_bounds

__all__ = ["PIPES", "Chunk", "Stub"]

_log = logging.getLogger(__name__)


@attrs.define
class Chunk:
    """Bytes read in one go from a socket; ``timestamp`` is the loop time (seconds) they arrived."""

    data: bytes
    timestamp: float


class LinkHooks(Protocol):
    """What a stub may ask of the link that owns it."""

    def discarded(self, size: int) -> None:
        """``size`` bytes left the link without being written (dropped by a toxic)."""


Queue = asyncio.Queue[Chunk | None]


class Stub:
    """One toxic's place in one link.

    ``input``/``output`` are unbounded queues, so a toxic never blocks handing data on and an
    interruption can always flush what it holds; the link bounds what is buffered instead.
    Toxicity is drawn every time the stub (re)starts, as the real server's ``ToxicStub.Run``
    does: so whenever the link's toxics change (a toxic added restarts the one before it, a
    toxic updated restarts itself, a toxic removed restarts the one before it), each stub
    restarted decides afresh whether its toxic acts.
    """

    def __init__(
        self, input_: Queue, output: Queue, hooks: LinkHooks, toxic: ToxicSpec | None
    ) -> None:
        self.input = input_
        self.output = output
        self.toxic = toxic
        self.hooks = hooks
        self.state: dict[str, int] = {}
        self.closed = False
        self.applies = True
        # Set by a toxic that has begun something the real server cannot interrupt (reset_peer's
        # wait): an interruption then waits for the toxic to finish instead of cancelling it.
        self.committed = False
        self.task: asyncio.Task[None] | None = None

    def draw(self) -> None:
        """Decide whether the toxic acts here: true with probability ``toxicity``."""
        self.applies = self.toxic is None or random.random() < self.toxic.toxicity

    def start(self) -> None:
        """Draw toxicity, then run the toxic (or a pass-through when it does not apply) in a new
        task."""
        self.draw()
        self.task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        toxic = self.toxic
        pipe = PIPES[toxic.type] if toxic is not None and self.applies else _noop
        attributes = toxic.attributes if toxic is not None else {}
        try:
            await pipe(self, attributes)
        except asyncio.CancelledError:
            raise
        except Exception:
            # A broken toxic must not leave the connection hanging open: end the stream.
            _log.exception("toxic %s failed; closing its stream", toxic)
            self.close()

    async def interrupt(self) -> bool:
        """Stop the running toxic; False when the stream already ended here (nothing to resume)."""
        task = self.task
        if self.closed or task is None or task.done():
            return False
        if not self.committed:
            task.cancel()
        await asyncio.wait({task})
        return not self.closed

    def close(self) -> None:
        """End the stream past this point."""
        if not self.closed:
            self.closed = True
            self.output.put_nowait(None)

    def discard(self, chunk: Chunk) -> None:
        """Drop ``chunk`` on the floor (and tell the link, which counts buffered bytes)."""
        self.hooks.discarded(len(chunk.data))


async def _hold(stub: Stub, chunk: Chunk, seconds: float) -> None:
    """Sleep while holding ``chunk``; if interrupted, pass it on first, then stop."""
    try:
        if seconds > 0:
            await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        stub.output.put_nowait(chunk)
        raise


async def _noop(stub: Stub, attributes: Mapping[str, int]) -> None:
    while True:
        chunk = await stub.input.get()
        if chunk is None:
            stub.close()
            return
        stub.output.put_nowait(chunk)


async def _latency(stub: Stub, attributes: Mapping[str, int]) -> None:
    """Each chunk leaves ``latency`` +/- ``jitter`` ms after it arrived (``toxics/latency.go``)."""
    latency_ms, jitter_ms = attributes["latency"], attributes["jitter"]
    loop = asyncio.get_running_loop()
    while True:
        chunk = await stub.input.get()
        if chunk is None:
            stub.close()
            return
        delay_ms = latency_ms
        if jitter_ms > 0:
            # Go: rand.Int63n(2*jitter) - jitter, i.e. uniform in [-jitter, jitter).
            delay_ms += random.randrange(2 * jitter_ms) - jitter_ms
        await _hold(stub, chunk, delay_ms / 1000 - (loop.time() - chunk.timestamp))
        chunk.timestamp = loop.time()
        stub.output.put_nowait(chunk)


async def _timeout(stub: Stub, attributes: Mapping[str, int]) -> None:
    """Drop everything; close the stream once no data has arrived for ``timeout`` ms (every chunk
    restarts the timer, and so does an interruption), or never when it is 0
    (``toxics/timeout.go``).

    Removing a timeout toxic closes the connection (the link does that), because the real server
    does: the bytes it dropped cannot be given back, so the stream could not go on intact.
    """
    timeout_s = attributes["timeout"] / 1000 if attributes["timeout"] > 0 else None
    while True:
        # A separate task, not wait_for: if the stub is interrupted just as a chunk or the end of
        # stream is taken, it is still accounted for (the end honoured) instead of lost.
        getter = asyncio.ensure_future(stub.input.get())
        try:
            await asyncio.wait({getter}, timeout=timeout_s)
        except asyncio.CancelledError:
            if not getter.done():
                getter.cancel()  # Queue.get takes nothing when cancelled before it returns
            elif (taken := getter.result()) is None:
                stub.close()
            else:
                stub.discard(taken)
            raise
        if not getter.done():
            getter.cancel()
            stub.close()
            return
        chunk = getter.result()
        if chunk is None:
            stub.close()
            return
        stub.discard(chunk)


async def _reset_peer(stub: Stub, attributes: Mapping[str, int]) -> None:
    """On the first data (or end of stream), drop it, wait ``timeout`` ms, then end the stream
    (``toxics/reset_peer.go``).

    The reset itself is the connection's doing: a connection that had a ``reset_peer`` toxic
    when it opened closes both sockets with SO_LINGER 0, so this end (and every later close)
    sends RST; one opened before the toxic was added closes with FIN, as in the real server.
    Once the first data has arrived the wait cannot be called off: removing or changing the
    toxic waits for it to end, as the real server's interruption does.
    """
    chunk = await stub.input.get()
    if chunk is not None:
        stub.discard(chunk)
    stub.committed = True
    await asyncio.sleep(attributes["timeout"] / 1000)
    stub.close()


async def _bandwidth(stub: Stub, attributes: Mapping[str, int]) -> None:
    """Pass data at ``rate`` KB/s (bytes per millisecond), in slices of at most 100 ms' worth."""
    rate = attributes["rate"]
    loop = asyncio.get_running_loop()
    owed = 0.0  # seconds of sending time not yet waited for; negative after oversleeping
    while True:
        chunk = await stub.input.get()
        if chunk is None:
            stub.close()
            return
        if rate <= 0:
            # The real server never delivers at rate 0; hold the data until interrupted.
            await _hold(stub, chunk, float(10**9))
            continue
        owed += len(chunk.data) / rate / 1000
        step = rate * 100
        while len(chunk.data) > step:
            await _hold(stub, chunk, 0.1)
            stub.output.put_nowait(Chunk(chunk.data[:step], chunk.timestamp))
            chunk = Chunk(chunk.data[step:], chunk.timestamp)
            owed -= 0.1
        started = loop.time()
        await _hold(stub, chunk, owed)
        owed -= loop.time() - started
        stub.output.put_nowait(chunk)


async def _slow_close(stub: Stub, attributes: Mapping[str, int]) -> None:
    """Pass data; when the stream ends, wait ``delay`` ms before ending it here."""
    while True:
        chunk = await stub.input.get()
        if chunk is None:
            try:
                await asyncio.sleep(attributes["delay"] / 1000)
            finally:
                # Interrupted during the delay: the source has ended, so end the stream now
                # (the real server loses the end here and leaves the connection open).
                stub.close()
            return
        stub.output.put_nowait(chunk)


async def _limit_data(stub: Stub, attributes: Mapping[str, int]) -> None:
    """Pass ``bytes`` bytes in all, then end the stream (the count survives toxic updates)."""
    limit = attributes["bytes"]
    stub.state.setdefault("bytes_transmitted", 0)
    while True:
        chunk = await stub.input.get()
        if chunk is None:
            stub.close()
            return
        remaining = max(limit - stub.state["bytes_transmitted"], 0)
        if remaining < len(chunk.data):
            stub.hooks.discarded(len(chunk.data) - remaining)
            chunk = Chunk(chunk.data[:remaining], chunk.timestamp)
        if chunk.data:
            stub.output.put_nowait(chunk)
            stub.state["bytes_transmitted"] += len(chunk.data)
        if limit - stub.state["bytes_transmitted"] <= 0:
            stub.close()
            return


async def _slicer(stub: Stub, attributes: Mapping[str, int]) -> None:
    """Cut each chunk into slices of about ``average_size`` +/- ``size_variation`` bytes and
    wait ``delay`` microseconds after each (``toxics/slicer.go``; see `slice_bounds`).

    Interrupted during a wait, it passes the rest of the chunk on whole, then stops.
    """
    average_size, size_variation = attributes["average_size"], attributes["size_variation"]
    delay_s = max(attributes["delay"], 0) / 1_000_000
    while True:
        chunk = await stub.input.get()
        if chunk is None:
            stub.close()
            return
        for start, end in slice_bounds(len(chunk.data), average_size, size_variation):
            stub.output.put_nowait(Chunk(chunk.data[start:end], chunk.timestamp))
            try:
                await asyncio.sleep(delay_s)
            except asyncio.CancelledError:
                if end < len(chunk.data):
                    stub.output.put_nowait(Chunk(chunk.data[end:], chunk.timestamp))
                raise


Pipe = Callable[[Stub, Mapping[str, int]], Awaitable[None]]

#: Toxic type -> the coroutine that runs it in one stub.
PIPES: Final[Mapping[str, Pipe]] = {
    "noop": _noop,
    "latency": _latency,
    "timeout": _timeout,
    "reset_peer": _reset_peer,
    "bandwidth": _bandwidth,
    "slow_close": _slow_close,
    "limit_data": _limit_data,
    "slicer": _slicer,
}
