"""Fencing in SQL databases: guards that run inside the caller's own transaction.

::

    from fencedlease import db

    db.create_guard_table(conn)                                  # once, like a migration
    with conn:                                                   # the caller's transaction
        db.fence_guard(conn, "order:42", lease)                  # raises StaleTokenError: roll back
        ...                                                      # reads and writes, now fenced
    db.fenced_update(conn, "orders", {"status": "shipped"}, {"id": 42}, lease)   # -> rows updated
    rows = db.fenced_read(conn, "orders", {"id": 42}, lease)     # -> [{"id": 42, ...}], fence moved

Three ways to fence, one rule (:func:`fencedlease._fencing.decide`; Kleppmann, "How to do
distributed locking", 2016):

- :func:`fence_guard` keeps one row per resource in a guard table (``resource``, ``fencing_token``,
  ``owner_fingerprint``, ``lease_key``) and moves it forward with one ``INSERT ... ON CONFLICT DO
  UPDATE ... WHERE``. The upsert locks the guard row until the caller's transaction ends, so
  everything the transaction does after the guard is fenced, reads included. It also catches a
  duplicate grant (the same token from two different leases), and records the key of the first
  lease it accepts: a lease on another key is refused (:class:`LeaseKeyMismatchError`), since
  tokens of two keys cannot be compared.
- :func:`fenced_update` fences a row by a token column of its own:
  ``UPDATE t SET ..., token_column = :t WHERE ... AND (token_column IS NULL OR
  CAST(token_column AS BIGINT) <= :t)`` (strict: ``<``). It knows no fingerprints, so an equal
  token is accepted from any lease; use the guard, or ``strict=True``, where duplicate grants
  matter. A row's token column holds tokens of one lease key: give ``lease_key_column`` to have the
  row record that key and refuse leases on others.
- :func:`fenced_read` is the same update with ``RETURNING``: it moves the row's token and reads the
  row in one statement, so a stale holder can no longer write under what the new holder read (the
  lost update of ``docs/fencing.md``).

Tokens are exact integers, 1..2**63 - 1, bound as integers and compared as ``BIGINT``: every
comparison casts the stored token (``CAST(col AS BIGINT)``), so a token column declared ``TEXT``
(or with no type, in SQLite) still compares numerically (10 after 9), never as text. A column
that cannot hold 64-bit integers exactly (``REAL``, ``double precision``, PostgreSQL ``integer``)
is not fit to hold tokens.

Connections: sync DB-API connections (sqlite3, psycopg 3, any driver whose module declares a
``paramstyle``) and sync SQLAlchemy ``Connection`` / ``Session``. An asyncio connection
(``psycopg.AsyncConnection``, SQLAlchemy's ``AsyncConnection`` / ``AsyncSession``: use their
``run_sync``) or anything else is refused with :class:`ValidationError` naming ``conn``. Table and
column names are checked against ``[A-Za-z_][A-Za-z0-9_]{0,62}`` (a table may be
``schema.table``) and then double-quoted, so they are used exactly as given: in PostgreSQL give
them in lower case, as unquoted names fold to it. Values are always bound parameters. Needs
``RETURNING`` and ``ON CONFLICT`` (SQLite 3.35+, PostgreSQL 9.5+).

Errors: :class:`StaleTokenError` (refused: roll the transaction back; its subclass
:class:`LeaseKeyMismatchError` for a lease on another key), :class:`RowNotFoundError` (no row
matches ``where``), :class:`ValidationError` (a bad argument: nothing was executed; or a guard
table of the wrong shape), and :class:`BackendError` for anything the driver raises (its exception
in ``__cause__``; after it a PostgreSQL transaction must be rolled back). Nothing here commits or
rolls back: the transaction is the caller's.
"""

from __future__ import annotations

import inspect
import re
import sys
from collections.abc import Mapping, Sequence
from typing import Any, Final, NoReturn

import attrs

from ._errors import BackendError, FencedLeaseError, RowNotFoundError, ValidationError
from ._fencing import (
    FenceState,
    FencingAccess,
    RefusalReason,
    TokenOrLease,
    check_strict,
    coerce_access,
    decide,
    stale_token_error,
)
from ._validate import check_key

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


def _token_condition(stmt: _Statement, token_col: str, token: int, strict: bool) -> None:
    """``(col IS NULL OR CAST(col AS BIGINT) <= t)``: numeric whatever the column's declared type
    (``CAST(... AS BIGINT)`` is standard SQL, and in SQLite gives INTEGER affinity)."""
    stmt.sql(f"({token_col} IS NULL OR CAST({token_col} AS BIGINT) {'<' if strict else '<='} ")
    stmt.bind(token).sql(")")


def _key_condition(stmt: _Statement, key_col: str, lease_key: str) -> None:
    stmt.sql(f"({key_col} IS NULL OR {key_col} = ").bind(lease_key).sql(")")


# --- connections and running ------------------------------------------------------------------


@attrs.frozen
class _Result:
    rowcount: int
    columns: tuple[str, ...]
    rows: list[tuple[Any, ...]]


def _is_sqlalchemy(conn: Any) -> bool:
    return type(conn).__module__.startswith("sqlalchemy.")


def _describe(conn: object) -> str:
    return f"{type(conn).__module__}.{type(conn).__qualname__}"


def _is_async(method: object) -> bool:
    return inspect.iscoroutinefunction(method) or inspect.isasyncgenfunction(method)


def _refuse_async(conn: object) -> NoReturn:
    raise ValidationError(
        "conn",
        f"conn is an asyncio connection ({_describe(conn)}); fencedlease.db runs on sync "
        "connections: pass a sync one (psycopg.Connection, sqlite3), or, with SQLAlchemy's "
        "AsyncConnection / AsyncSession, call it inside run_sync",
    )


def _style(conn: Any) -> str:
    """The placeholder style for ``conn``: ``"sqlalchemy"`` or its DB-API module's paramstyle.

    Refuses (:class:`ValidationError` naming ``conn``) an asyncio connection and anything that is
    not a sync DB-API connection or a SQLAlchemy ``Connection`` / ``Session``, before any I/O.
    """
    if _is_sqlalchemy(conn):
        execute = getattr(conn, "execute", None)
        if _is_async(execute):
            _refuse_async(conn)
        if not callable(execute):
            raise ValidationError(
                "conn",
                "conn must be a SQLAlchemy Connection or Session (engine.begin() or Session(...)), "
                f"not {_describe(conn)}",
            )
        return "sqlalchemy"
    module = sys.modules.get(type(conn).__module__.partition(".")[0])
    style = getattr(module, "paramstyle", None)
    if style not in ("qmark", "numeric", "named", "format", "pyformat"):
        raise ValidationError(
            "conn",
            "conn must be a DB-API connection whose module declares a paramstyle, or a SQLAlchemy "
            f"Connection or Session; got {_describe(conn)}",
        )
    if any(_is_async(getattr(conn, name, None)) for name in ("cursor", "execute", "commit")):
        _refuse_async(conn)
    if not callable(getattr(conn, "cursor", None)):
        raise ValidationError(
            "conn",
            f"conn must be a DB-API connection with a cursor() method; got {_describe(conn)}",
        )
    return str(style)


def _not_awaited(conn: object, value: object) -> None:
    """Refuse a driver call that answered with an awaitable (an asyncio connection that slipped
    past :func:`_style`); the coroutine is closed, never left un-awaited."""
    if inspect.isawaitable(value):
        close = getattr(value, "close", None)
        if callable(close):
            close()
        _refuse_async(conn)


def _execute(conn: Any, stmt: _Statement, what: str) -> _Result:
    """Run ``stmt`` on ``conn``. Whatever the driver raises, its own errors and those it raises
    binding a value it cannot store (``OverflowError`` for an int past 64 bits in sqlite3,
    ``UnicodeEncodeError`` for a lone surrogate), reaches the caller as :class:`BackendError`
    with the driver's exception in ``__cause__``."""
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
            return _Result(int(result.rowcount), columns, rows)
        cursor = conn.cursor()
        _not_awaited(conn, cursor)
        try:
            _not_awaited(conn, cursor.execute(stmt.text(), stmt.params()))
            if cursor.description:
                columns = tuple(str(d[0]) for d in cursor.description)
                rows = [tuple(row) for row in cursor.fetchall()]
            else:
                columns, rows = (), []
            return _Result(int(cursor.rowcount), columns, rows)
        finally:
            cursor.close()
    except FencedLeaseError:
        raise
    except Exception as exc:
        raise BackendError(f"{what} failed: {type(exc).__name__}: {exc}") from exc


def _dialect(conn: Any) -> str:
    """``"sqlite"``, ``"postgresql"`` or another lower-case dialect name, for inspecting tables."""
    if _is_sqlalchemy(conn):
        dialect = getattr(conn, "dialect", None)
        if dialect is None:  # a Session: the dialect of what it is bound to
            import sqlalchemy.exc  # SQLAlchemy is optional

            try:
                dialect = conn.get_bind().dialect
            except sqlalchemy.exc.SQLAlchemyError as exc:
                raise BackendError(f"finding the database of {_describe(conn)}: {exc}") from exc
        return str(dialect.name).lower()
    module = type(conn).__module__.partition(".")[0]
    if module == "sqlite3":
        return "sqlite"
    if module in ("psycopg", "psycopg2", "pg8000"):
        return "postgresql"
    return module


# --- the guard table --------------------------------------------------------------------------

# The guard table's columns: what create_guard_table creates, and what it accepts in an existing
# table (SQLite by declared type affinity, PostgreSQL by type).
_GUARD_COLUMNS: Final = (
    ("resource", "TEXT PRIMARY KEY", "text"),
    ("fencing_token", "BIGINT NOT NULL", "integer"),
    ("owner_fingerprint", "TEXT", "text"),
    ("lease_key", "TEXT", "text"),
)
_PG_TYPES: Final = {
    "text": ("text", "character varying"),
    "integer": ("bigint",),
}


def _sqlite_kind(declared: str) -> str:
    """SQLite's type affinity of a declared column type (the rules of its "Datatypes" page)."""
    upper = declared.upper()
    if "INT" in upper:
        return "integer"
    if any(word in upper for word in ("CHAR", "CLOB", "TEXT")):
        return "text"
    if not upper or "BLOB" in upper:
        return "blob"
    if any(word in upper for word in ("REAL", "FLOA", "DOUB")):
        return "real"
    return "numeric"


def _split_table(table: str) -> tuple[str | None, str]:
    schema, _, name = table.rpartition(".")
    return schema or None, name


def _guard_shape(conn: Any, style: str, table: str) -> tuple[dict[str, str], bool] | None:
    """The existing guard table's columns (name -> declared type, lower case) and whether
    ``resource`` alone is unique; ``None`` when the database cannot be inspected this way."""
    dialect = _dialect(conn)
    schema, name = _split_table(table)
    what = f"inspecting guard table {table!r}"
    if dialect == "sqlite":
        pragma = f'"{schema}".' if schema else ""
        rows = _execute(conn, _Statement(style).sql(f'PRAGMA {pragma}table_info("{name}")'), what)
        columns = {str(r[1]).lower(): str(r[2] or "") for r in rows.rows}
        unique = False
        indexes = _execute(
            conn, _Statement(style).sql(f'PRAGMA {pragma}index_list("{name}")'), what
        )
        for index in indexes.rows:
            if not index[2]:  # not unique
                continue
            info = _Statement(style).sql(f'PRAGMA {pragma}index_info("{index[1]}")')
            if [str(r[2]).lower() for r in _execute(conn, info, what).rows] == ["resource"]:
                unique = True
        return columns, unique
    if dialect == "postgresql":
        regclass = _quote_table(table, "table")
        query = _Statement(style).sql(
            "SELECT a.attname, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a "
            "WHERE a.attrelid = to_regclass("
        )
        query.bind(regclass).sql(") AND a.attnum > 0 AND NOT a.attisdropped")
        columns = {str(r[0]): str(r[1]) for r in _execute(conn, query, what).rows}
        query = _Statement(style).sql(
            "SELECT count(*) FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
            "AND a.attnum = i.indkey[0] WHERE i.indrelid = to_regclass("
        )
        query.bind(regclass).sql(
            ") AND i.indisunique AND i.indnatts = 1 AND i.indpred IS NULL "
            "AND a.attname = 'resource'"
        )
        unique = bool(_execute(conn, query, what).rows[0][0])
        return columns, unique
    return None


def _type_fits(dialect: str, declared: str, kind: str) -> bool:
    if dialect == "sqlite":
        return _sqlite_kind(declared) == kind
    return declared.lower().startswith(_PG_TYPES[kind])


def create_guard_table(conn: Any, *, table: str = DEFAULT_GUARD_TABLE) -> None:
    """Create the guard table used by :func:`fence_guard` if it does not exist, or check the one
    that does (no commit).

    Columns: ``resource TEXT PRIMARY KEY``, ``fencing_token BIGINT NOT NULL``,
    ``owner_fingerprint TEXT`` (NULL: the token came as a bare ``int``) and ``lease_key TEXT`` (the
    key of the leases fencing the resource; NULL until the first lease). An existing table is
    inspected (SQLite and PostgreSQL): a guard table of the earlier shape, without ``lease_key``,
    gets the column (``ALTER TABLE ... ADD COLUMN``); any other shape (a missing column, a token
    column that is not a 64-bit integer, text columns that are not text, ``resource`` not unique)
    raises :class:`ValidationError` naming ``table`` and what is wrong, and nothing is changed.

    Raises :class:`ValidationError` for a bad ``table`` or ``conn`` (nothing executed) or a table
    of another shape, :class:`BackendError` for a driver error.
    """
    quoted = _quote_table(table, "table")
    style = _style(conn)
    columns_sql = ", ".join(f"{column} {ddl}" for column, ddl, _ in _GUARD_COLUMNS)
    stmt = _Statement(style).sql(f"CREATE TABLE IF NOT EXISTS {quoted} ({columns_sql})")
    _execute(conn, stmt, f"creating guard table {table!r}")

    shape = _guard_shape(conn, style, table)
    if shape is None:  # a database this module cannot inspect: check the columns are there
        probe = _Statement(style).sql(
            f"SELECT {', '.join(c for c, _, _ in _GUARD_COLUMNS)} FROM {quoted} WHERE 1 = 0"  # noqa: S608
        )
        _execute(conn, probe, f"checking guard table {table!r}")
        return
    columns, unique = shape
    dialect = _dialect(conn)
    problems = []
    for column, _, kind in _GUARD_COLUMNS:
        declared = columns.get(column)
        if declared is None:
            if column != "lease_key":
                problems.append(f"it has no column {column}")
        elif not _type_fits(dialect, declared, kind):
            needed = "a 64-bit integer (BIGINT)" if kind == "integer" else "text"
            problems.append(f"column {column} is {declared or 'untyped'}, not {needed}")
    if not unique:
        problems.append("column resource is not its primary key (or alone under a unique index)")
    if problems:
        raise ValidationError(
            "table",
            f"table {table!r} exists and is not a guard table: {'; '.join(problems)}. Give "
            "create_guard_table and fence_guard another table=, or drop this one",
        )
    if "lease_key" not in columns:  # a guard table of the earlier shape
        # PostgreSQL: IF NOT EXISTS, so two processes upgrading at once both succeed.
        exists = " IF NOT EXISTS" if dialect == "postgresql" else ""
        alter = _Statement(style).sql(f"ALTER TABLE {quoted} ADD COLUMN{exists} lease_key TEXT")
        _execute(conn, alter, f"adding lease_key to guard table {table!r}")


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
    only if the token is at least the largest accepted for ``resource`` (``strict``: greater), not
    the same number from a different lease (compared by
    :func:`fencedlease._fencing.owner_fingerprint`), and, for a lease, if its key is the one the
    row records (the first lease accepted for ``resource`` records its key; a bare ``int`` token is
    not checked). Tokens compare as ``BIGINT``. The row stays locked until the transaction ends, so
    the rest of the transaction, reads included, is fenced. Returns the accepted token.

    Raises :class:`StaleTokenError` (``.resource``, ``.token``, ``.last_token``; roll back), its
    subclass :class:`LeaseKeyMismatchError` (``.lease_key`` on record, ``.presented_key``) for a
    lease on another key, :class:`ValidationError` (bad argument; nothing executed),
    :class:`BackendError` (the driver's error in ``__cause__``, for instance a missing guard table
    or one without ``lease_key``: see :func:`create_guard_table`).
    """
    access = coerce_access(token_or_lease)
    check_key(resource, "resource")
    strict = check_strict(strict)
    quoted = _quote_table(table, "table")
    style = _style(conn)

    new_token = "CAST(excluded.fencing_token AS BIGINT)"  # noqa: S105 (SQL, not a secret)
    old_token = "CAST(g.fencing_token AS BIGINT)"  # noqa: S105
    stmt = _Statement(style).sql(
        f"INSERT INTO {quoted} AS g (resource, fencing_token, owner_fingerprint, lease_key) "  # noqa: S608
        "VALUES ("
    )
    stmt.bind(resource).sql(", ").bind(access.token).sql(", ").bind(access.fingerprint)
    stmt.sql(", ").bind(access.lease_key)
    stmt.sql(
        ") ON CONFLICT (resource) DO UPDATE SET "
        "fencing_token = excluded.fencing_token, "
        f"owner_fingerprint = CASE WHEN {new_token} > {old_token} "
        "THEN excluded.owner_fingerprint "
        "ELSE COALESCE(g.owner_fingerprint, excluded.owner_fingerprint) END, "
        "lease_key = COALESCE(g.lease_key, excluded.lease_key) "
        "WHERE (g.lease_key IS NULL OR excluded.lease_key IS NULL "
        "OR g.lease_key = excluded.lease_key) "
        f"AND ({new_token} > {old_token}"
    )
    if not strict:
        stmt.sql(
            f" OR ({new_token} = {old_token} AND (g.owner_fingerprint IS NULL"
            " OR excluded.owner_fingerprint IS NULL"
            " OR g.owner_fingerprint = excluded.owner_fingerprint))"
        )
    stmt.sql(") RETURNING fencing_token")
    result = _execute(conn, stmt, f"fence_guard on {resource!r}")
    if result.rows:
        return access.token

    # Refused: read what is there, to say why. In PostgreSQL the refused upsert still locked the
    # row.
    query = _Statement(style).sql(
        "SELECT CAST(fencing_token AS BIGINT), owner_fingerprint, lease_key "  # noqa: S608
        f"FROM {quoted} WHERE resource = "
    )
    query.bind(resource)
    found = _execute(conn, query, f"fence_guard on {resource!r}").rows
    state = FenceState(int(found[0][0]), found[0][1], found[0][2]) if found else None
    outcome = decide(state, access, strict=strict)
    reason: RefusalReason = "older" if isinstance(outcome, FenceState) else outcome
    raise stale_token_error(
        resource,
        access.token,
        None if state is None else state.token,
        reason,
        lease_key=None if state is None else state.lease_key,
        presented_key=access.lease_key,
    )


# --- fenced rows ------------------------------------------------------------------------------


@attrs.frozen
class _RowFence:
    """What fenced_update and fenced_read share: the checked arguments."""

    access: FencingAccess
    table: str
    quoted: str
    token_col: str
    key_col: str | None  # quoted; None: the rows record no lease key (or a bare int came)
    where: Mapping[str, Any]
    strict: bool
    style: str

    def condition(self, stmt: _Statement) -> None:
        """`` WHERE where... AND <token> [AND <key>]``."""
        stmt.sql(" WHERE ")
        _where(stmt, self.where)
        stmt.sql(" AND ")
        _token_condition(stmt, self.token_col, self.access.token, self.strict)
        if self.key_col is not None and self.access.lease_key is not None:
            stmt.sql(" AND ")
            _key_condition(stmt, self.key_col, self.access.lease_key)

    def set_token(self, stmt: _Statement) -> None:
        """``token_col = t[, key_col = k]``."""
        stmt.sql(f"{self.token_col} = ").bind(self.access.token)
        if self.key_col is not None and self.access.lease_key is not None:
            stmt.sql(f", {self.key_col} = ").bind(self.access.lease_key)


def _row_fence(
    conn: Any,
    table: str,
    where: Mapping[str, Any],
    token_or_lease: TokenOrLease,
    token_column: str,
    lease_key_column: str | None,
    strict: bool,
) -> _RowFence:
    access = coerce_access(token_or_lease)
    quoted = _quote_table(table, "table")
    token_col = _quote_column(token_column, "token_column")
    key_col = None
    if lease_key_column is not None:
        key_col = _quote_column(lease_key_column, "lease_key_column")
        if lease_key_column == token_column:
            raise ValidationError(
                "lease_key_column", "lease_key_column must not be the token column"
            )
    where = _columns(where, "where")
    strict = check_strict(strict)
    style = _style(conn)
    return _RowFence(access, table, quoted, token_col, key_col, where, strict, style)


def fenced_update(
    conn: Any,
    table: str,
    values: Mapping[str, Any],
    where: Mapping[str, Any],
    token_or_lease: TokenOrLease,
    *,
    token_column: str = DEFAULT_TOKEN_COLUMN,
    lease_key_column: str | None = None,
    strict: bool = False,
) -> int:
    """``UPDATE table SET values..., token_column = t WHERE where... AND (token_column IS NULL OR
    CAST(token_column AS BIGINT) <= t)`` (``strict``: ``<``); return the number of rows updated
    (at least 1).

    ``values`` and ``where`` map column names to values; a ``None`` in ``where`` means ``IS NULL``.
    ``values`` must not name ``token_column`` (it is set to the token) or ``lease_key_column``. A
    row whose token column is NULL is accepted and then holds the token. Rows that match ``where``
    but are refused are left as they are.

    A row's tokens must all come from leases on one key: tokens of two keys cannot be compared.
    ``lease_key_column`` (a text column, NULL in a row not fenced yet) makes the row record it:
    a lease (not a bare ``int``) is accepted only where the column is NULL or holds its key, and
    the column is set to its key.

    Raises :class:`StaleTokenError` (``.resource`` is ``table``; ``.last_token`` the largest token
    of the matching rows) when rows match ``where`` but none may be updated,
    :class:`LeaseKeyMismatchError` (a :class:`StaleTokenError`) when a matching row records another
    lease key, :class:`RowNotFoundError` when no row matches ``where``, :class:`ValidationError`
    (nothing executed), :class:`BackendError`.
    """
    fence = _row_fence(conn, table, where, token_or_lease, token_column, lease_key_column, strict)
    values = _columns(values, "values")
    for reserved, argument in (
        (token_column, "token_column"),
        (lease_key_column, "lease_key_column"),
    ):
        if reserved is not None and reserved in values:
            raise ValidationError(
                "values", f"values must not set {reserved!r}, the {argument}: the fence sets it"
            )

    stmt = _Statement(fence.style).sql(f"UPDATE {fence.quoted} SET ")  # noqa: S608
    for column, value in values.items():
        stmt.sql(f"{_quote_column(column, 'values')} = ").bind(value).sql(", ")
    fence.set_token(stmt)
    fence.condition(stmt)
    result = _execute(conn, stmt, f"fenced_update of {table!r}")
    if result.rowcount > 0:
        return result.rowcount
    _explain_refusal(conn, fence)


def fenced_read(
    conn: Any,
    table: str,
    where: Mapping[str, Any],
    token_or_lease: TokenOrLease,
    *,
    columns: Sequence[str] | None = None,
    token_column: str = DEFAULT_TOKEN_COLUMN,
    lease_key_column: str | None = None,
    strict: bool = False,
) -> list[dict[str, Any]]:
    """A fenced read: move the matching rows' token to ``t`` and return them, in one statement.

    ``UPDATE table SET token_column = t WHERE where... AND (token_column IS NULL OR
    CAST(token_column AS BIGINT) <= t) RETURNING columns`` (all columns when ``columns`` is
    ``None``). Returns one ``dict`` per row, keyed by column name, as the rows are after the update
    (the token column holds ``t``, as the column's type stores it). Once a holder has read this way,
    a stale holder's :func:`fenced_update` of those rows is refused, so it cannot land between this
    read and the holder's write. With ``strict=True`` the holder's own later write with the same
    token is refused too: use strict fencing for one access per token only. ``lease_key_column`` as
    in :func:`fenced_update`.

    Raises :class:`StaleTokenError`, :class:`LeaseKeyMismatchError`, :class:`RowNotFoundError`,
    :class:`ValidationError` (nothing executed) and :class:`BackendError`, as :func:`fenced_update`
    does.
    """
    fence = _row_fence(conn, table, where, token_or_lease, token_column, lease_key_column, strict)
    if columns is None:
        returning = "*"
    else:
        if isinstance(columns, str) or not isinstance(columns, Sequence) or not columns:
            raise ValidationError("columns", "columns must be a non-empty sequence of column names")
        returning = ", ".join(_quote_column(column, "columns") for column in columns)

    stmt = _Statement(fence.style).sql(f"UPDATE {fence.quoted} SET ")  # noqa: S608
    fence.set_token(stmt)
    fence.condition(stmt)
    stmt.sql(f" RETURNING {returning}")
    result = _execute(conn, stmt, f"fenced_read of {table!r}")
    if result.rows:
        return [dict(zip(result.columns, row, strict=True)) for row in result.rows]
    _explain_refusal(conn, fence)


def _explain_refusal(conn: Any, fence: _RowFence) -> NoReturn:
    """Nothing was updated: raise :class:`RowNotFoundError`, :class:`LeaseKeyMismatchError` or
    :class:`StaleTokenError`."""
    token_col, key_col, access = fence.token_col, fence.key_col, fence.access
    query = _Statement(fence.style).sql(f"SELECT COUNT(*), MAX(CAST({token_col} AS BIGINT))")
    check_key_too = key_col is not None and access.lease_key is not None
    if check_key_too:
        query.sql(f", MIN(CASE WHEN {key_col} <> ").bind(access.lease_key)
        query.sql(f" THEN {key_col} END)")
    query.sql(f" FROM {fence.quoted} WHERE ")
    _where(query, fence.where)
    found = _execute(conn, query, f"fencing {fence.table!r}").rows[0]
    count, last = found[0], found[1]
    if not count:
        raise RowNotFoundError(fence.table, fence.where)
    last_token = None if last is None else int(last)
    other_key = found[2] if check_key_too else None
    reason: RefusalReason
    if other_key is not None:
        reason = "key"
    elif fence.strict and last_token == access.token:
        reason = "strict"
    else:
        reason = "older"
    raise stale_token_error(
        fence.table,
        access.token,
        last_token,
        reason,
        lease_key=None if other_key is None else str(other_key),
        presented_key=access.lease_key,
    )
