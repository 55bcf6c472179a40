"""Connections for [`fencedlease.db`][]: which kind ``conn`` is (DB-API paramstyle or SQLAlchemy,
never asyncio), which database it talks to, and running one statement on it."""

from __future__ import annotations

import inspect
import sys
from typing import Any, NoReturn

import attrs

from fencedlease._core.errors import BackendError, FencedLeaseError, ValidationError

from ._statements import Statement


@attrs.frozen
class Result:
    rowcount: int
    columns: tuple[str, ...]
    rows: list[tuple[Any, ...]]


def is_sqlalchemy(conn: Any) -> bool:
    return type(conn).__module__.startswith("sqlalchemy.")


def describe(conn: object) -> str:
    return f"{type(conn).__module__}.{type(conn).__qualname__}"


def _is_async(method: object) -> bool:
    return inspect.iscoroutinefunction(method) or inspect.isasyncgenfunction(method)


def _refuse_async(conn: object) -> NoReturn:
    raise ValidationError(
        "conn",
        f"conn is an asyncio connection ({describe(conn)}); fencedlease.db runs on sync "
        "connections: pass a sync one (psycopg.Connection, sqlite3), or, with SQLAlchemy's "
        "AsyncConnection / AsyncSession, call it inside run_sync",
    )


def style_of(conn: Any) -> str:
    """The placeholder style for ``conn``: ``"sqlalchemy"`` or its DB-API module's paramstyle.

    Refuses ([`ValidationError`][fencedlease.ValidationError] naming ``conn``) an asyncio connection
    and anything that is not a sync DB-API connection or a SQLAlchemy ``Connection`` / ``Session``,
    before any I/O.
    """
    if is_sqlalchemy(conn):
        execute = getattr(conn, "execute", None)
        if _is_async(execute):
            _refuse_async(conn)
        if not callable(execute):
            raise ValidationError(
                "conn",
                "conn must be a SQLAlchemy Connection or Session (engine.begin() or Session(...)), "
                f"not {describe(conn)}",
            )
        return "sqlalchemy"
    module = sys.modules.get(type(conn).__module__.partition(".")[0])
    style = getattr(module, "paramstyle", None)
    if style not in ("qmark", "numeric", "named", "format", "pyformat"):
        raise ValidationError(
            "conn",
            "conn must be a DB-API connection whose module declares a paramstyle, or a SQLAlchemy "
            f"Connection or Session; got {describe(conn)}",
        )
    if any(_is_async(getattr(conn, name, None)) for name in ("cursor", "execute", "commit")):
        _refuse_async(conn)
    if not callable(getattr(conn, "cursor", None)):
        raise ValidationError(
            "conn",
            f"conn must be a DB-API connection with a cursor() method; got {describe(conn)}",
        )
    return str(style)


def _not_awaited(conn: object, value: object) -> None:
    """Refuse a driver call that answered with an awaitable (an asyncio connection that slipped
    past `style_of`); the coroutine is closed, never left un-awaited."""
    if inspect.isawaitable(value):
        close = getattr(value, "close", None)
        if callable(close):
            close()
        _refuse_async(conn)


def execute(conn: Any, stmt: Statement, what: str) -> Result:
    """Run ``stmt`` on ``conn``. Whatever the driver raises, its own errors and those it raises
    binding a value it cannot store (``OverflowError`` for an int past 64 bits in sqlite3,
    ``UnicodeEncodeError`` for a lone surrogate), reaches the caller as
    [`BackendError`][fencedlease.BackendError] with the driver's exception in ``__cause__``."""
    try:
        if stmt.style == "sqlalchemy":
            import sqlalchemy  # SQLAlchemy is optional

            result = conn.execute(sqlalchemy.text(stmt.text()), stmt.params())
            _not_awaited(conn, result)
            if result.returns_rows:
                columns = tuple(str(key) for key in result.keys())  # noqa: SIM118 (a Result iterates rows)
                rows = [tuple(row) for row in result.all()]
            else:
                columns, rows = (), []
            return Result(int(result.rowcount), columns, rows)
        cursor = conn.cursor()
        _not_awaited(conn, cursor)
        try:
            _not_awaited(conn, cursor.execute(stmt.text(), stmt.params()))
            if cursor.description:
                columns = tuple(str(d[0]) for d in cursor.description)
                rows = [tuple(row) for row in cursor.fetchall()]
            else:
                columns, rows = (), []
            return Result(int(cursor.rowcount), columns, rows)
        finally:
            cursor.close()
    except FencedLeaseError:
        raise
    except Exception as exc:
        raise BackendError(f"{what} failed: {type(exc).__name__}: {exc}") from exc


def dialect_of(conn: Any) -> str:
    """``"sqlite"``, ``"postgresql"`` or another lower-case dialect name, for inspecting tables."""
    if is_sqlalchemy(conn):
        dialect = getattr(conn, "dialect", None)
        if dialect is None:  # a Session: the dialect of what it is bound to
            import sqlalchemy.exc  # SQLAlchemy is optional

            try:
                dialect = conn.get_bind().dialect
            except sqlalchemy.exc.SQLAlchemyError as exc:
                raise BackendError(f"finding the database of {describe(conn)}: {exc}") from exc
        return str(dialect.name).lower()
    module = type(conn).__module__.partition(".")[0]
    if module == "sqlite3":
        return "sqlite"
    if module in ("psycopg", "psycopg2", "pg8000"):
        return "postgresql"
    return module
