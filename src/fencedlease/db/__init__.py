"""Fencing in SQL databases: guards that run inside the caller's own transaction.

```
from fencedlease import db

db.create_guard_table(conn)                                  # once, like a migration
with conn:                                                   # the caller's transaction
    db.fence_guard(conn, "order:42", lease)                  # raises StaleTokenError: roll back
    ...                                                      # reads and writes, now fenced
db.fenced_update(conn, "orders", {"status": "shipped"}, {"id": 42}, lease)   # -> rows updated
rows = db.fenced_read(conn, "orders", {"id": 42}, lease)     # -> [{"id": 42, ...}], fence moved
```

Three ways to fence, one rule (`fencedlease._core.fencing.decide`; Kleppmann, "How to do
distributed locking", 2016):

- [`fence_guard`][fencedlease.db.fence_guard] keeps one row per resource in a guard table
  (``resource``, ``fencing_token``, ``owner_fingerprint``, ``lease_key``) and moves it forward with
  one ``INSERT ... ON CONFLICT DO UPDATE ... WHERE``. The upsert locks the guard row until the
  caller's transaction ends, so everything the transaction does after the guard is fenced, reads
  included. It also catches a duplicate grant (the same token from two different leases), and
  records the counter of the first lease it accepts (its ``fencing_scope``, ``"<prefix>:{<escaped
  key>}:fence"``): a lease of another counter, another key or the same key under another prefix, is
  refused ([`LeaseKeyMismatchError`][fencedlease.LeaseKeyMismatchError]), since tokens of two
  counters cannot be compared.
- [`fenced_update`][fencedlease.db.fenced_update] fences a row by a token column of its own:
  ``UPDATE t SET ..., token_column = :t WHERE ... AND (token_column IS NULL OR
  CAST(token_column AS BIGINT) <= :t)`` (strict: ``<``). It knows no fingerprints, so an equal
  token is accepted from any lease; use the guard, or ``strict=True``, where duplicate grants
  matter. A row's token column holds tokens of one counter: give ``lease_key_column`` to have the
  row record that counter's scope and refuse leases of others.
- [`fenced_read`][fencedlease.db.fenced_read] is the same update with ``RETURNING``: it moves the
  row's token and reads the row in one statement, so a stale holder can no longer write under what
  the new holder read (the lost update of ``docs/fencing.md``).

Tokens are exact integers, 1..2**63 - 1, bound as integers and compared as ``BIGINT``: every
comparison casts the stored token (``CAST(col AS BIGINT)``), so a token column declared ``TEXT``
(or with no type, in SQLite) still compares numerically (10 after 9), never as text. A column
that cannot hold 64-bit integers exactly (``REAL``, ``double precision``, PostgreSQL ``integer``)
is not fit to hold tokens.

Connections: sync DB-API connections (sqlite3, psycopg 3, any driver whose module declares a
``paramstyle``) and sync SQLAlchemy ``Connection`` / ``Session``. An asyncio connection
(``psycopg.AsyncConnection``, SQLAlchemy's ``AsyncConnection`` / ``AsyncSession``: use their
``run_sync``) or anything else is refused with [`ValidationError`][fencedlease.ValidationError]
naming ``conn``. Table and column names are checked against ``[A-Za-z_][A-Za-z0-9_]{0,62}`` (a table
may be ``schema.table``) and then double-quoted, so they are used exactly as given: in PostgreSQL
give them in lower case, as unquoted names fold to it. Values are always bound parameters. Needs
``RETURNING`` and ``ON CONFLICT`` (SQLite 3.35+, PostgreSQL 9.5+).

Errors: [`StaleTokenError`][fencedlease.StaleTokenError] (refused: roll the transaction back; its
subclass [`LeaseKeyMismatchError`][fencedlease.LeaseKeyMismatchError] for a lease of another
counter), [`RowNotFoundError`][fencedlease.db.RowNotFoundError] (no row matches ``where``),
[`ValidationError`][fencedlease.ValidationError] (a bad argument: nothing was executed; or a guard
table of the wrong shape), and [`BackendError`][fencedlease.BackendError] for anything the driver
raises (its exception in ``__cause__``; after it a PostgreSQL transaction must be rolled back).
Nothing here commits or rolls back: the transaction is the caller's.
"""

from fencedlease._core.errors import RowNotFoundError

from ._guard import DEFAULT_GUARD_TABLE, create_guard_table, fence_guard
from ._rows import DEFAULT_TOKEN_COLUMN, fenced_read, fenced_update

__all__ = [
    "DEFAULT_GUARD_TABLE",
    "DEFAULT_TOKEN_COLUMN",
    "RowNotFoundError",
    "create_guard_table",
    "fence_guard",
    "fenced_read",
    "fenced_update",
]
