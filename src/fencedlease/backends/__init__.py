"""Lease stores besides Redis, behind the same :class:`~fencedlease.LeaseBackend` contract.

- :class:`MemoryBackend` / :class:`AsyncMemoryBackend`: one process, an injected clock; for tests.
- :class:`SqliteBackend` / :class:`AsyncSqliteBackend`: one SQLite file shared by the processes of
  one host.

See ``docs/backends.md`` for which to pick and how to write another.
"""

from __future__ import annotations

from .memory import AsyncMemoryBackend, MemoryBackend
from .sqlite import AsyncSqliteBackend, SqliteBackend

__all__ = ["AsyncMemoryBackend", "AsyncSqliteBackend", "MemoryBackend", "SqliteBackend"]
