"""The SQL half of :mod:`fencedlease.db` that decides nothing about tokens: checking and quoting
names, building a statement in the connection's parameter style, running it on a caller's sync
connection (DB-API or SQLAlchemy; an asyncio one is refused) with its errors as
:class:`~fencedlease.BackendError`, and reading an existing guard table's shape.
"""

from __future__ import annotations

import inspect
import re
import sys
from collections.abc import Mapping, Sequence
from typing import Any, Final, NoReturn

import attrs

from ._errors import BackendError, FencedLeaseError, ValidationError

__all__ = [
    "PG_TYPES",
    "Result",
    "Statement",
    "add_where",
    "check_columns",
    "describe",
    "dialect_of",
    "execute",
    "guard_shape",
    "is_async",
    "is_sqlalchemy",
    "key_condition",
    "not_awaited",
    "param_style",
    "quote_column",
    "quote_table",
    "refuse_async",
    "split_table",
    "sqlite_kind",
    "token_condition",
    "type_fits",
]

# Every name put into SQL text passes quote_table or quote_column first (hence the S608 noqas);
# every value is bound.
_NAME: Final = r"[A-Za-z_][A-Za-z0-9_]{0,62}"
_COLUMN_RE: Final = re.compile(rf"\A{_NAME}\Z")
_TABLE_RE: Final = re.compile(rf"\A{_NAME}(?:\.{_NAME})?\Z")


# --- names ------------------------------------------------------------------------------------


def quote_table(name: object, argument: str) -> str:
    if not isinstance(name, str) or not _TABLE_RE.match(name):
        raise ValidationError(
            argument,
            f"{argument} must match {_NAME} (optionally schema.table), got {name!r}",
        )
    return ".".join(f'"{part}"' for part in name.split("."))


def quote_column(name: object, argument: str) -> str:
    if not isinstance(name, str) or not _COLUMN_RE.match(name):
        raise ValidationError(argument, f"{argument} column names must match {_NAME}, got {name!r}")
    return f'"{name}"'


def check_columns(
    mapping: object, argument: str, *, allow_empty: bool = False
) -> Mapping[str, Any]:
    if not isinstance(mapping, Mapping):
        raise ValidationError(argument, f"{argument} must be a mapping of column name to value")
    if not mapping and not allow_empty:
        raise ValidationError(argument, f"{argument} must name at least one column")
    for column in mapping:
        quote_column(column, argument)
    return mapping


# --- statements -------------------------------------------------------------------------------


@attrs.define
class Statement:
    """SQL text with placeholders in the connection's style, and the values bound to them."""

    style: str
    parts: list[str] = attrs.field(factory=list)
    positional: list[Any] = attrs.field(factory=list)
    named: dict[str, Any] = attrs.field(factory=dict)

    def sql(self, text: str) -> Statement:
        self.parts.append(text)
        return self

    def bind(self, value: Any) -> Statement:
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


def add_where(stmt: Statement, where: Mapping[str, Any]) -> None:
    for i, (column, value) in enumerate(where.items()):
        if i:
            stmt.sql(" AND ")
        if value is None:
            stmt.sql(f"{quote_column(column, 'where')} IS NULL")
        else:
            stmt.sql(f"{quote_column(column, 'where')} = ").bind(value)


def token_condition(stmt: Statement, token_col: str, token: int, strict: bool) -> None:
    """``(col IS NULL OR CAST(col AS BIGINT) <= t)``: numeric whatever the column's declared type
    (``CAST(... AS BIGINT)`` is standard SQL, and in SQLite gives INTEGER affinity)."""
    stmt.sql(f"({token_col} IS NULL OR CAST({token_col} AS BIGINT) {'<' if strict else '<='} ")
    stmt.bind(token).sql(")")


def key_condition(stmt: Statement, key_col: str, lease_key: str) -> None:
    stmt.sql(f"({key_col} IS NULL OR {key_col} = ").bind(lease_key).sql(")")


# --- connections and running ------------------------------------------------------------------


@attrs.frozen
class Result:
    rowcount: int
    columns: tuple[str, ...]
    rows: list[tuple[Any, ...]]


def is_sqlalchemy(conn: Any) -> bool:
    return type(conn).__module__.startswith("sqlalchemy.")


def describe(conn: object) -> str:
    return f"{type(conn).__module__}.{type(conn).__qualname__}"


def is_async(method: object) -> bool:
    return inspect.iscoroutinefunction(method) or inspect.isasyncgenfunction(method)


def refuse_async(conn: object) -> NoReturn:
    raise ValidationError(
        "conn",
        f"conn is an asyncio connection ({describe(conn)}); fencedlease.db runs on sync "
        "connections: pass a sync one (psycopg.Connection, sqlite3), or, with SQLAlchemy's "
        "AsyncConnection / AsyncSession, call it inside run_sync",
    )


def param_style(conn: Any) -> str:
    """The placeholder style for ``conn``: ``"sqlalchemy"`` or its DB-API module's paramstyle.

    Refuses (:class:`ValidationError` naming ``conn``) an asyncio connection and anything that is
    not a sync DB-API connection or a SQLAlchemy ``Connection`` / ``Session``, before any I/O.
    """
    if is_sqlalchemy(conn):
        execute = getattr(conn, "execute", None)
        if is_async(execute):
            refuse_async(conn)
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
    if any(is_async(getattr(conn, name, None)) for name in ("cursor", "execute", "commit")):
        refuse_async(conn)
    if not callable(getattr(conn, "cursor", None)):
        raise ValidationError(
            "conn",
            f"conn must be a DB-API connection with a cursor() method; got {describe(conn)}",
        )
    return str(style)


def not_awaited(conn: object, value: object) -> None:
    """Refuse a driver call that answered with an awaitable (an asyncio connection that slipped
    past :func:`param_style`); the coroutine is closed, never left un-awaited."""
    if inspect.isawaitable(value):
        close = getattr(value, "close", None)
        if callable(close):
            close()
        refuse_async(conn)


def execute(conn: Any, stmt: Statement, what: str) -> Result:
    """Run ``stmt`` on ``conn``. Whatever the driver raises, its own errors and those it raises
    binding a value it cannot store (``OverflowError`` for an int past 64 bits in sqlite3,
    ``UnicodeEncodeError`` for a lone surrogate), reaches the caller as :class:`BackendError`
    with the driver's exception in ``__cause__``."""
    try:
        if stmt.style == "sqlalchemy":
            import sqlalchemy  # SQLAlchemy is optional

            result = conn.execute(sqlalchemy.text(stmt.text()), stmt.params())
            not_awaited(conn, result)
            if result.returns_rows:
                columns = tuple(str(key) for key in result.keys())  # noqa: SIM118 (a Result iterates rows)
                rows = [tuple(row) for row in result.all()]
            else:
                columns, rows = (), []
            return Result(int(result.rowcount), columns, rows)
        cursor = conn.cursor()
        not_awaited(conn, cursor)
        try:
            not_awaited(conn, cursor.execute(stmt.text(), stmt.params()))
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


# --- reading a table's shape -----------------------------------------------------------------

PG_TYPES: Final = {
    "text": ("text", "character varying"),
    "integer": ("bigint",),
}


def sqlite_kind(declared: str) -> str:
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


def split_table(table: str) -> tuple[str | None, str]:
    schema, _, name = table.rpartition(".")
    return schema or None, name


def guard_shape(conn: Any, style: str, table: str) -> tuple[dict[str, str], bool] | None:
    """The existing guard table's columns (name -> declared type, lower case) and whether
    ``resource`` alone is unique; ``None`` when the database cannot be inspected this way."""
    dialect = dialect_of(conn)
    schema, name = split_table(table)
    what = f"inspecting guard table {table!r}"
    if dialect == "sqlite":
        pragma = f'"{schema}".' if schema else ""
        rows = execute(conn, Statement(style).sql(f'PRAGMA {pragma}table_info("{name}")'), what)
        columns = {str(r[1]).lower(): str(r[2] or "") for r in rows.rows}
        unique = False
        indexes = execute(conn, Statement(style).sql(f'PRAGMA {pragma}index_list("{name}")'), what)
        for index in indexes.rows:
            if not index[2]:  # not unique
                continue
            info = Statement(style).sql(f'PRAGMA {pragma}index_info("{index[1]}")')
            if [str(r[2]).lower() for r in execute(conn, info, what).rows] == ["resource"]:
                unique = True
        return columns, unique
    if dialect == "postgresql":
        regclass = quote_table(table, "table")
        query = Statement(style).sql(
            "SELECT a.attname, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a "
            "WHERE a.attrelid = to_regclass("
        )
        query.bind(regclass).sql(") AND a.attnum > 0 AND NOT a.attisdropped")
        columns = {str(r[0]): str(r[1]) for r in execute(conn, query, what).rows}
        query = Statement(style).sql(
            "SELECT count(*) FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
            "AND a.attnum = i.indkey[0] WHERE i.indrelid = to_regclass("
        )
        query.bind(regclass).sql(
            ") AND i.indisunique AND i.indnatts = 1 AND i.indpred IS NULL "
            "AND a.attname = 'resource'"
        )
        unique = bool(execute(conn, query, what).rows[0][0])
        return columns, unique
    return None


def type_fits(dialect: str, declared: str, kind: str) -> bool:
    if dialect == "sqlite":
        return sqlite_kind(declared) == kind
    return declared.lower().startswith(PG_TYPES[kind])
