"""What the asyncio face waits with, where the sync face uses threads: the primitives the code
generated for both faces calls by the same names (the sync ones are in
`fencedlease._sync.primitives`; a generated module imports ``.primitives`` and gets its face's),
and `retrieve`, the done callback the asyncio face's own tasks share.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import sys
import time
from collections.abc import Awaitable, Callable, Collection, Mapping
from typing import Any, Generic, Protocol, TypeVar

from fencedlease._core.clock import Clock
from fencedlease._core.errors import BackendError, no_reply
from fencedlease._core.state import LeaseState, release_bound_s, release_wait_more_s
from fencedlease._core.validate import ArgumentTypeError, check_backend

__all__ = [
    "CALLER",
    "FORK_INERT",
    "LOG_NAME",
    "Background",
    "BodyCanceller",
    "Call",
    "Chores",
    "Detached",
    "Event",
    "FinalReleases",
    "Lock",
    "LostSignal",
    "NodeWorkers",
    "Runner",
    "Slots",
    "Spawns",
    "bounded",
    "call_body",
    "check_lease_backend",
    "close_renewer",
    "close_waiter",
    "current_caller",
    "drop_unused",
    "pause",
    "retrieve",
    "shield",
    "sleep",
    "waiter_after_fork",
]

T = TypeVar("T")
R = TypeVar("R")


LOG_NAME = "fencedlease.aio"
"""The logger of this face's messages (the sync face's is ``fencedlease``)."""


class LostSignal:
    """Set once ``state`` is marked lost, from whichever thread marks it (reading ``lost`` in a
    worker thread can be what marks it); awaited on the event loop it was made on. Made inside a
    running loop."""

    __slots__ = ("_future",)

    def __init__(self, state: LeaseState) -> None:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        self._future = future
        state.add_listener(lambda _: _set_threadsafe(loop, future))

    async def wait(self, timeout_s: float | None) -> None:
        """Wait until set or ``timeout_s`` seconds have passed (None: no bound)."""
        await asyncio.wait({self._future}, timeout=timeout_s)


def _set_threadsafe(loop: asyncio.AbstractEventLoop, future: asyncio.Future[None]) -> None:
    """Resolve ``future`` from whichever thread marked the lease lost."""

    def resolve() -> None:
        if not future.done():
            future.set_result(None)

    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:
        resolve()
    elif not loop.is_closed():
        loop.call_soon_threadsafe(resolve)


def retrieve(task: asyncio.Future[Any]) -> None:
    """Mark a finished task's outcome as seen: its failure, if any, was handled or is moot (its
    awaiter may have been cancelled meanwhile). A done callback."""
    if not task.cancelled():
        task.exception()


class Background:
    """One piece of work at a time off the caller's path (a task named ``name``): `start` runs
    ``fn()`` unless a run is still going, `stop` cancels a run and waits for it."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._task: asyncio.Task[Any] | None = None

    def start(self, fn: Callable[[], Awaitable[Any]]) -> None:
        """Run ``fn()`` in a task of the running loop, unless the last one is still running."""
        if self._task is None or self._task.done():

            async def run() -> None:
                await fn()

            self._task = asyncio.get_running_loop().create_task(run(), name=self._name)
            self._task.add_done_callback(retrieve)

    async def stop(self) -> None:
        """Cancel a run still going and wait for it to end."""
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            await asyncio.wait({task})


class Event:
    """A flag one task sets and another waits for (`asyncio.Event`), the wait bounded: the twin
    of the sync face's (`threading.Event`). Used on the event loop it was made on."""

    __slots__ = ("_event",)

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def set(self) -> None:
        self._event.set()

    def clear(self) -> None:
        self._event.clear()

    def is_set(self) -> bool:
        return self._event.is_set()

    async def wait(self, timeout_s: float | None) -> bool:
        """Wait until set or ``timeout_s`` seconds have passed (None: no bound); whether it is
        set."""
        if timeout_s is None:
            await self._event.wait()
            return True
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._event.wait(), timeout_s)
        return self._event.is_set()


async def bounded(fn: Callable[[], Awaitable[T]], timeout_s: float) -> T:
    """``fn()``'s result, waiting ``timeout_s`` seconds at most.

    Raises:
        TimeoutError: no result within ``timeout_s`` (the builtin; ``fn()`` is cancelled), or
            what ``fn()`` raised.
    """
    return await asyncio.wait_for(fn(), timeout_s)


async def sleep(clock: Clock, seconds: float) -> None:
    """Wait ``seconds`` on ``clock``: its ``async_sleep`` (an `AsyncClock`, such as a fake
    clock), else `asyncio.sleep`, in real time."""
    await getattr(clock, "async_sleep", asyncio.sleep)(seconds)


class NodeWorkers:
    """Runs each node's share of a batch as a task of its own, the nodes at once: the twin of the
    sync face's worker thread per node. A call not done within its bound is cancelled (a task can
    be; the sync face's thread runs on)."""

    async def run(
        self, calls: Mapping[str, Callable[[], Awaitable[R]]], timeout_s: float
    ) -> dict[str, R | None]:
        """Each node's ``call()`` at once; its result, or None for a node whose call was not done
        within ``timeout_s`` seconds (that task is cancelled).

        Raises:
            Exception: what a call that finished in time raised.
        """
        tasks = {node: asyncio.ensure_future(call()) for node, call in calls.items()}
        done, pending = await asyncio.wait(tasks.values(), timeout=timeout_s)
        for task in pending:
            task.cancel()
        return {node: task.result() if task in done else None for node, task in tasks.items()}

    def close(self) -> None:
        """Nothing to stop: a batch's tasks end with it."""


class Lock:
    """Nothing to lock on one event loop: the code between two awaits runs alone. The twin of the
    sync face's `threading.Lock`, used with ``with`` around code that does not wait."""

    __slots__ = ()

    def __enter__(self) -> None:
        pass

    def __exit__(self, *exc: object) -> None:
        pass


async def pause(seconds: float) -> None:
    """Wait ``seconds`` in real time (`asyncio.sleep`)."""
    await asyncio.sleep(seconds)


async def shield(step: Callable[[], Awaitable[T]]) -> T:
    """``step()`` run to its end even if the caller is cancelled meanwhile (`asyncio.shield`): a
    clean-up a cancellation must not cut short. The sync face's just calls it."""
    return await asyncio.shield(step())


class Runner:
    """One long-lived run of a function, restarted once it has ended: a task named ``name``. The
    twin of the sync face's thread; `stop` cancels it (a task can be)."""

    __slots__ = ("_name", "_task")

    def __init__(self, name: str) -> None:
        self._name = name
        self._task: asyncio.Task[None] | None = None

    @property
    def started(self) -> bool:
        """Whether a run was ever started."""
        return self._task is not None

    @property
    def running(self) -> bool:
        """Whether the last run is still going."""
        return self._task is not None and not self._task.done()

    def start(self, fn: Callable[[], Awaitable[None]], died: Callable[[], None]) -> None:
        """Start a run of ``fn()`` in the running loop; ``died()`` is called (with the exception
        being handled) if it ends on an error other than its cancellation, which it re-raises
        (its outcome is marked seen: `retrieve`)."""

        async def run() -> None:
            try:
                await fn()
            except asyncio.CancelledError:
                raise
            except BaseException:
                died()
                raise

        self._task = asyncio.get_running_loop().create_task(run(), name=self._name)
        self._task.add_done_callback(retrieve)

    async def stop(self, until: float | None, wake: Callable[[], object]) -> None:
        """Cancel a run still going and wait for it to end (``until`` and ``wake`` are the sync
        face's: a task ends once cancelled). The run's own failure is not raised here (``died``
        was told), as a thread's is not; a cancellation of the caller propagates."""
        task = self._task
        if task is None or task.done():
            return
        task.cancel()
        await asyncio.wait({task})


class Call(Generic[T]):
    """A call `Chores` runs off the caller's path: a task of the running loop."""

    __slots__ = ("_task",)

    def __init__(self, task: asyncio.Task[T]) -> None:
        self._task = task

    def done(self) -> bool:
        return self._task.done()

    def cancelled(self) -> bool:
        return self._task.cancelled()

    def unsent(self) -> bool:
        """Whether it ended before it could send anything: never known of a task (a cancelled
        one may have sent its command)."""
        return False

    def failed(self) -> bool:
        """Whether it ended cancelled or on an error."""
        return self._task.cancelled() or self._task.exception() is not None

    def result(self) -> T:
        """Its result, or the error it raised."""
        return self._task.result()

    def withdraw(self) -> bool:
        """Stop it if it has not started: whether it was stopped (never, for a task: it may have
        started already)."""
        return False

    async def wait(self, timeout_s: float) -> bool:
        """Wait until it ends or ``timeout_s`` seconds have passed; whether it ended."""
        done, _ = await asyncio.wait({self._task}, timeout=timeout_s)
        return bool(done)

    def on_done(self, fn: Callable[[Call[T]], None]) -> None:
        """Call ``fn(self)`` once it has ended (at once if it has)."""
        self._task.add_done_callback(lambda _: fn(self))


class Chores:
    """Short calls run off the caller's path, so that a slow one cannot stretch the caller's
    bounded wait: each a task of the running loop (the sync face's run on a small pool of threads
    named ``name``). `close` cancels those still running and waits for them."""

    __slots__ = ("_tasks",)

    def __init__(self, name: str) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()

    def submit(self, fn: Callable[..., Awaitable[T]], *args: Any) -> Call[T]:
        """Start ``fn(*args)``; its `Call`."""

        async def run() -> T:
            return await fn(*args)

        task = asyncio.get_running_loop().create_task(run())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        # A caller that gave up (its timeout) no longer reads the outcome: a failure that comes
        # after is moot, and must not be logged as "Task exception was never retrieved".
        task.add_done_callback(retrieve)
        return Call(task)

    async def close(self, until: float | None) -> None:
        """Cancel the calls still running and wait for them to end (``until`` is the sync
        face's bound: a cancelled task ends at once)."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


# --- manager ---

CALLER = "task"
"""What runs a hold's body on this face, as `NestedHoldError` names it (the sync face's:
``"thread"``)."""


def current_caller() -> object:
    """The caller's thread or task: here the running task (None outside one)."""
    return asyncio.current_task()


async def close_renewer(renewer: _ClosingRenewer, until: float) -> int:
    """Close the manager's ``renewer``; how many of its workers still run at the monotonic instant
    ``until`` (its task ends once cancelled: none). An adapter: this face's renewer returns the
    leases it stopped renewing, the sync face's a count of its threads."""
    await renewer.close()
    return 0


class _ClosingRenewer(Protocol):
    async def close(self) -> list[Any]: ...


class _Releasable(Protocol):
    """A lease as `FinalReleases` sees it."""

    @property
    def _state(self) -> LeaseState: ...

    async def release(self) -> bool: ...


class FinalReleases:
    """The release that ends a hold, bounded: it waits `release_bound_s`, and on while renewals
    still move the lease's deadline (`release_wait_more_s`); then the release is cancelled and
    the lease lapses at its TTL. The sync face's runs on a worker thread (or on the caller's own,
    on a connection of the manager's, for a plain Redis). ``backend`` and ``caller`` are the
    sync face's."""

    __slots__ = ()

    def __init__(self, backend: object, caller: object) -> None:
        pass

    async def release(self, lease: _Releasable, clock: Clock) -> bool:
        """``lease.release()``'s reply, within the bound.

        Raises:
            BackendError: the store failed, or did not answer in time (``timed_out``).
        """
        state = lease._state
        release = asyncio.ensure_future(lease.release())
        waited, wait = 0.0, release_bound_s(state, clock.monotonic())
        try:
            while True:
                done, _ = await asyncio.wait((release,), timeout=wait)
                if done:
                    return release.result()
                waited += wait
                more = release_wait_more_s(state, clock.monotonic())
                if more is None:
                    break
                wait = more
        finally:
            if not release.done():
                release.cancel()
                with contextlib.suppress(asyncio.CancelledError, BackendError):
                    await release
        raise no_reply(f"release {state.key!r}", waited)

    def close(self, until: float) -> int:
        """Nothing of its own to stop (its releases are tasks of the manager's `Spawns`)."""
        return 0

    def _after_fork_in_child(self) -> None:
        """Nothing to forget."""


Slots = asyncio.Semaphore
"""At most so many callers at once, entered with ``async with`` (the sync face's: a
`threading.Semaphore`)."""


class Spawns:
    """The calls a manager runs off its caller's path and ``close()`` waits for (releases,
    clean-ups): each a task of the running loop, named by the call. The sync face's run on a pool
    of at most ``workers`` daemon threads named ``name``."""

    __slots__ = ("_calls",)

    def __init__(self, name: str, workers: int) -> None:
        self._calls: dict[asyncio.Task[Any], Call[Any]] = {}

    def __bool__(self) -> bool:
        """Whether a call is still running."""
        return bool(self._calls)

    def spawn(self, name: str, fn: Callable[..., Awaitable[T]], *args: Any) -> Call[T]:
        """Start ``fn(*args)`` as a task named ``name``; its `Call`.

        Raises:
            RuntimeError: no running loop (a coroutine closed by the garbage collector).
        """

        async def run() -> T:
            return await fn(*args)

        task = asyncio.get_running_loop().create_task(run(), name=name)
        call = self._calls[task] = Call(task)
        task.add_done_callback(self._done)
        return call

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._calls.pop(task, None)
        if not task.cancelled() and task.exception() is not None:
            # The caller that awaited it (if still there) got the error; this is for the rest.
            logging.getLogger(LOG_NAME).debug("%s failed: %r", task.get_name(), task.exception())

    async def shielded(
        self, name: str, what: str, fn: Callable[..., Awaitable[T]], *args: Any
    ) -> T:
        """``fn(*args)`` run as a spawned call (``what`` names it in an error) that cancelling the
        caller does not stop (the sync
        face's runs it on the caller's thread: a thread is not cancelled). A cancellation of the
        caller still propagates.

        Raises:
            BackendError: ``close()`` stopped the call at its bound.
        """
        call = self.spawn(name, fn, *args)
        try:
            return await asyncio.shield(call._task)
        except asyncio.CancelledError:
            if not call.cancelled():
                raise  # the caller was cancelled
            current = asyncio.current_task()
            if current is not None and sys.version_info >= (3, 11) and current.cancelling():
                raise
            raise BackendError(f"{what}: stopped by close(); the lease lapses at its ttl") from None

    async def finish(
        self, until: float, releases: Collection[Call[Any]]
    ) -> tuple[set[Call[Any]], int]:
        """Wait for the calls until the monotonic instant ``until``, then cancel those still
        running (and wait for them to end). The calls late, and how many of them are not among
        ``releases`` (clean-ups cancelled at the bound)."""
        while self._calls and (left := until - time.monotonic()) > 0:
            await asyncio.wait(set(self._calls), timeout=left)
        late = dict(self._calls)
        for task in late:
            task.cancel()
        if late:
            await asyncio.wait(set(late))
        calls = set(late.values())
        return calls, len(calls - set(releases))

    def _after_fork_in_child(self) -> None:
        """Forget the parent's tasks without touching them."""
        self._calls = {}


class BodyCanceller:
    """Cancels the body of a hold when its lease is lost: the task that made it (inside the
    hold's entry), as `asyncio.timeout` cancels its block, the cancel posted to the loop, never
    made inline, so a body that notices the loss itself is not cancelled mid-step. `taken_back`
    tells that cancellation apart from one from elsewhere (``Task.uncancel`` on Python 3.11+).
    The sync face's thread is not interrupted (its body reads ``lease.lost``): its twin does
    nothing."""

    __slots__ = ("_cancelling", "_exiting", "_loop", "_message", "_requested", "_task")

    def __init__(self, message: str) -> None:
        task = asyncio.current_task()
        assert task is not None, "a hold runs inside a task"
        self._task, self._loop = task, asyncio.get_running_loop()
        self._cancelling = 0
        if sys.version_info >= (3, 11):
            self._cancelling = task.cancelling()
        self._message = message
        self._requested = False
        self._exiting = False

    def on_lost(self, _state: LeaseState) -> None:
        """A loss listener: called wherever the loss was marked (the renewal task, the body
        itself, another thread)."""
        loop = self._loop
        if self._exiting or loop.is_closed():
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            loop.call_soon(self._cancel)
        else:
            loop.call_soon_threadsafe(self._cancel)

    def _cancel(self) -> None:
        task = self._task
        if self._exiting or self._requested or task.done():
            return
        self._requested = True
        task.cancel(self._message)

    def taken_back(self, exc: BaseException | None) -> bool:
        """Stop cancelling (the body has ended); whether ``exc`` is this canceller's own
        cancellation, taken back, rather than the body's outcome."""
        self._exiting = True
        if not self._requested:
            return False
        # The cancel was delivered in the block (posted while it was suspended), so it is ours
        # to take back, unless someone else cancelled too.
        ours = True
        if sys.version_info >= (3, 11):
            ours = self._task.uncancel() <= self._cancelling
        return ours and isinstance(exc, asyncio.CancelledError)


class Detached(Generic[T]):
    """A step run to its end in a task of its own (named ``name``), whatever happens to the
    caller that started it: awaited through `asyncio.shield`. The sync face's runs it at once on
    the caller's thread."""

    __slots__ = ("_task",)

    def __init__(self, name: str, step: Callable[[], Awaitable[T]]) -> None:
        async def run() -> T:
            return await step()

        self._task = asyncio.get_running_loop().create_task(run(), name=name)
        self._task.add_done_callback(retrieve)  # a caller cancelled meanwhile never sees it

    def done(self) -> bool:
        return self._task.done()

    async def result(self) -> T:
        """The step's result (or its error); cancelling the caller does not stop the step."""
        return await asyncio.shield(self._task)

    async def wait(self) -> None:
        """Wait until the step has ended."""
        await asyncio.wait({self._task})


FORK_INERT = True
"""Whether a manager inherited through ``os.fork`` is inert in the child: here yes (its event
loop and connections do not survive a fork); the sync face's goes on with fresh threads."""


def check_lease_backend(client: object, sync_classes: tuple[type, ...]) -> None:
    """``client`` (not this face's redis-py client) must be a lease backend of this face, not one
    of ``sync_classes`` (the library's sync backends).

    Raises:
        ValidationError: naming ``client``: not a backend; an `ArgumentTypeError` (also a
            ``TypeError``) for a client or backend of the sync face.
    """
    if type(client).__module__.startswith("redis."):  # this face's clients were told apart
        raise ArgumentTypeError(
            "client",
            "AsyncLeaseManager needs a redis.asyncio.Redis; a redis.Redis goes to LeaseManager",
        )
    check_backend(client, asyncio=True, sync_classes=sync_classes)


def drop_unused(backend: object) -> None:
    """Give up a backend made from a URL for a manager that could not be made: nothing to close
    here (it opens its connections on its first command); the sync face's closes it."""


async def call_body(fn: Callable[[Any], Awaitable[T]], lease: object) -> T:
    """``fn(lease)`` awaited: ``with_lease``'s body.

    Raises:
        ValidationError: (an `ArgumentTypeError`, also a ``TypeError``) ``fn(lease)`` returned
            no awaitable: a sync function, which goes to the sync face.
    """
    pending = fn(lease)
    if not inspect.isawaitable(pending):
        raise ArgumentTypeError(
            "fn",
            f"fn must be an async function (fn(lease) returned {type(pending).__name__}, not an"
            " awaitable); a sync function goes to LeaseManager.with_lease",
        )
    return await pending


async def close_waiter(waiter: _ClosingWaiter, until: float) -> None:
    """Close the manager's release waiter (an adapter: this face's ``aclose()`` takes no bound,
    a backend's own waiter included; the sync face's ``close(until)`` does)."""
    await waiter.aclose()


class _ClosingWaiter(Protocol):
    async def aclose(self) -> None: ...


def waiter_after_fork(waiter: object) -> None:
    """In a forked child: nothing of the release waiter's is touched here (its tasks and
    connections are the parent's loop's); the sync face's forgets its threads."""
