"""The asyncio twin of [`SqliteBackend`][fencedlease.SqliteBackend]:
[`AsyncSqliteBackend`][fencedlease.backends.AsyncSqliteBackend], each operation on a worker thread.
The layout, the transactions and the clock are the sync backend's
([`fencedlease.backends.sqlite`][]).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Sequence
from typing import TypeVar

from fencedlease._core.backend import RenewItem
from fencedlease._core.clock import SYSTEM_CLOCK, Clock
from fencedlease._core.errors import BackendError, ValidationError
from fencedlease._core.protocol import AcquireReply, GrantExtras, InspectReply
from fencedlease._core.validate import check_clock, check_ms, check_prefix

from .._redis.keys import fence_key
from ._sqlite_file import DEFAULT_BUSY_TIMEOUT_MS, check_path
from .sqlite import SqliteBackend

__all__ = ["AsyncSqliteBackend"]

T = TypeVar("T")


class AsyncSqliteBackend:
    """The asyncio twin of [`SqliteBackend`][fencedlease.SqliteBackend]: each operation runs on a
    worker thread (`asyncio.to_thread`), so a busy database never blocks the event loop.

    Arguments as [`SqliteBackend`][fencedlease.SqliteBackend] (validated here, at once); the file is
    opened on a worker thread at the first operation, so making the backend does no I/O. Or pass
    ``sync`` to wrap an existing [`SqliteBackend`][fencedlease.SqliteBackend].

    If the awaiting task is cancelled while an operation runs, the cancellation waits for that
    operation to finish (at most ``busy_timeout_ms`` plus one transaction) before it propagates:
    a thread cannot be stopped, and whatever the caller does next (a release after a cancelled
    acquire) must come after it, not race it.

    Raises:
        ValidationError: as [`SqliteBackend`][fencedlease.SqliteBackend].
        BackendError: as [`SqliteBackend`][fencedlease.SqliteBackend]; opening the file fails
            at the first operation.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        prefix: str = "fencedlease",
        clock: Clock = SYSTEM_CLOCK,
        busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS,
        sync: SqliteBackend | None = None,
    ) -> None:
        self.sync = sync
        self._closed = False
        self._opening: asyncio.Lock | None = None
        if sync is None:
            if path is None:
                raise ValidationError("path", "path is required unless sync is given")
            self._path = check_path(path)
            self._prefix = check_prefix(prefix)
            self._busy_timeout_ms = check_ms("busy_timeout_ms", busy_timeout_ms, 0)
            check_clock(clock)
            self._clock = clock

    def __repr__(self) -> str:
        if self.sync is None:
            return f"<AsyncSqliteBackend path={self._path!r} prefix={self._prefix!r} (not open)>"
        return f"<AsyncSqliteBackend of {self.sync!r}>"

    def fencing_scope(self, key: str) -> str:
        """As [`SqliteBackend.fencing_scope`][fencedlease.SqliteBackend.fencing_scope]:
        ``<prefix>:{<escaped key>}:fence``. No I/O."""
        return fence_key(self._scope_prefix, key)

    @property
    def _scope_prefix(self) -> str:
        return self._prefix if self.sync is None else self.sync.prefix

    @staticmethod
    async def _run(fn: Callable[..., T], *args: object) -> T:
        task = asyncio.ensure_future(asyncio.to_thread(fn, *args))
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            if not task.done():
                await asyncio.wait((task,))
            if not task.cancelled():
                task.exception()  # retrieved: the caller was cancelled and will not see it
            raise

    async def _backend(self, operation: str) -> SqliteBackend:
        if self._closed:
            raise BackendError(f"{operation}: the SQLite backend is closed")
        if self.sync is not None:
            return self.sync
        if self._opening is None:
            self._opening = asyncio.Lock()
        async with self._opening:
            if self.sync is None:
                self.sync = await self._run(
                    lambda: SqliteBackend(
                        self._path,
                        prefix=self._prefix,
                        clock=self._clock,
                        busy_timeout_ms=self._busy_timeout_ms,
                    )
                )
            return self.sync

    async def acquire(self, key: str, owner_token: str, ttl_ms: int) -> AcquireReply:
        """As [`SqliteBackend.acquire`][fencedlease.SqliteBackend.acquire], on a worker thread."""
        backend = await self._backend("acquire")
        return await self._run(backend.acquire, key, owner_token, ttl_ms)

    async def acquire_with_extras(
        self, key: str, owner_token: str, ttl_ms: int, extras: GrantExtras | None
    ) -> AcquireReply:
        """As [`SqliteBackend.acquire_with_extras`][fencedlease.SqliteBackend.acquire_with_extras],
        on a worker thread."""
        backend = await self._backend("acquire")
        return await self._run(backend.acquire_with_extras, key, owner_token, ttl_ms, extras)

    async def renew(self, key: str, owner_token: str, ttl_ms: int) -> int:
        """As [`SqliteBackend.renew`][fencedlease.SqliteBackend.renew], on a worker thread."""
        backend = await self._backend("renew")
        return await self._run(backend.renew, key, owner_token, ttl_ms)

    async def renew_many(self, items: Sequence[RenewItem]) -> list[int | BaseException]:
        """As [`SqliteBackend.renew_many`][fencedlease.SqliteBackend.renew_many], on a worker
        thread."""
        backend = await self._backend("renew_many")
        return await self._run(backend.renew_many, list(items))

    async def release(self, key: str, owner_token: str) -> bool:
        """As [`SqliteBackend.release`][fencedlease.SqliteBackend.release], on a worker thread."""
        backend = await self._backend("release")
        return await self._run(backend.release, key, owner_token)

    async def inspect(self, key: str) -> InspectReply | None:
        """As [`SqliteBackend.inspect`][fencedlease.SqliteBackend.inspect], on a worker thread."""
        backend = await self._backend("inspect")
        return await self._run(backend.inspect, key)

    async def force_release(self, key: str) -> bool:
        """As [`SqliteBackend.force_release`][fencedlease.SqliteBackend.force_release], on a worker
        thread."""
        backend = await self._backend("force_release")
        return await self._run(backend.force_release, key)

    async def close(self) -> None:
        """As [`SqliteBackend.close`][fencedlease.SqliteBackend.close] (idempotent; a backend never
        opened has nothing to close)."""
        self._closed = True
        if self.sync is not None:
            await self._run(self.sync.close)
