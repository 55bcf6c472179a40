"""fencedlease.db on real SQLite files: guards, fenced updates and reads, two processes."""

from __future__ import annotations

import multiprocessing
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from test_fencing_model import Access, accesses, attempt, lease, model_accepts, present

from fencedlease import BackendError, FencedLeaseError, StaleTokenError, ValidationError, db


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
    """For any sequence of accesses (strict chosen per access), the guard accepts what the model
    accepts, and its row always holds the largest accepted token."""
    conn = sqlite3.connect(":memory:")
    db.create_guard_table(conn)
    history: list[tuple[int, int | None]] = []
    for token, who, strict in accesses:
        got, last = attempt(db.fence_guard, conn, "r", present(who, token), strict=strict)
        assert got == model_accepts(history, token, who, strict), (history, token, who, strict)
        if got:
            history.append((token, who))
        else:
            assert last == max(t for t, _ in history)
    stored = conn.execute("SELECT fencing_token FROM fencedlease_guard").fetchall()
    assert stored == ([(max(t for t, _ in history),)] if history else [])
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
