"""The SQL fencedlease.db sends, per DB-API paramstyle: names quoted, values bound."""

from __future__ import annotations

import sys
import types
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from test_fencing_model import OWNERS, lease

from fencedlease import StaleTokenError, ValidationError, db
from fencedlease._core.fencing_access import owner_fingerprint


class FakeCursor:
    def __init__(self, log: list[tuple[str, Any]], rowcount: int) -> None:
        self.log = log
        self.rowcount = rowcount
        self.description = None

    def execute(self, sql: str, params: Any) -> None:
        self.log.append((sql, params))

    def fetchall(self) -> list[Any]:
        return []

    def close(self) -> None:
        pass


def fake_connection(paramstyle: str) -> tuple[Any, list[tuple[str, Any]]]:
    """A connection object from a fake DB-API module declaring ``paramstyle``."""
    module = types.ModuleType(f"fakedb_{paramstyle}")
    module.paramstyle = paramstyle  # type: ignore[attr-defined]
    module.Error = RuntimeError  # type: ignore[attr-defined]
    sys.modules[module.__name__] = module
    log: list[tuple[str, Any]] = []

    class Connection:
        def cursor(self) -> FakeCursor:
            return FakeCursor(log, rowcount=1)

    Connection.__module__ = module.__name__
    return Connection(), log


UPDATE = (
    'UPDATE "shop"."orders" SET "status" = {0}, "fencing_token" = {1} '
    'WHERE "id" = {2} AND "note" IS NULL '
    'AND ("fencing_token" IS NULL OR CAST("fencing_token" AS BIGINT) <= {3})'
)


@pytest.mark.parametrize(
    ("style", "placeholders", "params"),
    [
        ("qmark", ("?",) * 4, ["shipped", 34, 42, 34]),
        ("format", ("%s",) * 4, ["shipped", 34, 42, 34]),
        ("numeric", (":1", ":2", ":3", ":4"), ["shipped", 34, 42, 34]),
        (
            "pyformat",
            ("%(p0)s", "%(p1)s", "%(p2)s", "%(p3)s"),
            {"p0": "shipped", "p1": 34, "p2": 42, "p3": 34},
        ),
        (
            "named",
            (":p0", ":p1", ":p2", ":p3"),
            {"p0": "shipped", "p1": 34, "p2": 42, "p3": 34},
        ),
    ],
)
def test_fenced_update_sql_per_paramstyle(
    style: str, placeholders: tuple[str, ...], params: object
) -> None:
    """One UPDATE, quoted names, every value a parameter in the driver's own style."""
    conn, log = fake_connection(style)
    updated = db.fenced_update(
        conn, "shop.orders", {"status": "shipped"}, {"id": 42, "note": None}, 34
    )
    assert updated == 1
    assert log == [(UPDATE.format(*placeholders), params)]


def test_strict_update_uses_less_than() -> None:
    """strict=True compares with < instead of <=."""
    conn, log = fake_connection("qmark")
    db.fenced_update(conn, "orders", {"a": 1}, {"id": 1}, 5, strict=True)
    assert log[0][0].endswith('("fencing_token" IS NULL OR CAST("fencing_token" AS BIGINT) < ?)')


def test_lease_key_column_adds_a_condition_and_sets_the_key() -> None:
    """lease_key_column: the lease's key is bound twice (set, and compared); a bare int adds
    neither."""
    conn, log = fake_connection("qmark")
    db.fenced_update(conn, "orders", {"a": 1}, {"id": 1}, lease(2**53 + 1), lease_key_column="lk")
    db.fenced_update(conn, "orders", {"a": 1}, {"id": 1}, 7, lease_key_column="lk")
    assert log[0] == (
        'UPDATE "orders" SET "a" = ?, "fencing_token" = ?, "lk" = ? WHERE "id" = ? AND '
        '("fencing_token" IS NULL OR CAST("fencing_token" AS BIGINT) <= ?) '
        'AND ("lk" IS NULL OR "lk" = ?)',
        [1, 2**53 + 1, "orders", 1, 2**53 + 1, "orders"],
    )
    assert log[1] == (
        'UPDATE "orders" SET "a" = ?, "fencing_token" = ? WHERE "id" = ? AND '
        '("fencing_token" IS NULL OR CAST("fencing_token" AS BIGINT) <= ?)',
        [1, 7, 1, 7],
    )


def test_guard_sql_binds_resource_token_fingerprint_and_key() -> None:
    """The guard's upsert binds resource, token (an int), fingerprint and lease key (None for an
    int), nothing else, and compares tokens as BIGINT."""
    conn, log = fake_connection("format")
    with pytest.raises(StaleTokenError):  # the fake returns no rows: read as a refusal
        db.fence_guard(conn, "orders; --", 34)
    with pytest.raises(StaleTokenError):
        db.fence_guard(conn, "r", lease(2**63 - 1, key="order:42"))
    sql, params = log[0]
    assert sql.startswith(
        'INSERT INTO "fencedlease_guard" AS g '
        "(resource, fencing_token, owner_fingerprint, lease_key) "
        "VALUES (%s, %s, %s, %s) ON CONFLICT (resource) DO UPDATE"
    )
    assert "CAST(excluded.fencing_token AS BIGINT) > CAST(g.fencing_token AS BIGINT)" in sql
    assert "g.lease_key = excluded.lease_key" in sql
    assert sql.endswith(" RETURNING fencing_token")
    assert params == ["orders; --", 34, None, None]
    assert log[2][1] == ["r", 2**63 - 1, owner_fingerprint(OWNERS[0]), "order:42"]


def test_unknown_connection_is_a_validation_error() -> None:
    """An object from a module without a DB-API paramstyle is refused, naming "conn"."""
    with pytest.raises(ValidationError) as info:
        db.fenced_update(object(), "orders", {"a": 1}, {"id": 1}, 5)
    assert info.value.argument == "conn"


def test_object_without_cursor_is_a_validation_error() -> None:
    """A DB-API module's object that is not a connection (no cursor()) is refused naming conn."""
    _, log = fake_connection("qmark")

    class Cursorless:
        pass

    Cursorless.__module__ = "fakedb_qmark"
    not_a_connection = Cursorless()
    with pytest.raises(ValidationError) as info:
        db.fence_guard(not_a_connection, "r", 1)
    assert info.value.argument == "conn"
    assert log == []


def every_db_call(conn: Any) -> list[Callable[[], object]]:
    """One call of each fencedlease.db function on ``conn``, with good other arguments."""
    return [
        lambda: db.fence_guard(conn, "r", 1),
        lambda: db.create_guard_table(conn),
        lambda: db.fenced_update(conn, "t", {"a": 1}, {"id": 1}, 1),
        lambda: db.fenced_read(conn, "t", {"id": 1}, 1),
    ]


def test_sqlalchemy_engine_is_a_validation_error(tmp_path: Path) -> None:
    """An Engine (not a Connection) is refused naming conn, before any connection is made."""
    path = tmp_path / "never.db"
    engine = sa.create_engine(f"sqlite:///{path}")
    try:
        for call in every_db_call(engine):
            with pytest.raises(ValidationError) as info:
                call()
            assert info.value.argument == "conn"
            assert "Engine" in str(info.value)
        assert not path.exists()  # SQLite creates the file on the first connection
    finally:
        engine.dispose()


def test_sqlalchemy_asyncio_connection_and_session_are_validation_errors() -> None:
    """SQLAlchemy's AsyncConnection and AsyncSession are refused naming conn (use run_sync), and
    no coroutine is left un-awaited (warnings are errors here)."""
    pytest.importorskip("greenlet", reason="SQLAlchemy's asyncio extension needs greenlet")
    from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

    engine = create_async_engine("postgresql+psycopg://nobody@127.0.0.1:1/none")  # no I/O
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for odd in (engine.connect(), AsyncSession(engine)):
            for call in every_db_call(odd):
                with pytest.raises(ValidationError) as info:
                    call()
                assert info.value.argument == "conn"
                assert "asyncio" in str(info.value)
                assert "run_sync" in str(info.value)
