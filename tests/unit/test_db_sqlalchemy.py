"""fencedlease.db through SQLAlchemy (text() with named binds), on a SQLite file."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session
from test_fencing_model import lease

from fencedlease import BackendError, LeaseKeyMismatchError, StaleTokenError, ValidationError, db


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[sa.Engine]:
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'sa.db'}")
    with engine.begin() as conn:
        db.create_guard_table(conn)
        conn.exec_driver_sql(
            "CREATE TABLE orders (id INTEGER PRIMARY KEY, status TEXT, fencing_token BIGINT)"
        )
        conn.exec_driver_sql("INSERT INTO orders (id, status) VALUES (42, 'new')")
    yield engine
    engine.dispose()


def test_fencing_cases_through_a_connection(engine: sa.Engine) -> None:
    """34 then 33 refused (last_token 34); same lease again accepted, strict refused; a second
    lease with 34 refused."""
    with engine.begin() as conn:
        assert db.fence_guard(conn, "orders", lease(34)) == 34
        with pytest.raises(StaleTokenError) as info:
            db.fence_guard(conn, "orders", 33)
        assert info.value.last_token == 34
        assert db.fence_guard(conn, "orders", lease(34)) == 34
        with pytest.raises(StaleTokenError):
            db.fence_guard(conn, "orders", lease(34), strict=True)
        with pytest.raises(StaleTokenError, match="different lease"):
            db.fence_guard(conn, "orders", lease(34, owner=1))


def test_update_and_read_through_a_connection(engine: sa.Engine) -> None:
    """NULL token accepted and stored; a fenced read moves the token; stale writes are refused."""
    with engine.begin() as conn:
        assert db.fenced_update(conn, "orders", {"status": "paid"}, {"id": 42}, 34) == 1
        assert db.fenced_read(conn, "orders", {"id": 42}, 35) == [
            {"id": 42, "status": "paid", "fencing_token": 35}
        ]
        with pytest.raises(StaleTokenError) as info:
            db.fenced_update(conn, "orders", {"status": "lost"}, {"id": 42}, 34)
        assert info.value.last_token == 35
        with pytest.raises(db.RowNotFoundError):
            db.fenced_update(conn, "orders", {"status": "x"}, {"id": 1}, 35)
    with engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT status, fencing_token FROM orders").all() == [
            ("paid", 35)
        ]


def test_refusal_rolls_back_the_callers_transaction(engine: sa.Engine) -> None:
    """StaleTokenError raised inside engine.begin() rolls back the work done before it."""
    with engine.begin() as conn:
        db.fence_guard(conn, "orders", 34)
    with pytest.raises(StaleTokenError), engine.begin() as conn:
        conn.exec_driver_sql("UPDATE orders SET status = 'stale'")
        db.fence_guard(conn, "orders", 33)
    with engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT status FROM orders").scalar() == "new"


def test_works_through_an_orm_session(engine: sa.Engine) -> None:
    """A Session is accepted like a Connection."""
    with Session(engine) as session, session.begin():
        assert db.fenced_update(session, "orders", {"status": "s"}, {"id": 42}, 7) == 1
        assert db.fence_guard(session, "orders", 7) == 7
    with engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT status, fencing_token FROM orders").one() == ("s", 7)


def test_injected_names_are_refused_and_nothing_runs(engine: sa.Engine) -> None:
    """`orders; DROP TABLE x` as a table: ValidationError naming "table", no statement sent."""
    sent: list[str] = []
    sa.event.listen(engine, "before_cursor_execute", lambda *args: sent.append(args[2]))
    with engine.begin() as conn:
        with pytest.raises(ValidationError) as info:
            db.fenced_update(conn, "orders; DROP TABLE x", {"status": "s"}, {"id": 42}, 7)
        assert info.value.argument == "table"
        with pytest.raises(ValidationError) as info:
            db.fence_guard(conn, "orders", 7, table="g; DROP TABLE x")
        assert info.value.argument == "table"
    assert [s for s in sent if "orders" in s or "DROP" in s] == []


def test_driver_errors_become_backend_errors(engine: sa.Engine) -> None:
    """A missing table reaches the caller as BackendError caused by SQLAlchemy's error."""
    with engine.begin() as conn, pytest.raises(BackendError) as info:
        db.fenced_update(conn, "nowhere", {"a": 1}, {"id": 1}, 1)
    assert isinstance(info.value.__cause__, sa.exc.OperationalError)


@pytest.mark.parametrize("declared", ["TEXT", "", "INTEGER"])
def test_token_column_compares_numerically_through_sqlalchemy(
    engine: sa.Engine, declared: str
) -> None:
    """TEXT, untyped and INTEGER token columns: 10 then 9 refused; 2**53 + 1 then 2**53 refused;
    2**63 - 1 accepted and kept exactly."""
    with engine.begin() as conn:
        conn.exec_driver_sql(
            f"CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT, fencing_token {declared})"
        )
        conn.exec_driver_sql("INSERT INTO t (id) VALUES (1)")
        assert db.fenced_update(conn, "t", {"v": "10"}, {"id": 1}, 10) == 1
        with pytest.raises(StaleTokenError) as info:
            db.fenced_update(conn, "t", {"v": "9"}, {"id": 1}, 9)
        assert info.value.last_token == 10
        db.fenced_update(conn, "t", {"v": "big"}, {"id": 1}, 2**53 + 1)
        with pytest.raises(StaleTokenError) as info:
            db.fenced_read(conn, "t", {"id": 1}, 2**53)
        assert info.value.last_token == 2**53 + 1
        assert db.fenced_read(conn, "t", {"id": 1}, 2**63 - 1, columns=["v"]) == [{"v": "big"}]
        assert conn.exec_driver_sql("SELECT CAST(fencing_token AS INTEGER) FROM t").scalar() == (
            2**63 - 1
        )


def test_guard_lease_key_through_a_session(engine: sa.Engine) -> None:
    """Through a Session: the guard records the lease key and refuses another key; a guard
    table of another shape is refused by create_guard_table."""
    with Session(engine) as session, session.begin():
        db.fence_guard(session, "order:42", lease(2**53 + 1, key="order:42"))
        with pytest.raises(LeaseKeyMismatchError) as info:
            db.fence_guard(session, "order:42", lease(2**53 + 2, key="orders"))
        assert (info.value.lease_key, info.value.presented_key) == ("order:42", "orders")
        with pytest.raises(StaleTokenError):
            db.fence_guard(session, "order:42", 2**53)
        session.execute(sa.text("CREATE TABLE bad_guard (resource TEXT, fencing_token TEXT)"))
        with pytest.raises(ValidationError, match="'bad_guard'") as verr:
            db.create_guard_table(session, table="bad_guard")
        assert verr.value.argument == "table"
