"""The SQL fencedlease.db sends, per DB-API paramstyle: names quoted, values bound."""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest

from fencedlease import StaleTokenError, ValidationError, db


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
    'WHERE "id" = {2} AND "note" IS NULL AND ("fencing_token" IS NULL OR "fencing_token" <= {3})'
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
    assert log[0][0].endswith('("fencing_token" IS NULL OR "fencing_token" < ?)')


def test_guard_sql_binds_resource_token_and_fingerprint() -> None:
    """The guard's upsert binds resource, token and fingerprint (None for an int), nothing else."""
    conn, log = fake_connection("format")
    with pytest.raises(StaleTokenError):  # the fake returns no rows: read as a refusal
        db.fence_guard(conn, "orders; --", 34)
    sql, params = log[0]
    assert sql.startswith(
        'INSERT INTO "fencedlease_guard" AS g (resource, fencing_token, owner_fingerprint) '
        "VALUES (%s, %s, %s) ON CONFLICT (resource) DO UPDATE"
    )
    assert sql.endswith(" RETURNING fencing_token")
    assert params == ["orders; --", 34, None]


def test_unknown_connection_is_a_validation_error() -> None:
    """An object from a module without a DB-API paramstyle is refused, naming "conn"."""
    with pytest.raises(ValidationError) as info:
        db.fenced_update(object(), "orders", {"a": 1}, {"id": 1}, 5)
    assert info.value.argument == "conn"
