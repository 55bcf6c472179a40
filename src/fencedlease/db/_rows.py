"""Fenced rows of [`fencedlease.db`][]: [`fenced_update`][fencedlease.db.fenced_update] and
[`fenced_read`][fencedlease.db.fenced_read] fence a row by a token column of its own, and a refusal
is explained ([`RowNotFoundError`][fencedlease.db.RowNotFoundError],
[`StaleTokenError`][fencedlease.StaleTokenError],
[`LeaseKeyMismatchError`][fencedlease.LeaseKeyMismatchError])."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final, NoReturn

import attrs

from fencedlease._core.errors import RowNotFoundError, ValidationError
from fencedlease._core.fencing import FencingAccess, RefusalReason, stale_token_error
from fencedlease._core.fencing_access import TokenOrLease, coerce_access
from fencedlease._core.validate import check_strict

from ._connections import execute, style_of
from ._statements import (
    Statement,
    columns_of,
    key_condition,
    quote_column,
    quote_table,
    token_condition,
    where_clause,
)

DEFAULT_TOKEN_COLUMN: Final = "fencing_token"  # noqa: S105 (a column name, not a secret)


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
        where_clause(stmt, self.where)
        stmt.sql(" AND ")
        token_condition(stmt, self.token_col, self.access.token, self.strict)
        if self.key_col is not None and self.access.lease_key is not None:
            stmt.sql(" AND ")
            key_condition(stmt, self.key_col, self.access.lease_key, self.access.legacy_key)

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
    where = columns_of(where, "where")
    strict = check_strict(strict)
    style = style_of(conn)
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

    A row's tokens must all come from leases of one counter: tokens of two counters cannot be
    compared. ``lease_key_column`` (a text column, NULL in a row not fenced yet) makes the row
    record it: a lease (not a bare ``int``) is accepted only where the column is NULL or holds its
    ``fencing_scope`` (``"<prefix>:{<escaped key>}:fence"``, so the same key under another prefix
    is another counter), and the column is set to that scope. A column holding a bare key (written
    by an earlier version) matches a lease of that key and then records its scope (the rule of
    `fencedlease._core.fencing`).

    Raises [`StaleTokenError`][fencedlease.StaleTokenError] (``.resource`` is ``table``;
    ``.last_token`` the largest token of the matching rows) when rows match ``where`` but none may
    be updated, [`LeaseKeyMismatchError`][fencedlease.LeaseKeyMismatchError] (a
    [`StaleTokenError`][fencedlease.StaleTokenError]) when a matching row records another counter,
    [`RowNotFoundError`][fencedlease.db.RowNotFoundError] when no row matches ``where``,
    [`ValidationError`][fencedlease.ValidationError] (nothing executed),
    [`BackendError`][fencedlease.BackendError].
    """
    fence = _row_fence(conn, table, where, token_or_lease, token_column, lease_key_column, strict)
    values = columns_of(values, "values")
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
    a stale holder's [`fenced_update`][fencedlease.db.fenced_update] of those rows is refused, so it
    cannot land between this read and the holder's write. With ``strict=True`` the holder's own
    later write with the same token is refused too: use strict fencing for one access per token
    only. ``lease_key_column`` as in [`fenced_update`][fencedlease.db.fenced_update].

    Raises [`StaleTokenError`][fencedlease.StaleTokenError],
    [`LeaseKeyMismatchError`][fencedlease.LeaseKeyMismatchError],
    [`RowNotFoundError`][fencedlease.db.RowNotFoundError],
    [`ValidationError`][fencedlease.ValidationError] (nothing executed) and
    [`BackendError`][fencedlease.BackendError], as [`fenced_update`][fencedlease.db.fenced_update]
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
    """Nothing was updated: raise [`RowNotFoundError`][fencedlease.db.RowNotFoundError],
    [`LeaseKeyMismatchError`][fencedlease.LeaseKeyMismatchError] or
    [`StaleTokenError`][fencedlease.StaleTokenError]."""
    token_col, key_col, access = fence.token_col, fence.key_col, fence.access
    query = Statement(fence.style).sql(f"SELECT COUNT(*), MAX(CAST({token_col} AS BIGINT))")
    check_key_too = key_col is not None and access.lease_key is not None
    if check_key_too:
        query.sql(f", MIN(CASE WHEN {key_col} <> ").bind(access.lease_key)
        if access.legacy_key is not None:
            query.sql(f" AND {key_col} <> ").bind(access.legacy_key)
        query.sql(f" THEN {key_col} END)")
    query.sql(f" FROM {fence.quoted} WHERE ")
    where_clause(query, fence.where)
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
