"""fencedlease.db on real SQLite files: guards, fenced updates and reads, two processes."""

from __future__ import annotations

import multiprocessing
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from test_fencing_model import OWNERS, Access, accesses, check_against_model, largest, lease

from fencedlease import (
    BackendError,
    FencedLeaseError,
    LeaseKeyMismatchError,
    StaleTokenError,
    ValidationError,
    db,
)
from fencedlease._core.fencing import MAX_FENCING_TOKEN


def connect(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(path, timeout=60)


@pytest.fixture
def conn(tmp_path: Path) -> Iterator[sqlite3.Connection]:
    """A file database with the guard table and an orders table: row 42 has a NULL token."""
    c = connect(tmp_path / "fence.db")
    db.create_guard_table(c)
    c.execute(
        "CREATE TABLE orders (id INTEGER PRIMARY KEY, status TEXT, note TEXT, fencing_token BIGINT)"
    )
    c.execute("INSERT INTO orders (id, status) VALUES (42, 'new')")
    c.commit()
    yield c
    c.close()


def row(conn: sqlite3.Connection, order_id: int = 42) -> Any:
    return conn.execute(
        "SELECT status, fencing_token FROM orders WHERE id = ?", (order_id,)
    ).fetchone()


# --- fence_guard: the fencing cases ---------------------------------------------------------------


def test_guard_refuses_older_token_with_last_token(conn: sqlite3.Connection) -> None:
    """Guard: 34 accepted, then 33 refused with last_token == 34; the guard row keeps 34."""
    assert db.fence_guard(conn, "orders", 34) == 34
    with pytest.raises(StaleTokenError) as info:
        db.fence_guard(conn, "orders", 33)
    assert (info.value.resource, info.value.token, info.value.last_token) == ("orders", 33, 34)
    conn.commit()
    assert conn.execute("SELECT fencing_token FROM fencedlease_guard").fetchall() == [(34,)]


def test_guard_same_lease_twice_accepted_strict_refused(conn: sqlite3.Connection) -> None:
    """Guard: the same lease with 34 twice is accepted; under strict the second is refused."""
    assert db.fence_guard(conn, "orders", lease(34)) == 34
    assert db.fence_guard(conn, "orders", lease(34)) == 34
    with pytest.raises(StaleTokenError) as info:
        db.fence_guard(conn, "orders", lease(34), strict=True)
    assert info.value.last_token == 34
    assert "fences strictly" in str(info.value)


def test_guard_refuses_second_lease_with_same_token(conn: sqlite3.Connection) -> None:
    """Guard: two different leases both carrying 34, the second is refused (duplicate grant)."""
    db.fence_guard(conn, "orders", lease(34, owner=0))
    with pytest.raises(StaleTokenError, match="different lease") as info:
        db.fence_guard(conn, "orders", lease(34, owner=1))
    assert info.value.last_token == 34
    assert db.fence_guard(conn, "orders", 34) == 34  # a bare int is an unknown lease
    assert db.fence_guard(conn, "orders", lease(35, owner=1)) == 35


def test_guard_resources_are_independent(conn: sqlite3.Connection) -> None:
    """Each resource has its own guard row."""
    db.fence_guard(conn, "orders", 34)
    assert db.fence_guard(conn, "invoices", 1) == 1
    assert sorted(conn.execute("SELECT resource, fencing_token FROM fencedlease_guard")) == [
        ("invoices", 1),
        ("orders", 34),
    ]


def test_guard_in_schema_qualified_custom_table(conn: sqlite3.Connection) -> None:
    """table= may name another table, schema-qualified (SQLite's "main" schema here)."""
    db.create_guard_table(conn, table="main.my_guard")
    assert db.fence_guard(conn, "orders", 7, table="main.my_guard") == 7
    assert conn.execute("SELECT resource, fencing_token FROM my_guard").fetchall() == [
        ("orders", 7)
    ]


def test_guard_without_table_is_a_backend_error(tmp_path: Path) -> None:
    """A missing guard table reaches the caller as BackendError with sqlite3's error as cause."""
    c = connect(tmp_path / "empty.db")
    with pytest.raises(BackendError) as info:
        db.fence_guard(c, "orders", 1)
    assert isinstance(info.value.__cause__, sqlite3.OperationalError)
    assert "no such table" in str(info.value.__cause__)


# --- fenced_update --------------------------------------------------------------------------------


def test_update_on_null_token_column_accepts_and_stores_token(conn: sqlite3.Connection) -> None:
    """A row whose token column is NULL is updated, and then holds the token."""
    assert db.fenced_update(conn, "orders", {"status": "shipped"}, {"id": 42}, 34) == 1
    assert row(conn) == ("shipped", 34)


def test_update_refuses_older_token_and_changes_nothing(conn: sqlite3.Connection) -> None:
    """34 then 33: StaleTokenError with last_token 34 and the row unchanged."""
    db.fenced_update(conn, "orders", {"status": "paid"}, {"id": 42}, lease(34))
    with pytest.raises(StaleTokenError) as info:
        db.fenced_update(conn, "orders", {"status": "cancelled"}, {"id": 42}, lease(33))
    assert (info.value.resource, info.value.token, info.value.last_token) == ("orders", 33, 34)
    assert row(conn) == ("paid", 34)


def test_update_equal_token_accepted_unless_strict(conn: sqlite3.Connection) -> None:
    """The same token again updates; strict refuses it."""
    db.fenced_update(conn, "orders", {"status": "paid"}, {"id": 42}, 34)
    assert db.fenced_update(conn, "orders", {"status": "packed"}, {"id": 42}, 34) == 1
    with pytest.raises(StaleTokenError, match="fences strictly"):
        db.fenced_update(conn, "orders", {"status": "x"}, {"id": 42}, 34, strict=True)
    assert row(conn) == ("packed", 34)
    assert db.fenced_update(conn, "orders", {"status": "shipped"}, {"id": 42}, 35, strict=True) == 1


def test_update_of_missing_row_is_row_not_found(conn: sqlite3.Connection) -> None:
    """No row matches: RowNotFoundError (a LookupError, a FencedLeaseError), not StaleTokenError."""
    with pytest.raises(db.RowNotFoundError) as info:
        db.fenced_update(conn, "orders", {"status": "shipped"}, {"id": 43}, 34)
    assert isinstance(info.value, LookupError)
    assert isinstance(info.value, FencedLeaseError)
    assert not isinstance(info.value, StaleTokenError)
    assert (info.value.table, info.value.where) == ("orders", {"id": 43})


def test_update_where_none_means_is_null_and_counts_rows(conn: sqlite3.Connection) -> None:
    """A None in where matches NULL; several matching rows are all updated and counted."""
    conn.executemany("INSERT INTO orders (id, status) VALUES (?, ?)", [(1, "new"), (2, "new")])
    assert db.fenced_update(conn, "orders", {"status": "seen"}, {"note": None}, 5) == 3
    assert conn.execute("SELECT DISTINCT status, fencing_token FROM orders").fetchall() == [
        ("seen", 5)
    ]


def test_update_custom_token_column(conn: sqlite3.Connection) -> None:
    """token_column names another column."""
    conn.execute("CREATE TABLE docs (id INTEGER PRIMARY KEY, body TEXT, fence BIGINT)")
    conn.execute("INSERT INTO docs (id, body, fence) VALUES (1, 'a', 9)")
    with pytest.raises(StaleTokenError):
        db.fenced_update(conn, "docs", {"body": "b"}, {"id": 1}, 8, token_column="fence")
    assert db.fenced_update(conn, "docs", {"body": "c"}, {"id": 1}, 9, token_column="fence") == 1
    assert conn.execute("SELECT body, fence FROM docs").fetchall() == [("c", 9)]


# --- fenced_read ----------------------------------------------------------------------------------


def test_read_returns_rows_and_moves_the_token(conn: sqlite3.Connection) -> None:
    """A fenced read returns the row as dicts and leaves the token at the reader's."""
    assert db.fenced_read(conn, "orders", {"id": 42}, 34) == [
        {"id": 42, "status": "new", "note": None, "fencing_token": 34}
    ]
    assert db.fenced_read(conn, "orders", {"id": 42}, 34, columns=["status"]) == [{"status": "new"}]
    with pytest.raises(StaleTokenError) as info:
        db.fenced_read(conn, "orders", {"id": 42}, 33)
    assert info.value.last_token == 34
    with pytest.raises(db.RowNotFoundError):
        db.fenced_read(conn, "orders", {"id": 43}, 34)


def test_lost_update_with_write_only_fencing(conn: sqlite3.Connection) -> None:
    """Write-only fencing loses an update: the stale holder's write lands between the new holder's
    plain read and its write, is accepted, and is then overwritten."""
    conn.execute("UPDATE orders SET note = '10', fencing_token = 33 WHERE id = 42")
    stale, fresh = 33, 34
    balance = int(
        conn.execute("SELECT note FROM orders WHERE id = 42").fetchone()[0]
    )  # fresh reads
    db.fenced_update(conn, "orders", {"note": "15"}, {"id": 42}, stale)  # stale +5: accepted
    db.fenced_update(conn, "orders", {"note": str(balance + 1)}, {"id": 42}, fresh)  # fresh +1
    assert conn.execute("SELECT note FROM orders").fetchone() == ("11",)  # the +5 is gone


def test_fenced_read_prevents_the_lost_update(conn: sqlite3.Connection) -> None:
    """With a fenced read the stale holder's write is refused, so no accepted write is lost."""
    conn.execute("UPDATE orders SET note = '10', fencing_token = 33 WHERE id = 42")
    stale, fresh = 33, 34
    balance = int(db.fenced_read(conn, "orders", {"id": 42}, fresh, columns=["note"])[0]["note"])
    with pytest.raises(StaleTokenError) as info:
        db.fenced_update(conn, "orders", {"note": "15"}, {"id": 42}, stale)
    assert info.value.last_token == fresh
    db.fenced_update(conn, "orders", {"note": str(balance + 1)}, {"id": 42}, fresh)
    assert conn.execute("SELECT note FROM orders").fetchone() == ("11",)


# --- tokens compare as numbers, whatever the column's declared type -------------------------------


@pytest.mark.parametrize("declared", ["TEXT", "", "INTEGER", "BIGINT", "VARCHAR(20)", "NUMERIC"])
def test_token_column_of_any_declared_type_compares_numerically(
    conn: sqlite3.Connection, declared: str
) -> None:
    """A token column declared TEXT, untyped, INTEGER...: 10 then 9 is refused (a text compare
    would accept '9' after '10'), and 2**53 + 1 then 2**53 is refused too."""
    conn.execute(f"CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT, fencing_token {declared})")
    conn.execute("INSERT INTO t (id, v) VALUES (1, 'new')")
    assert db.fenced_update(conn, "t", {"v": "by-10"}, {"id": 1}, 10) == 1
    with pytest.raises(StaleTokenError) as info:
        db.fenced_update(conn, "t", {"v": "by-9"}, {"id": 1}, 9)
    assert info.value.last_token == 10
    with pytest.raises(StaleTokenError):
        db.fenced_read(conn, "t", {"id": 1}, 9)
    assert db.fenced_update(conn, "t", {"v": "big"}, {"id": 1}, 2**53 + 1) == 1
    with pytest.raises(StaleTokenError) as info:
        db.fenced_update(conn, "t", {"v": "by-2**53"}, {"id": 1}, 2**53)
    assert info.value.last_token == 2**53 + 1
    assert db.fenced_read(conn, "t", {"id": 1}, MAX_FENCING_TOKEN, columns=["v"]) == [{"v": "big"}]
    with pytest.raises(StaleTokenError) as info:
        db.fenced_update(conn, "t", {"v": "late"}, {"id": 1}, MAX_FENCING_TOKEN - 1)
    assert info.value.last_token == MAX_FENCING_TOKEN
    assert conn.execute("SELECT v, CAST(fencing_token AS INTEGER) FROM t").fetchone() == (
        "big",
        MAX_FENCING_TOKEN,
    )


@pytest.mark.parametrize("declared", ["TEXT", ""], ids=["text", "untyped"])
def test_token_stored_as_text_compares_as_a_number(conn: sqlite3.Connection, declared: str) -> None:
    """A row whose token column holds the text '10' (written by anyone): token 9 is refused (a
    text compare would let '9' in after '10') and 11 is accepted (in an untyped column SQLite
    orders every integer before every text, so without the cast 11 would be refused forever)."""
    conn.execute(f"CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT, fencing_token {declared})")
    conn.execute("INSERT INTO t VALUES (1, 'kept', '10')")
    assert conn.execute("SELECT typeof(fencing_token) FROM t").fetchone() == ("text",)
    with pytest.raises(StaleTokenError) as info:
        db.fenced_update(conn, "t", {"v": "lost"}, {"id": 1}, 9)
    assert info.value.last_token == 10
    assert conn.execute("SELECT v FROM t").fetchone() == ("kept",)
    assert db.fenced_update(conn, "t", {"v": "by-11"}, {"id": 1}, 11) == 1
    assert db.fenced_read(conn, "t", {"id": 1}, 11, columns=["v"]) == [{"v": "by-11"}]


def test_guard_tokens_near_2_53_and_at_2_63(conn: sqlite3.Connection) -> None:
    """The guard tells 2**53 from 2**53 + 1 and accepts 2**63 - 1, stored exactly."""
    assert db.fence_guard(conn, "r", lease(2**53 + 1)) == 2**53 + 1
    with pytest.raises(StaleTokenError) as info:
        db.fence_guard(conn, "r", lease(2**53))
    assert info.value.last_token == 9_007_199_254_740_993
    assert db.fence_guard(conn, "r", MAX_FENCING_TOKEN) == MAX_FENCING_TOKEN
    with pytest.raises(StaleTokenError):
        db.fence_guard(conn, "r", MAX_FENCING_TOKEN - 1)
    assert conn.execute("SELECT fencing_token FROM fencedlease_guard").fetchall() == [
        (9_223_372_036_854_775_807,)
    ]


def test_guard_compares_numerically_in_a_hand_made_text_table(conn: sqlite3.Connection) -> None:
    """fence_guard on a guard table made by hand with a TEXT token column still compares numbers."""
    conn.execute(
        "CREATE TABLE g (resource TEXT PRIMARY KEY, fencing_token TEXT, owner_fingerprint TEXT, "
        "lease_key TEXT)"
    )
    db.fence_guard(conn, "r", 10, table="g")
    with pytest.raises(StaleTokenError) as info:
        db.fence_guard(conn, "r", 9, table="g")
    assert info.value.last_token == 10


@pytest.mark.parametrize("bad", [0, -1, 2**63, True, 3.0, lease(0), lease(2**63)])
def test_token_out_of_range_writes_nothing(
    traced: tuple[sqlite3.Connection, list[str]], bad: Any
) -> None:
    """A token <= 0, > 2**63 - 1, a bool or not an int: ValidationError naming token_or_lease, and
    no statement at all for the guard, the update and the read."""
    conn, statements = traced
    for call in (
        lambda: db.fence_guard(conn, "orders", bad),
        lambda: db.fenced_update(conn, "orders", {"status": "x"}, {"id": 42}, bad),
        lambda: db.fenced_read(conn, "orders", {"id": 42}, bad),
    ):
        with pytest.raises(ValidationError) as info:
            call()
        assert info.value.argument == "token_or_lease"
    assert statements == []


# --- the guard table's shape ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ddl", "problem"),
    [
        (
            "resource TEXT PRIMARY KEY, fencing_token TEXT, owner_fingerprint TEXT, lease_key TEXT",
            "column fencing_token is TEXT, not a 64-bit integer",
        ),
        (
            "resource TEXT PRIMARY KEY, fencing_token, owner_fingerprint TEXT",
            "column fencing_token is untyped",
        ),
        (
            "resource TEXT PRIMARY KEY, fencing_token REAL, owner_fingerprint TEXT",
            "column fencing_token is REAL",
        ),
        ("resource TEXT PRIMARY KEY, fencing_token BIGINT", "it has no column owner_fingerprint"),
        (
            "resource TEXT, fencing_token BIGINT, owner_fingerprint TEXT",
            "column resource is not its primary key",
        ),
        (
            "resource TEXT PRIMARY KEY, fencing_token BIGINT, owner_fingerprint INTEGER",
            "column owner_fingerprint is INTEGER, not text",
        ),
    ],
)
def test_guard_table_of_another_shape_is_refused(tmp_path: Path, ddl: str, problem: str) -> None:
    """create_guard_table inspects an existing table: another shape is a ValidationError naming
    the table and the problem, and the table is left as it was."""
    c = connect(tmp_path / "shape.db")
    c.execute(f"CREATE TABLE my_guard ({ddl})")
    before = c.execute("SELECT sql FROM sqlite_master WHERE name = 'my_guard'").fetchone()
    with pytest.raises(ValidationError) as info:
        db.create_guard_table(c, table="my_guard")
    assert info.value.argument == "table"
    assert "'my_guard'" in str(info.value)
    assert problem in str(info.value)
    assert c.execute("SELECT sql FROM sqlite_master WHERE name = 'my_guard'").fetchone() == before


def test_guard_table_of_the_earlier_shape_gains_lease_key(tmp_path: Path) -> None:
    """A guard table without lease_key (the earlier shape) gets the column; its rows keep their
    tokens and record the key of the next lease."""
    c = connect(tmp_path / "old.db")
    c.execute(
        "CREATE TABLE fencedlease_guard (resource TEXT PRIMARY KEY, "
        "fencing_token BIGINT NOT NULL, owner_fingerprint TEXT)"
    )
    c.execute("INSERT INTO fencedlease_guard VALUES ('orders', 7, NULL)")
    with pytest.raises(BackendError, match="lease_key"):
        db.fence_guard(c, "orders", lease(8))  # not migrated yet
    db.create_guard_table(c)
    db.create_guard_table(c)  # twice is fine
    columns = [row[1] for row in c.execute("PRAGMA table_info(fencedlease_guard)")]
    assert columns == ["resource", "fencing_token", "owner_fingerprint", "lease_key"]
    with pytest.raises(StaleTokenError):
        db.fence_guard(c, "orders", lease(6))
    assert db.fence_guard(c, "orders", lease(8, key="order:42")) == 8
    assert c.execute("SELECT fencing_token, lease_key FROM fencedlease_guard").fetchall() == [
        (8, "order:42")
    ]


def test_guard_table_with_a_unique_index_on_resource_is_accepted(tmp_path: Path) -> None:
    """resource may be unique through an index rather than the primary key."""
    c = connect(tmp_path / "idx.db")
    c.execute(
        "CREATE TABLE g (id INTEGER PRIMARY KEY, resource VARCHAR(200) NOT NULL, "
        "fencing_token INTEGER, owner_fingerprint TEXT, lease_key TEXT)"
    )
    c.execute("CREATE UNIQUE INDEX g_resource ON g (resource)")
    db.create_guard_table(c, table="g")
    assert db.fence_guard(c, "r", 3, table="g") == 3


# --- one lease key per guard row, optionally per row ----------------------------------------------


def test_guard_records_the_lease_key_and_refuses_another(conn: sqlite3.Connection) -> None:
    """The guard row records the first lease's key; a lease on another key is refused with
    LeaseKeyMismatchError naming both keys (no owner token), the row unchanged; a bare int and
    the row's own key go on."""
    db.fence_guard(conn, "order:42", lease(34, key="order:42"))
    with pytest.raises(LeaseKeyMismatchError) as info:
        db.fence_guard(conn, "order:42", lease(99, owner=1, key="orders"))
    exc = info.value
    assert (exc.resource, exc.token, exc.last_token) == ("order:42", 99, 34)
    assert (exc.lease_key, exc.presented_key) == ("order:42", "orders")
    assert "'orders'" in str(exc)
    assert OWNERS[1] not in str(exc)
    assert conn.execute("SELECT fencing_token, lease_key FROM fencedlease_guard").fetchall() == [
        (34, "order:42")
    ]
    assert db.fence_guard(conn, "order:42", 35) == 35
    assert db.fence_guard(conn, "order:42", lease(36, key="order:42")) == 36


def test_update_with_a_lease_key_column(conn: sqlite3.Connection) -> None:
    """lease_key_column: a NULL column takes the lease's key; another key is refused with
    LeaseKeyMismatchError and the row unchanged; a bare int is not checked and sets no key."""
    conn.execute("ALTER TABLE orders ADD COLUMN lease_key TEXT")
    assert (
        db.fenced_update(
            conn, "orders", {"status": "int"}, {"id": 42}, 5, lease_key_column="lease_key"
        )
        == 1
    )
    assert conn.execute("SELECT lease_key FROM orders").fetchone() == (None,)
    db.fenced_update(
        conn,
        "orders",
        {"status": "a"},
        {"id": 42},
        lease(34, key="order:42"),
        lease_key_column="lease_key",
    )
    with pytest.raises(LeaseKeyMismatchError) as info:
        db.fenced_update(
            conn,
            "orders",
            {"status": "b"},
            {"id": 42},
            lease(40, key="order:43"),
            lease_key_column="lease_key",
        )
    assert (info.value.lease_key, info.value.presented_key, info.value.last_token) == (
        "order:42",
        "order:43",
        34,
    )
    with pytest.raises(LeaseKeyMismatchError):
        db.fenced_read(
            conn, "orders", {"id": 42}, lease(41, key="order:43"), lease_key_column="lease_key"
        )
    assert conn.execute("SELECT status, fencing_token, lease_key FROM orders").fetchone() == (
        "a",
        34,
        "order:42",
    )
    assert db.fenced_read(
        conn,
        "orders",
        {"id": 42},
        lease(35, key="order:42"),
        columns=["status", "lease_key"],
        lease_key_column="lease_key",
    ) == [{"status": "a", "lease_key": "order:42"}]
    with pytest.raises(ValidationError) as verr:
        db.fenced_update(
            conn, "orders", {"lease_key": "x"}, {"id": 42}, 36, lease_key_column="lease_key"
        )
    assert verr.value.argument == "values"
    with pytest.raises(ValidationError) as verr:
        db.fenced_update(
            conn, "orders", {"status": "x"}, {"id": 42}, 36, lease_key_column="fencing_token"
        )
    assert verr.value.argument == "lease_key_column"


# --- identifiers: validated, nothing executed -----------------------------------------------------


@pytest.fixture
def traced(conn: sqlite3.Connection) -> Iterator[tuple[sqlite3.Connection, list[str]]]:
    """conn, recording every statement SQLite is asked to run."""
    statements: list[str] = []
    conn.execute("CREATE TABLE x (id INTEGER)")
    conn.commit()
    conn.set_trace_callback(statements.append)
    yield conn, statements
    conn.set_trace_callback(None)


def test_injected_table_name_is_refused_and_nothing_runs(
    traced: tuple[sqlite3.Connection, list[str]],
) -> None:
    """A table named `orders; DROP TABLE x`: ValidationError naming "table", no statement run."""
    conn, statements = traced
    evil = "orders; DROP TABLE x"
    with pytest.raises(ValidationError) as info:
        db.fenced_update(conn, evil, {"status": "shipped"}, {"id": 42}, 34)
    assert info.value.argument == "table"
    for call in (
        lambda: db.fence_guard(conn, "orders", 34, table=evil),
        lambda: db.create_guard_table(conn, table=evil),
        lambda: db.fenced_read(conn, evil, {"id": 42}, 34),
    ):
        with pytest.raises(ValidationError) as info:
            call()
        assert info.value.argument == "table"
    assert statements == []
    conn.set_trace_callback(None)
    assert conn.execute("SELECT name FROM sqlite_master WHERE name = 'x'").fetchall() == [("x",)]


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"values": {"status; --": 1}}, "values"),
        ({"where": {'id" OR 1=1 --': 1}}, "where"),
        ({"token_column": "fencing_token = 0 --"}, "token_column"),
        ({"values": {}}, "values"),
        ({"where": {}}, "where"),
        ({"values": {"fencing_token": 1}}, "values"),
        ({"token_or_lease": True}, "token_or_lease"),
        ({"token_or_lease": lease(None)}, "token_or_lease"),
        ({"table": "a.b.c"}, "table"),
        ({"table": "x" * 64}, "table"),
    ],
)
def test_bad_arguments_are_refused_and_nothing_runs(
    traced: tuple[sqlite3.Connection, list[str]], kwargs: dict[str, Any], argument: str
) -> None:
    """Every bad name or token is a ValidationError naming its argument, before any SQL."""
    conn, statements = traced
    call: dict[str, Any] = {
        "table": "orders",
        "values": {"status": "shipped"},
        "where": {"id": 42},
        "token_or_lease": 34,
    }
    call.update(kwargs)
    with pytest.raises(ValidationError) as info:
        db.fenced_update(conn, **call)
    assert info.value.argument == argument
    assert statements == []


def test_read_columns_and_resource_are_validated(
    traced: tuple[sqlite3.Connection, list[str]],
) -> None:
    """fenced_read checks its columns, fence_guard its resource name, before any SQL."""
    conn, statements = traced
    with pytest.raises(ValidationError) as info:
        db.fenced_read(conn, "orders", {"id": 42}, 34, columns=["status, (SELECT 1)"])
    assert info.value.argument == "columns"
    with pytest.raises(ValidationError) as info:
        db.fenced_read(conn, "orders", {"id": 42}, 34, columns="status")
    assert info.value.argument == "columns"
    with pytest.raises(ValidationError) as info:
        db.fence_guard(conn, "", 34)
    assert info.value.argument == "resource"
    assert statements == []


def test_values_are_bound_not_spliced(conn: sqlite3.Connection) -> None:
    """A value full of SQL is stored as text."""
    evil = "x'); DROP TABLE orders; --"
    db.fenced_update(conn, "orders", {"status": evil}, {"id": 42}, 1)
    db.fence_guard(conn, evil, 1)
    assert row(conn) == (evil, 1)
    assert conn.execute("SELECT resource FROM fencedlease_guard").fetchall() == [(evil,)]


# --- the guard against the sequential model -------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(accesses=accesses)
def test_sqlite_guard_accepts_what_the_model_accepts(accesses: list[Access]) -> None:
    """For any sequence of accesses (strict chosen per access; tokens near 0, 2**53 and 2**63 - 1;
    leases of two keys), the guard accepts what the model accepts, refuses for its reason, and its
    row always holds the largest accepted token."""
    conn = sqlite3.connect(":memory:")
    db.create_guard_table(conn)
    history = check_against_model(
        lambda token_or_lease, strict: db.fence_guard(conn, "r", token_or_lease, strict=strict),
        accesses,
    )
    stored = conn.execute("SELECT fencing_token FROM fencedlease_guard").fetchall()
    assert stored == ([] if not history else [(largest(history),)])
    conn.close()


@settings(max_examples=100, deadline=None)
@given(accesses=accesses)
def test_sqlite_fenced_update_with_a_text_token_column_follows_the_model(
    accesses: list[Access],
) -> None:
    """fenced_update on a TEXT token column with a lease-key column: what it accepts is what the
    model accepts for bare ints and leases alike (no fingerprints: every lease is owner 0), so
    numbers compare as numbers (10 after 9, 2**53 + 1 after 2**53) and keys are kept apart."""
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT, fencing_token TEXT, lk TEXT)")
    conn.execute("INSERT INTO t (id) VALUES (1)")
    same_owner = [
        (tok, None if who is None else 0, strict, key) for tok, who, strict, key in accesses
    ]
    history = check_against_model(
        lambda token_or_lease, strict: db.fenced_update(
            conn, "t", {"v": "x"}, {"id": 1}, token_or_lease, strict=strict, lease_key_column="lk"
        ),
        same_owner,
    )
    stored = conn.execute("SELECT CAST(fencing_token AS INTEGER) FROM t").fetchone()
    assert stored == (largest(history),)
    conn.close()


# --- two processes on one file --------------------------------------------------------------------

PROCESSES = 2
PER_PROCESS = 150


def _writer(path: str, index: int, barrier: object, results: object) -> None:
    """One process: present tokens index+1, index+1+P, ... each in its own transaction. A barrier
    starts every round in both processes at once, so the two race for each pair of tokens."""
    conn = sqlite3.connect(path, timeout=60)
    accepted: list[int] = []
    refused: list[tuple[int, int | None]] = []
    for n in range(PER_PROCESS):
        barrier.wait()  # type: ignore[attr-defined]
        token = n * PROCESSES + index + 1
        try:
            db.fence_guard(conn, "ledger", token)
            conn.execute("INSERT INTO log (token, writer) VALUES (?, ?)", (token, index))
            conn.execute("UPDATE counter SET n = n + 1 WHERE id = 1")
            db.fenced_update(conn, "counter", {"last_writer": index}, {"id": 1}, token)
            conn.commit()
            accepted.append(token)
        except StaleTokenError as exc:
            conn.rollback()
            refused.append((token, exc.last_token))
    conn.close()
    results.put((index, accepted, refused))  # type: ignore[attr-defined]


def test_two_processes_interleaved_tokens(tmp_path: Path) -> None:
    """Two processes on one SQLite file, interleaved tokens: the stored token never decreases,
    every refusal names a larger accepted token, and no accepted write is lost."""
    path = tmp_path / "shared.db"
    conn = connect(path)
    db.create_guard_table(conn)
    conn.execute("CREATE TABLE log (seq INTEGER PRIMARY KEY AUTOINCREMENT, token INT, writer INT)")
    conn.execute(
        "CREATE TABLE counter "
        "(id INTEGER PRIMARY KEY, n INT, last_writer INT, fencing_token BIGINT)"
    )
    conn.execute("INSERT INTO counter (id, n) VALUES (1, 0)")
    conn.commit()

    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(PROCESSES)
    results = ctx.Queue()
    procs = [
        ctx.Process(target=_writer, args=(str(path), i, barrier, results)) for i in range(PROCESSES)
    ]
    for proc in procs:
        proc.start()
    outcomes = [results.get(timeout=120) for _ in procs]
    for proc in procs:
        proc.join(60)
        assert proc.exitcode == 0

    by_writer = {index: acc for index, acc, _ in outcomes}
    # In each round the second process holds the larger token, so it is never refused.
    assert by_writer[PROCESSES - 1] == [n * PROCESSES + PROCESSES for n in range(PER_PROCESS)]
    accepted = sorted(t for _, acc, _ in outcomes for t in acc)
    refused = [r for _, _, ref in outcomes for r in ref]
    assert len(accepted) + len(refused) == PROCESSES * PER_PROCESS
    logged = [t for (t,) in conn.execute("SELECT token FROM log ORDER BY seq")]
    assert logged == sorted(logged)  # in commit order, tokens only ever grew
    assert len(set(logged)) == len(logged)
    assert sorted(logged) == accepted  # every accepted write is there, nothing else
    assert conn.execute("SELECT n, fencing_token FROM counter").fetchone() == (
        len(accepted),
        accepted[-1],
    )
    assert conn.execute("SELECT fencing_token FROM fencedlease_guard").fetchone() == (
        PROCESSES * PER_PROCESS,
    )
    for token, last in refused:
        assert last is not None
        assert last > token
        assert last in accepted
