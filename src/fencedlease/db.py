"""Fencing in SQL databases: guards that run inside the caller's own transaction.

::

    from fencedlease import db

    db.create_guard_table(conn)                                  # once, like a migration
    with conn:                                                   # the caller's transaction
        db.fence_guard(conn, "orders", lease)                    # raises StaleTokenError: roll back
        ...                                                      # reads and writes, now fenced
    db.fenced_update(conn, "orders", {"status": "shipped"}, {"id": 42}, lease)   # -> rows updated
    rows = db.fenced_read(conn, "orders", {"id": 42}, lease)     # -> [{"id": 42, ...}], fence moved

Three ways to fence, one rule (:func:`fencedlease._fencing.decide`; Kleppmann, "How to do
distributed locking", 2016):

- :func:`fence_guard` keeps one row per resource in a guard table (``resource``, ``fencing_token``,
  ``owner_fingerprint``) and moves it forward with one ``INSERT ... ON CONFLICT DO UPDATE ...
  WHERE``. The upsert locks the guard row until the caller's transaction ends, so everything the
  transaction does after the guard is fenced, reads included. It also catches a duplicate grant (the
  same token from two different leases).
- :func:`fenced_update` fences a row by a token column of its own:
  ``UPDATE t SET ..., token_column = :t WHERE ... AND (token_column IS NULL OR token_column <= :t)``
  (strict: ``<``). It knows no fingerprints, so an equal token is accepted from any lease; use the
  guard, or ``strict=True``, where duplicate grants matter.
- :func:`fenced_read` is the same update with ``RETURNING``: it moves the row's token and reads the
  row in one statement, so a stale holder can no longer write under what the new holder read (the
  lost update of ``docs/fencing.md``).

Connections: DB-API connections (sqlite3, psycopg 3, any driver whose module declares a
``paramstyle``) and SQLAlchemy ``Connection`` / ``Session``. Table and column names are checked
against ``[A-Za-z_][A-Za-z0-9_]{0,62}`` (a table may be ``schema.table``) and then double-quoted, so
they are used exactly as given: in PostgreSQL give them in lower case, as unquoted names fold to it.
Values are always bound parameters. Needs ``RETURNING`` and ``ON CONFLICT`` (SQLite 3.35+,
PostgreSQL 9.5+).

Errors: :class:`StaleTokenError` (refused: roll the transaction back), :class:`RowNotFoundError`
(no row matches ``where``), :class:`ValidationError` (a bad argument: nothing was executed), and
:class:`BackendError` for anything the driver raises (its exception in ``__cause__``; after it a
PostgreSQL transaction must be rolled back). Nothing here commits or rolls back: the transaction is
the caller's.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping, Sequence
from typing import Any, Final, NoReturn

import attrs

from ._errors import BackendError, FencedLeaseError, ValidationError
from ._fencing import (
    FenceState,
    RefusalReason,
    TokenOrLease,
    coerce_access,
    decide,
    stale_token_error,
)

__all__ = [
    "DEFAULT_GUARD_TABLE",
    "DEFAULT_TOKEN_COLUMN",
    "RowNotFoundError",
    "create_guard_table",
    "fence_guard",
    "fenced_read",
    "fenced_update",
]

DEFAULT_GUARD_TABLE: Final = "fencedlease_guard"
DEFAULT_TOKEN_COLUMN: Final = "fencing_token"  # noqa: S105 (a column name, not a secret)

# Every name put into SQL text passes _quote_table or _quote_column first (hence the S608 noqas);
# every value is bound.
_NAME: Final = r"[A-Za-z_][A-Za-z0-9_]{0,62}"
_COLUMN_RE: Final = re.compile(rf"\A{_NAME}\Z")
_TABLE_RE: Final = re.compile(rf"\A{_NAME}(?:\.{_NAME})?\Z")


class RowNotFoundError(FencedLeaseError, LookupError):
    """No row of ``table`` matches ``where``: nothing to fence, nothing was changed.

    Distinct from :class:`StaleTokenError` (a row is there, with a larger token).
    """

    def __init__(self, table: str, where: Mapping[str, Any], message: str | None = None) -> None:
        self.table = table
        self.where = dict(where)
        super().__init__(message or f"no row of {table!r} matches {sorted(self.where)}")

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.table, self.where, str(self)))


# --- names ------------------------------------------------------------------------------------


def _quote_table(name: object, argument: str) -> str:
    if not isinstance(name, str) or not _TABLE_RE.match(name):
        raise ValidationError(
            argument,
            f"{argument} must match {_NAME} (optionally schema.table), got {name!r}",
        )
    return ".".join(f'"{part}"' for part in name.split("."))


def _quote_column(name: object, argument: str) -> str:
    if not isinstance(name, str) or not _COLUMN_RE.match(name):
        raise ValidationError(argument, f"{argument} column names must match {_NAME}, got {name!r}")
    return f'"{name}"'


def _columns(mapping: object, argument: str, *, allow_empty: bool = False) -> Mapping[str, Any]:
    if not isinstance(mapping, Mapping):
        raise ValidationError(argument, f"{argument} must be a mapping of column name to value")
    if not mapping and not allow_empty:
        raise ValidationError(argument, f"{argument} must name at least one column")
    for column in mapping:
        _quote_column(column, argument)
    return mapping


# --- statements -------------------------------------------------------------------------------


@attrs.define
class _Statement:
    """SQL text with placeholders in the connection's style, and the values bound to them."""

    style: str
    parts: list[str] = attrs.field(factory=list)
    positional: list[Any] = attrs.field(factory=list)
    named: dict[str, Any] = attrs.field(factory=dict)

    def sql(self, text: str) -> _Statement:
        self.parts.append(text)
        return self

    def bind(self, value: Any) -> _Statement:
        index = len(self.positional) + len(self.named)
        if self.style == "qmark":
            self.positional.append(value)
            self.parts.append("?")
        elif self.style == "format":
            self.positional.append(value)
            self.parts.append("%s")
        elif self.style == "numeric":
            self.positional.append(value)
            self.parts.append(f":{index + 1}")
        elif self.style == "pyformat":
            self.named[f"p{index}"] = value
            self.parts.append(f"%(p{index})s")
        else:  # "named", and SQLAlchemy's text()
            self.named[f"p{index}"] = value
            self.parts.append(f":p{index}")
        return self

    def text(self) -> str:
        return "".join(self.parts)

    def params(self) -> Sequence[Any] | Mapping[str, Any]:
        return self.named if self.style in ("pyformat", "named", "sqlalchemy") else self.positional


def _where(stmt: _Statement, where: Mapping[str, Any]) -> None:
    for i, (column, value) in enumerate(where.items()):
        if i:
            stmt.sql(" AND ")
        if value is None:
            stmt.sql(f"{_quote_column(column, 'where')} IS NULL")
        else:
            stmt.sql(f"{_quote_column(column, 'where')} = ").bind(value)


def _token_condition(stmt: _Statement, token_column: str, token: int, strict: bool) -> None:
    stmt.sql(f"({token_column} IS NULL OR {token_column} {'<' if strict else '<='} ").bind(token)
    stmt.sql(")")


# --- running ----------------------------------------------------------------------------------


@attrs.frozen
class _Result:
    rowcount: int
    columns: tuple[str, ...]
    rows: list[tuple[Any, ...]]


def _is_sqlalchemy(conn: Any) -> bool:
    return type(conn).__module__.startswith("sqlalchemy.")


def _style(conn: Any) -> str:
    """The placeholder style for ``conn``: ``"sqlalchemy"`` or its DB-API module's paramstyle."""
    if _is_sqlalchemy(conn):
        return "sqlalchemy"
    module = sys.modules.get(type(conn).__module__.partition(".")[0])
    style = getattr(module, "paramstyle", None)
    if style not in ("qmark", "numeric", "named", "format", "pyformat"):
        raise ValidationError(
            "conn",
            "conn must be a DB-API connection whose module declares a paramstyle, or a SQLAlchemy "
            f"Connection or Session; got {type(conn).__module__}.{type(conn).__qualname__}",
        )
    return str(style)


def _driver_error(conn: Any) -> type[BaseException]:
    if _is_sqlalchemy(conn):
        import sqlalchemy.exc  # SQLAlchemy is optional

        return sqlalchemy.exc.SQLAlchemyError
    module = sys.modules.get(type(conn).__module__.partition(".")[0])
    error = getattr(module, "Error", None)
    if isinstance(error, type) and issubclass(error, BaseException):
        return error
    return Exception


def _execute(conn: Any, stmt: _Statement, what: str) -> _Result:
    error = _driver_error(conn)
    try:
        if stmt.style == "sqlalchemy":
            import sqlalchemy  # SQLAlchemy is optional

            result = conn.execute(sqlalchemy.text(stmt.text()), stmt.params())
            if result.returns_rows:
                columns = tuple(str(key) for key in result.keys())  # noqa: SIM118 (a Result iterates rows)
                rows = [tuple(row) for row in result.all()]
            else:
                columns, rows = (), []
            return _Result(int(result.rowcount), columns, rows)
        cursor = conn.cursor()
        try:
            cursor.execute(stmt.text(), stmt.params())
            if cursor.description:
                columns = tuple(str(d[0]) for d in cursor.description)
                rows = [tuple(row) for row in cursor.fetchall()]
            else:
                columns, rows = (), []
            return _Result(int(cursor.rowcount), columns, rows)
        finally:
            cursor.close()
    except error as exc:
        raise BackendError(f"{what} failed: {exc}") from exc


# --- the guard table --------------------------------------------------------------------------


def create_guard_table(conn: Any, *, table: str = DEFAULT_GUARD_TABLE) -> None:
    """Create the guard table used by :func:`fence_guard` if it does not exist (no commit).

    Columns: ``resource TEXT PRIMARY KEY``, ``fencing_token BIGINT NOT NULL``,
    ``owner_fingerprint TEXT`` (NULL: the token came as a bare ``int``). Raises
    :class:`ValidationError` for a bad ``table`` (nothing executed), :class:`BackendError`.
    """
    quoted = _quote_table(table, "table")
    stmt = _Statement(_style(conn)).sql(
        f"CREATE TABLE IF NOT EXISTS {quoted} ("
        "resource TEXT PRIMARY KEY, "
        "fencing_token BIGINT NOT NULL, "
        "owner_fingerprint TEXT)"
    )
    _execute(conn, stmt, f"creating guard table {table!r}")


def fence_guard(
    conn: Any,
    resource: str,
    token_or_lease: TokenOrLease,
    *,
    strict: bool = False,
    table: str = DEFAULT_GUARD_TABLE,
) -> int:
    """Fence the caller's transaction on ``resource``: move its guard row forward or raise.

    One ``INSERT ... ON CONFLICT (resource) DO UPDATE ... WHERE <the rule> RETURNING``: accepted
    only if the token is at least the largest accepted for ``resource`` (``strict``: greater) and
    not the same number from a different lease (compared by
    :func:`fencedlease._fencing.owner_fingerprint`). The row stays locked until the transaction
    ends, so the rest of the transaction, reads included, is fenced. Returns the accepted token.

    Raises :class:`StaleTokenError` (``.resource``, ``.token``, ``.last_token``; roll back),
    :class:`ValidationError` (bad argument; nothing executed), :class:`BackendError` (the driver's
    error in ``__cause__``, for instance a missing guard table: see :func:`create_guard_table`).
    """
    access = coerce_access(token_or_lease)
    if not isinstance(resource, str) or not resource:
        raise ValidationError("resource", "resource must be a non-empty str")
    quoted = _quote_table(table, "table")
    style = _style(conn)

    stmt = _Statement(style).sql(
        f"INSERT INTO {quoted} AS g (resource, fencing_token, owner_fingerprint) VALUES ("  # noqa: S608
    )
    stmt.bind(resource).sql(", ").bind(access.token).sql(", ").bind(access.fingerprint)
    stmt.sql(
        ") ON CONFLICT (resource) DO UPDATE SET "
        "fencing_token = excluded.fencing_token, "
        "owner_fingerprint = CASE WHEN excluded.fencing_token > g.fencing_token "
        "THEN excluded.owner_fingerprint "
        "ELSE COALESCE(g.owner_fingerprint, excluded.owner_fingerprint) END "
        "WHERE excluded.fencing_token > g.fencing_token"
    )
    if not strict:
        stmt.sql(
            " OR (excluded.fencing_token = g.fencing_token AND (g.owner_fingerprint IS NULL"
            " OR excluded.owner_fingerprint IS NULL"
            " OR g.owner_fingerprint = excluded.owner_fingerprint))"
        )
    stmt.sql(" RETURNING fencing_token")
    result = _execute(conn, stmt, f"fence_guard on {resource!r}")
    if result.rows:
        return access.token

    # Refused: read what is there, to say why. In PostgreSQL the refused upsert still locked the
    # row.
    query = _Statement(style).sql(
        f"SELECT fencing_token, owner_fingerprint FROM {quoted} WHERE resource = "  # noqa: S608
    )
    query.bind(resource)
    found = _execute(conn, query, f"fence_guard on {resource!r}").rows
    state = FenceState(int(found[0][0]), found[0][1]) if found else None
    outcome = decide(state, access, strict=strict)
    reason: RefusalReason = "older" if isinstance(outcome, FenceState) else outcome
    raise stale_token_error(resource, access.token, None if state is None else state.token, reason)


# --- fenced rows ------------------------------------------------------------------------------


def fenced_update(
    conn: Any,
    table: str,
    values: Mapping[str, Any],
    where: Mapping[str, Any],
    token_or_lease: TokenOrLease,
    *,
    token_column: str = DEFAULT_TOKEN_COLUMN,
    strict: bool = False,
) -> int:
    """``UPDATE table SET values..., token_column = t WHERE where... AND (token_column IS NULL OR
    token_column <= t)`` (``strict``: ``<``); return the number of rows updated (at least 1).

    ``values`` and ``where`` map column names to values; a ``None`` in ``where`` means ``IS NULL``.
    ``values`` must not name ``token_column`` (it is set to the token). A row whose token column is
    NULL is accepted and then holds the token.

    Raises :class:`StaleTokenError` (``.resource`` is ``table``; ``.last_token`` the largest token
    of the matching rows) when rows match ``where`` but all carry a larger token,
    :class:`RowNotFoundError` when no row matches ``where``, :class:`ValidationError` (nothing
    executed), :class:`BackendError`.
    """
    access = coerce_access(token_or_lease)
    quoted = _quote_table(table, "table")
    token_col = _quote_column(token_column, "token_column")
    values = _columns(values, "values")
    where = _columns(where, "where")
    if token_column in values:
        raise ValidationError(
            "values", f"values must not set the token column {token_column!r}: it gets the token"
        )
    style = _style(conn)

    stmt = _Statement(style).sql(f"UPDATE {quoted} SET ")  # noqa: S608
    for column, value in values.items():
        stmt.sql(f"{_quote_column(column, 'values')} = ").bind(value).sql(", ")
    stmt.sql(f"{token_col} = ").bind(access.token).sql(" WHERE ")
    _where(stmt, where)
    stmt.sql(" AND ")
    _token_condition(stmt, token_col, access.token, strict)
    result = _execute(conn, stmt, f"fenced_update of {table!r}")
    if result.rowcount > 0:
        return result.rowcount
    _explain_refusal(conn, style, table, quoted, token_col, where, access.token, strict)


def fenced_read(
    conn: Any,
    table: str,
    where: Mapping[str, Any],
    token_or_lease: TokenOrLease,
    *,
    columns: Sequence[str] | None = None,
    token_column: str = DEFAULT_TOKEN_COLUMN,
    strict: bool = False,
) -> list[dict[str, Any]]:
    """A fenced read: move the matching rows' token to ``t`` and return them, in one statement.

    ``UPDATE table SET token_column = t WHERE where... AND (token_column IS NULL OR token_column <=
    t) RETURNING columns`` (all columns when ``columns`` is ``None``). Returns one ``dict`` per row,
    keyed by column name, as the rows are after the update (the token column holds ``t``). Once a
    holder has read this way, a stale holder's :func:`fenced_update` of those rows is refused, so it
    cannot land between this read and the holder's write. With ``strict=True`` the holder's own
    later write with the same token is refused too: use strict fencing for one access per token
    only.

    Raises :class:`StaleTokenError`, :class:`RowNotFoundError`, :class:`ValidationError` (nothing
    executed) and :class:`BackendError`, as :func:`fenced_update` does.
    """
    access = coerce_access(token_or_lease)
    quoted = _quote_table(table, "table")
    token_col = _quote_column(token_column, "token_column")
    where = _columns(where, "where")
    if columns is None:
        returning = "*"
    else:
        if isinstance(columns, str) or not isinstance(columns, Sequence) or not columns:
            raise ValidationError("columns", "columns must be a non-empty sequence of column names")
        returning = ", ".join(_quote_column(column, "columns") for column in columns)
    style = _style(conn)

    stmt = _Statement(style).sql(f"UPDATE {quoted} SET {token_col} = ").bind(access.token)  # noqa: S608
    stmt.sql(" WHERE ")
    _where(stmt, where)
    stmt.sql(" AND ")
    _token_condition(stmt, token_col, access.token, strict)
    stmt.sql(f" RETURNING {returning}")
    result = _execute(conn, stmt, f"fenced_read of {table!r}")
    if result.rows:
        return [dict(zip(result.columns, row, strict=True)) for row in result.rows]
    _explain_refusal(conn, style, table, quoted, token_col, where, access.token, strict)


def _explain_refusal(
    conn: Any,
    style: str,
    table: str,
    quoted: str,
    token_col: str,
    where: Mapping[str, Any],
    token: int,
    strict: bool,
) -> NoReturn:
    """Nothing was updated: raise :class:`RowNotFoundError` or :class:`StaleTokenError`."""
    query = _Statement(style).sql(f"SELECT COUNT(*), MAX({token_col}) FROM {quoted} WHERE ")  # noqa: S608
    _where(query, where)
    count, last = _execute(conn, query, f"fencing {table!r}").rows[0]
    if not count:
        raise RowNotFoundError(table, where)
    last_token = None if last is None else int(last)
    reason: RefusalReason = "strict" if strict and last_token == token else "older"
    raise stale_token_error(table, token, last_token, reason)
