"""Odd values thrown at the fencing API: only the library's own errors may come out.

Hypothesis draws arguments of every shape (None, bools, ints past 64 bits, NaN, lone surrogates,
bytes, containers, leases whose attributes are any of these, non-connections) for
:class:`FencedResource`, :func:`coerce_access` and the :mod:`fencedlease.db` functions on a real
SQLite database; each call either returns or raises a :class:`FencedLeaseError`. A ``TypeError``,
``AttributeError``, ``OverflowError`` or ``UnicodeEncodeError`` escaping is a failure. The same for
``RedisFencedResource`` is in ``tests/live/test_redis_fencing.py``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_fencing_model import OWNERS, FakeLease

from fencedlease import FencedLeaseError, FencedResource, ValidationError, db
from fencedlease._core.fencing import MAX_FENCING_TOKEN
from fencedlease._core.fencing_access import coerce_access

surrogates = st.text(st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), min_size=1)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.sampled_from([0, -1, 1, 2**53, 2**53 + 1, MAX_FENCING_TOKEN, MAX_FENCING_TOKEN + 1, 2**64]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    surrogates,
    st.binary(max_size=8),
    st.just(object()),
)
containers = st.one_of(
    st.lists(scalars, max_size=3),
    st.tuples(scalars),
    st.dictionaries(st.one_of(st.text(max_size=6), surrogates, st.integers()), scalars, max_size=3),
)
odd_leases = st.builds(
    FakeLease,
    key=st.one_of(scalars, st.sampled_from(["orders", "order:42"])),
    owner_token=st.one_of(scalars, st.just(OWNERS[0])),
    fencing_token=st.one_of(scalars, st.integers(1, MAX_FENCING_TOKEN)),
)
odd = st.one_of(scalars, containers, odd_leases)
tokens = st.one_of(odd, odd_leases, st.integers(1, MAX_FENCING_TOKEN))
names = st.one_of(odd, st.sampled_from(["orders", "order:42", "t", "main.t", "fencing_token"]))
rows = st.one_of(
    odd,
    st.dictionaries(
        st.one_of(st.sampled_from(["id", "v", "fencing_token", "x; --"]), st.text(max_size=4)),
        scalars,
        max_size=3,
    ),
)


def only_library_errors(call: Callable[[], object]) -> FencedLeaseError | None:
    """Run ``call``: a return (``None``) or a :class:`FencedLeaseError` (returned) is fine,
    anything else propagates and fails the test."""
    try:
        call()
    except FencedLeaseError as exc:
        return exc
    return None


@settings(max_examples=400, deadline=None)
@given(name=names, strict=odd, token=tokens)
def test_fenced_resource_and_coerce_access(name: Any, strict: Any, token: Any) -> None:
    """FencedResource(name, strict=...).accept(token) and coerce_access(token): a result or a
    library error; a ValidationError names one of the arguments."""
    made: list[FencedResource] = []
    error = only_library_errors(lambda: made.append(FencedResource(name, strict=strict)))
    if error is not None:
        assert isinstance(error, ValidationError)
        assert error.argument in ("name", "strict")
        return
    res = made[0]
    error = only_library_errors(lambda: res.accept(token))
    if error is None:
        assert res.last_token == coerce_access(token).token
    else:
        assert isinstance(error, ValidationError)
        assert error.argument == "token_or_lease"
        assert res.last_token is None
    error = only_library_errors(lambda: coerce_access(token, argument="lease"))
    assert error is None or (isinstance(error, ValidationError) and error.argument == "lease")


@pytest.fixture(scope="module")
def sqlite_conn() -> Iterator[sqlite3.Connection]:
    conn = sqlite3.connect(":memory:")
    db.create_guard_table(conn)
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT, fencing_token TEXT, lk TEXT)")
    conn.execute("INSERT INTO t (id) VALUES (1)")
    yield conn
    conn.close()


@pytest.fixture(scope="module")
def sa_conn() -> Iterator[sa.Connection]:
    engine = sa.create_engine("sqlite://")
    with engine.connect() as conn:
        conn.exec_driver_sql("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT, fencing_token TEXT)")
        conn.exec_driver_sql("INSERT INTO t (id) VALUES (1)")
        yield conn
    engine.dispose()


@settings(
    max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    which=st.sampled_from(["sqlite", "sqlalchemy", "odd"]),
    odd_conn=odd,
    table=names,
    values=rows,
    where=rows,
    token=tokens,
    columns=st.one_of(st.none(), odd, st.lists(names, max_size=3)),
    token_column=st.one_of(names, st.just("fencing_token")),
    lease_key_column=st.one_of(st.none(), names, st.just("lk")),
    strict=st.one_of(st.booleans(), odd),
    resource=names,
)
def test_db_functions(
    sqlite_conn: sqlite3.Connection,
    sa_conn: sa.Connection,
    which: str,
    odd_conn: Any,
    table: Any,
    values: Any,
    where: Any,
    token: Any,
    columns: Any,
    token_column: Any,
    lease_key_column: Any,
    strict: Any,
    resource: Any,
) -> None:
    """Every fencedlease.db function, on a real SQLite connection (sqlite3 or SQLAlchemy) or on
    an odd object, with odd arguments: a result or a library error, never another exception."""
    conn: Any = {"sqlite": sqlite_conn, "sqlalchemy": sa_conn, "odd": odd_conn}[which]
    only_library_errors(
        lambda: db.fenced_update(
            conn,
            table,
            values,
            where,
            token,
            token_column=token_column,
            lease_key_column=lease_key_column,
            strict=strict,
        )
    )
    only_library_errors(
        lambda: db.fenced_read(
            conn,
            table,
            where,
            token,
            columns=columns,
            token_column=token_column,
            lease_key_column=lease_key_column,
            strict=strict,
        )
    )
    only_library_errors(lambda: db.fence_guard(conn, resource, token, strict=strict))
    only_library_errors(lambda: db.fence_guard(conn, resource, token, table=table))
    only_library_errors(lambda: db.create_guard_table(conn, table=table))
    if which == "sqlite":
        sqlite_conn.rollback()
    elif which == "sqlalchemy":
        sa_conn.rollback()


@pytest.mark.parametrize(
    ("value", "cause"),
    [(2**70, OverflowError), ("\ud800", UnicodeEncodeError)],
    ids=["int-past-64-bits", "lone-surrogate"],
)
def test_value_sqlite3_cannot_bind_is_a_backend_error(
    sqlite_conn: sqlite3.Connection, value: object, cause: type[BaseException]
) -> None:
    """A value sqlite3 cannot bind (an int past 64 bits, a lone surrogate) is a BackendError with
    sqlite3's exception in __cause__, not that exception escaping."""
    from fencedlease import BackendError

    with pytest.raises(BackendError) as info:
        db.fenced_update(sqlite_conn, "t", {"v": value}, {"id": 1}, 5)
    assert isinstance(info.value.__cause__, cause)
    sqlite_conn.rollback()
