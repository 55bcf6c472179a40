"""Lease stores besides Redis, behind the same [`LeaseBackend`][fencedlease.LeaseBackend] contract.

- [`MemoryBackend`][fencedlease.MemoryBackend] /
[`AsyncMemoryBackend`][fencedlease.backends.AsyncMemoryBackend]: one process, an injected clock; for
tests.
- [`SqliteBackend`][fencedlease.SqliteBackend] /
  [`AsyncSqliteBackend`][fencedlease.backends.AsyncSqliteBackend]: one SQLite file shared by the
  processes of one host.

See ``docs/backends.md`` for which to pick and how to write another.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .memory import AsyncMemoryBackend, MemoryBackend
from .sqlite import SqliteBackend

if TYPE_CHECKING:  # loaded on first use: the sync face needs no asyncio
    from .sqlite_async import AsyncSqliteBackend

__all__ = ["AsyncMemoryBackend", "AsyncSqliteBackend", "MemoryBackend", "SqliteBackend"]


def __getattr__(name: str) -> Any:
    """``AsyncSqliteBackend``, imported on first use (it needs [`asyncio`][])."""
    if name == "AsyncSqliteBackend":
        from .sqlite_async import AsyncSqliteBackend

        return AsyncSqliteBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
