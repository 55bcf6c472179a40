"""The guard table of [`fencedlease.db`][]: its schema, the inspection of an existing one, and
[`fence_guard`][fencedlease.db.fence_guard], which fences a whole transaction on one resource."""

from __future__ import annotations

from typing import Any, Final

from fencedlease._core.errors import ValidationError
from fencedlease._core.fencing import FenceState, RefusalReason, decide, stale_token_error
from fencedlease._core.fencing_access import TokenOrLease, coerce_access
from fencedlease._core.validate import check_key, check_strict

from ._connections import dialect_of, execute, style_of
from ._statements import Statement, quote_table

DEFAULT_GUARD_TABLE: Final = "fencedlease_guard"

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
    dialect = dialect_of(conn)
    schema, name = _split_table(table)
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


def _type_fits(dialect: str, declared: str, kind: str) -> bool:
    if dialect == "sqlite":
        return _sqlite_kind(declared) == kind
    return declared.lower().startswith(_PG_TYPES[kind])


def create_guard_table(conn: Any, *, table: str = DEFAULT_GUARD_TABLE) -> None:
    """Create the guard table used by [`fence_guard`][fencedlease.db.fence_guard] if it does not
    exist, or check the one that does (no commit).

    Columns: ``resource TEXT PRIMARY KEY``, ``fencing_token BIGINT NOT NULL``,
    ``owner_fingerprint TEXT`` (NULL: the token came as a bare ``int``) and ``lease_key TEXT`` (the
    counter of the leases fencing the resource, their ``fencing_scope`` such as
    ``"appA:{orders}:fence"``, or a bare key written by an earlier version; NULL until the first
    lease). An existing table is
    inspected (SQLite and PostgreSQL): a guard table of the earlier shape, without ``lease_key``,
    gets the column (``ALTER TABLE ... ADD COLUMN``); any other shape (a missing column, a token
    column that is not a 64-bit integer, text columns that are not text, ``resource`` not unique)
    raises [`ValidationError`][fencedlease.ValidationError] naming ``table`` and what is wrong, and
    nothing is changed.

    Raises [`ValidationError`][fencedlease.ValidationError] for a bad ``table`` or ``conn`` (nothing
    executed) or a table of another shape, [`BackendError`][fencedlease.BackendError] for a driver
    error.
    """
    quoted = quote_table(table, "table")
    style = style_of(conn)
    columns_sql = ", ".join(f"{column} {ddl}" for column, ddl, _ in _GUARD_COLUMNS)
    stmt = Statement(style).sql(f"CREATE TABLE IF NOT EXISTS {quoted} ({columns_sql})")
    execute(conn, stmt, f"creating guard table {table!r}")

    shape = _guard_shape(conn, style, table)
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
    [`fencedlease.owner_fingerprint`][]), and, for a lease, if its counter (its
    ``fencing_scope``, ``"<prefix>:{<escaped key>}:fence"``) is the one the row records (the first
    lease accepted for ``resource`` records its scope; a row holding a bare key, written by an
    earlier version, matches a lease of that key and then records its scope; a bare ``int`` token
    is not checked). Tokens compare as ``BIGINT``. The row stays locked until the transaction
    ends, so the rest of the transaction, reads included, is fenced. Returns the accepted token.

    Raises [`StaleTokenError`][fencedlease.StaleTokenError] (``.resource``, ``.token``,
    ``.last_token``; roll back), its subclass
    [`LeaseKeyMismatchError`][fencedlease.LeaseKeyMismatchError] (``.lease_key`` on record,
    ``.presented_key``: scopes) for a lease of another counter,
    [`ValidationError`][fencedlease.ValidationError] (bad argument; nothing executed),
    [`BackendError`][fencedlease.BackendError] (the driver's error in ``__cause__``, for instance a
    missing guard table or one without ``lease_key``: see
    [`create_guard_table`][fencedlease.db.create_guard_table]).
    """
    access = coerce_access(token_or_lease)
    check_key(resource, "resource")
    strict = check_strict(strict)
    quoted = quote_table(table, "table")
    style = style_of(conn)

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
        "lease_key = COALESCE(excluded.lease_key, g.lease_key) "
        "WHERE (g.lease_key IS NULL OR excluded.lease_key IS NULL "
        "OR g.lease_key = excluded.lease_key"
    )
    if access.legacy_key is not None:  # a bare key recorded by the earlier shape (_fencing)
        stmt.sql(" OR g.lease_key = ").bind(access.legacy_key)
    stmt.sql(f") AND ({new_token} > {old_token}")
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
