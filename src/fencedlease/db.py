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

from collections.abc import Mapping, Sequence
from typing import Any, Final, NoReturn

import attrs

from ._errors import FencedLeaseError, ValidationError
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
from ._sql import (
    Statement,
    add_where,
    check_columns,
    dialect_of,
    execute,
    guard_shape,
    key_condition,
    param_style,
    quote_column,
    quote_table,
    token_condition,
    type_fits,
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


# --- the guard table --------------------------------------------------------------------------

# The guard table's columns: what create_guard_table creates, and what it accepts in an existing
# table (SQLite by declared type affinity, PostgreSQL by type).
_GUARD_COLUMNS: Final = (
    ("resource", "TEXT PRIMARY KEY", "text"),
    ("fencing_token", "BIGINT NOT NULL", "integer"),
    ("owner_fingerprint", "TEXT", "text"),
    ("lease_key", "TEXT", "text"),
)


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
    quoted = quote_table(table, "table")
    style = param_style(conn)
    columns_sql = ", ".join(f"{column} {ddl}" for column, ddl, _ in _GUARD_COLUMNS)
    stmt = Statement(style).sql(f"CREATE TABLE IF NOT EXISTS {quoted} ({columns_sql})")
    execute(conn, stmt, f"creating guard table {table!r}")

    shape = guard_shape(conn, style, table)
    if shape is None:  # a database this module cannot inspect: check the columns are there
        probe = Statement(style).sql(
            f"SELECT {', '.join(c for c, _, _ in _GUARD_COLUMNS)} FROM {quoted} WHERE 1 = 0"  # noqa: S608
        )
        execute(conn, probe, f"checking guard table {table!r}")
        return
    columns, unique = shape
    dialect = dialect_of(conn)
    problems = []
    for column, _, kind in _GUARD_COLUMNS:
        declared = columns.get(column)
        if declared is None:
            if column != "lease_key":
                problems.append(f"it has no column {column}")
        elif not type_fits(dialect, declared, kind):
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
        alter = Statement(style).sql(f"ALTER TABLE {quoted} ADD COLUMN{exists} lease_key TEXT")
        execute(conn, alter, f"adding lease_key to guard table {table!r}")


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
    quoted = quote_table(table, "table")
    style = param_style(conn)

    new_token = "CAST(excluded.fencing_token AS BIGINT)"  # noqa: S105 (SQL, not a secret)
    old_token = "CAST(g.fencing_token AS BIGINT)"  # noqa: S105
    stmt = Statement(style).sql(
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
    result = execute(conn, stmt, f"fence_guard on {resource!r}")
    if result.rows:
        return access.token

    # Refused: read what is there, to say why. In PostgreSQL the refused upsert still locked the
    # row.
    query = Statement(style).sql(
        "SELECT CAST(fencing_token AS BIGINT), owner_fingerprint, lease_key "  # noqa: S608
        f"FROM {quoted} WHERE resource = "
    )
    query.bind(resource)
    found = execute(conn, query, f"fence_guard on {resource!r}").rows
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

    def condition(self, stmt: Statement) -> None:
        """`` WHERE where... AND <token> [AND <key>]``."""
        stmt.sql(" WHERE ")
        add_where(stmt, self.where)
        stmt.sql(" AND ")
        token_condition(stmt, self.token_col, self.access.token, self.strict)
        if self.key_col is not None and self.access.lease_key is not None:
            stmt.sql(" AND ")
            key_condition(stmt, self.key_col, self.access.lease_key)

    def set_token(self, stmt: Statement) -> None:
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
    quoted = quote_table(table, "table")
    token_col = quote_column(token_column, "token_column")
    key_col = None
    if lease_key_column is not None:
        key_col = quote_column(lease_key_column, "lease_key_column")
        if lease_key_column == token_column:
            raise ValidationError(
                "lease_key_column", "lease_key_column must not be the token column"
            )
    where = check_columns(where, "where")
    strict = check_strict(strict)
    style = param_style(conn)
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
    values = check_columns(values, "values")
    for reserved, argument in (
        (token_column, "token_column"),
        (lease_key_column, "lease_key_column"),
    ):
        if reserved is not None and reserved in values:
            raise ValidationError(
                "values", f"values must not set {reserved!r}, the {argument}: the fence sets it"
            )

    stmt = Statement(fence.style).sql(f"UPDATE {fence.quoted} SET ")  # noqa: S608
    for column, value in values.items():
        stmt.sql(f"{quote_column(column, 'values')} = ").bind(value).sql(", ")
    fence.set_token(stmt)
    fence.condition(stmt)
    result = execute(conn, stmt, f"fenced_update of {table!r}")
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
        returning = ", ".join(quote_column(column, "columns") for column in columns)

    stmt = Statement(fence.style).sql(f"UPDATE {fence.quoted} SET ")  # noqa: S608
    fence.set_token(stmt)
    fence.condition(stmt)
    stmt.sql(f" RETURNING {returning}")
    result = execute(conn, stmt, f"fenced_read of {table!r}")
    if result.rows:
        return [dict(zip(result.columns, row, strict=True)) for row in result.rows]
    _explain_refusal(conn, fence)


def _explain_refusal(conn: Any, fence: _RowFence) -> NoReturn:
    """Nothing was updated: raise :class:`RowNotFoundError`, :class:`LeaseKeyMismatchError` or
    :class:`StaleTokenError`."""
    token_col, key_col, access = fence.token_col, fence.key_col, fence.access
    query = Statement(fence.style).sql(f"SELECT COUNT(*), MAX(CAST({token_col} AS BIGINT))")
    check_key_too = key_col is not None and access.lease_key is not None
    if check_key_too:
        query.sql(f", MIN(CASE WHEN {key_col} <> ").bind(access.lease_key)
        query.sql(f" THEN {key_col} END)")
    query.sql(f" FROM {fence.quoted} WHERE ")
    add_where(query, fence.where)
    found = execute(conn, query, f"fencing {fence.table!r}").rows[0]
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
