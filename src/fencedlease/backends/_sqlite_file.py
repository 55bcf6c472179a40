"""The file under the SQLite backend: one connection shared by the threads of a process, its
transactions within the busy budget, the check of its path, and what a token read from a row may
be. The lease tables and their rules are [`fencedlease.backends.sqlite`][]'s (whose docstring says
what the backend promises of its file: WAL, ``synchronous=FULL``, one ``BEGIN IMMEDIATE`` per
operation, a busy database failing after ``busy_timeout_ms``), the semaphore's tables
`fencedlease.backends._slots`'.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

from fencedlease._core.errors import BackendError, ValidationError
from fencedlease._core.protocol import MAX_FENCING_TOKEN

__all__ = ["DEFAULT_BUSY_TIMEOUT_MS", "SqliteFile", "check_path", "stored_token"]

DEFAULT_BUSY_TIMEOUT_MS: Final = 5_000

_SQLITE_BUSY: Final = 5
_SQLITE_LOCKED: Final = 6


def stored_token(value: object, what: str, minimum: int = 1) -> int:
    """A fencing token (or counter) read from a row: an integer ``minimum``..2**63-1.

    Raises:
        BackendError: anything else (SQLite stores any type in any column); ``what`` names it.
    """
    if type(value) is not int or not minimum <= value <= MAX_FENCING_TOKEN:
        raise BackendError(f"{what} is not an integer in {minimum}..2**63-1")
    return value


def _is_busy(exc: sqlite3.Error) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)  # Python 3.11+
    if isinstance(code, int):
        return code & 0xFF in (_SQLITE_BUSY, _SQLITE_LOCKED)
    text = str(exc)
    return "database is locked" in text or "database table is locked" in text


def check_path(path: object) -> str:
    """``path`` as the str ``sqlite3.connect`` takes.

    Raises:
        ValidationError: not a non-empty str or ``os.PathLike`` of str, a NUL in it, or not
            encodable as UTF-8 (argument ``path``).
    """
    if isinstance(path, os.PathLike):
        path = os.fspath(path)
    if not isinstance(path, str) or not path:
        raise ValidationError(
            "path", f"path must be a non-empty str or os.PathLike of str; got {path!r}"
        )
    if "\x00" in path:  # sqlite3.connect would raise ValueError
        raise ValidationError("path", f"path must not contain a NUL character; got {path!r}")
    try:
        path.encode("utf-8")  # sqlite3.connect would raise UnicodeEncodeError
    except UnicodeEncodeError:
        raise ValidationError(
            "path", f"path must be encodable as UTF-8 (no lone surrogate); got {path!r}"
        ) from None
    return path


class SqliteFile:
    """One connection to the SQLite file at ``path`` (checked by `check_path`), used under a lock
    by every thread, in WAL mode with ``synchronous=FULL``; ``busy_timeout_ms`` bounds each
    transaction's wait for the write lock (this object's lock included).

    Raises:
        BackendError: the file cannot be opened or set up; the ``sqlite3.Error`` in ``__cause__``.
    """

    def __init__(self, path: str, busy_timeout_ms: int) -> None:
        self.path = path
        self.busy_timeout_ms = busy_timeout_ms
        self._lock = threading.Lock()
        self._busy_set = -1
        try:
            self._conn: sqlite3.Connection | None = sqlite3.connect(
                path,
                timeout=busy_timeout_ms / 1000,
                isolation_level=None,  # autocommit: every transaction is an explicit BEGIN
                check_same_thread=False,  # shared by threads, always under self._lock
            )
        except sqlite3.Error as exc:
            raise BackendError(f"open {path!r}: {type(exc).__name__}: {exc}") from exc
        try:
            with self.transaction("set up", write=False) as conn:
                # WAL: readers (inspect) never wait for the writer. FULL: every commit is synced,
                # so a fencing counter never goes back after a crash or power cut.
                conn.execute("PRAGMA journal_mode = WAL")
                conn.execute("PRAGMA synchronous = FULL")
        except BaseException:
            self.close()
            raise

    @property
    def closed(self) -> bool:
        """Whether `close` was called."""
        return self._conn is None

    @contextmanager
    def transaction(self, operation: str, *, write: bool = True) -> Iterator[sqlite3.Connection]:
        """Run the block on the connection, as one ``BEGIN IMMEDIATE`` transaction when ``write``
        (else in autocommit), within the busy budget.

        Raises:
            BackendError: the file is closed, stayed busy past ``busy_timeout_ms`` or failed
                (rolled back; ``operation`` names the step).
            ValidationError: a key not encodable as UTF-8 (argument ``key``).
        """
        started = time.monotonic()
        budget_s = self.busy_timeout_ms / 1000
        if not self._lock.acquire(timeout=budget_s):
            raise BackendError(
                f"{operation}: SQLite database {self.path!r} stayed busy for"
                f" busy_timeout_ms={self.busy_timeout_ms} (another thread of this process held"
                " the connection)"
            )
        try:
            conn = self._conn
            if conn is None:
                raise BackendError(f"{operation}: the SQLite backend is closed")
            try:
                # Whatever the wait for our own lock took comes out of SQLite's busy budget.
                remaining = max(0, self.busy_timeout_ms - round((time.monotonic() - started) * 1e3))
                if remaining != self._busy_set:
                    conn.execute(f"PRAGMA busy_timeout = {remaining:d}")
                    self._busy_set = remaining
                if write:
                    conn.execute("BEGIN IMMEDIATE")
                try:
                    yield conn
                except BaseException:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise
                if conn.in_transaction:
                    conn.execute("COMMIT")
            except sqlite3.Error as exc:
                if conn.in_transaction:
                    # The original error is the one to report; SQLite rolls back on close anyway.
                    with contextlib.suppress(sqlite3.Error):
                        conn.execute("ROLLBACK")
                if _is_busy(exc):
                    raise BackendError(
                        f"{operation}: SQLite database {self.path!r} stayed busy (locked by"
                        f" another connection) for busy_timeout_ms={self.busy_timeout_ms};"
                        f" {type(exc).__name__}: {exc}"
                    ) from exc
                raise BackendError(f"{operation}: {type(exc).__name__}: {exc}") from exc
            except UnicodeEncodeError as exc:
                raise ValidationError(
                    "key", f"{operation}: key must be encodable as UTF-8 ({exc})"
                ) from exc
        finally:
            self._lock.release()

    def close(self) -> None:
        """Close the connection (idempotent); later transactions raise BackendError.

        Raises:
            BackendError: SQLite failed to close it (the ``sqlite3.Error`` in ``__cause__``).
        """
        with self._lock:
            conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except sqlite3.Error as exc:
                raise BackendError(f"close {self.path!r}: {type(exc).__name__}: {exc}") from exc
