"""fencedlease.db on a real PostgreSQL: psycopg 3 and SQLAlchemy, concurrent writers."""

from __future__ import annotations

import asyncio
import sys
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from pg_fixtures import postgres_dsn  # noqa: F401 (the fixture)

from fencedlease import BackendError, LeaseKeyMismatchError, StaleTokenError, ValidationError, db
from fencedlease._core.fencing import MAX_FENCING_TOKEN

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))
from test_fencing_model import OWNERS, Access, accesses, check_against_model, lease
from test_fencing_scope import (
    INITIAL,
    Step,
    check_against_rule,
    check_counters_kept_apart,
    check_migration,
    grants_of,
    steps_strategy,
)

pytestmark = pytest.mark.live


class Store:
    """One test's own schema: a guard table and ``orders`` (row 42 with a NULL token)."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.schema = f"t_{uuid.uuid4().hex[:12]}"
        self.guard = f"{self.schema}.guard"
        self.orders = f"{self.schema}.orders"
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA {self.schema}")
            db.create_guard_table(conn, table=self.guard)
            conn.execute(
                f"CREATE TABLE {self.orders} (id INT PRIMARY KEY, status TEXT, balance INT, "
                "fencing_token BIGINT)"
            )
            conn.execute(f"INSERT INTO {self.orders} (id, status, balance) VALUES (42, 'new', 10)")

    def connect(self, *, autocommit: bool = False) -> psycopg.Connection:
        return psycopg.connect(self.dsn, autocommit=autocommit)

    def order(self) -> tuple[object, ...] | None:
        with self.connect() as conn:
            return conn.execute(
                f"SELECT status, balance, fencing_token FROM {self.orders} WHERE id = 42"
            ).fetchone()

    def drop(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {self.schema} CASCADE")


@pytest.fixture
def store(postgres_dsn: str) -> Iterator[Store]:  # noqa: F811
    s = Store(postgres_dsn)
    yield s
    s.drop()


# --- the fencing cases -------------------------------------------------------------------------


def test_guard_fencing_cases(store: Store) -> None:
    """34 then 33 (last_token 34); the same lease twice; strict; a second lease with 34."""
    with store.connect(autocommit=True) as conn:
        assert db.fence_guard(conn, "orders", lease(34), table=store.guard) == 34
        with pytest.raises(StaleTokenError) as info:
            db.fence_guard(conn, "orders", 33, table=store.guard)
        assert (info.value.token, info.value.last_token) == (33, 34)
        assert db.fence_guard(conn, "orders", lease(34), table=store.guard) == 34
        with pytest.raises(StaleTokenError, match="fences strictly"):
            db.fence_guard(conn, "orders", lease(34), strict=True, table=store.guard)
        with pytest.raises(StaleTokenError, match="different lease") as info:
            db.fence_guard(conn, "orders", lease(34, owner=1), table=store.guard)
        assert info.value.last_token == 34


def test_refused_guard_rolls_back_the_transaction(store: Store) -> None:
    """Work done before a refused guard is rolled back with the caller's transaction."""
    with store.connect() as conn:
        db.fence_guard(conn, "orders", 34, table=store.guard)
        conn.commit()
        with pytest.raises(StaleTokenError), conn.transaction():
            conn.execute(f"UPDATE {store.orders} SET status = 'stale'")
            db.fence_guard(conn, "orders", 33, table=store.guard)
    assert store.order() == ("new", 10, None)


def test_update_on_null_token_then_stale(store: Store) -> None:
    """NULL token column: accepted, now holds 34; then 33 refused with last_token 34."""
    with store.connect(autocommit=True) as conn:
        assert db.fenced_update(conn, store.orders, {"status": "paid"}, {"id": 42}, 34) == 1
        assert store.order() == ("paid", 10, 34)
        with pytest.raises(StaleTokenError) as info:
            db.fenced_update(conn, store.orders, {"status": "lost"}, {"id": 42}, 33)
        assert info.value.last_token == 34
        with pytest.raises(db.RowNotFoundError):
            db.fenced_update(conn, store.orders, {"status": "x"}, {"id": 7}, 35)
        assert db.fenced_read(conn, store.orders, {"id": 42}, 35, columns=["status"]) == [
            {"status": "paid"}
        ]
    assert store.order() == ("paid", 10, 35)


def test_injected_table_name_is_refused_and_nothing_runs(store: Store) -> None:
    """`orders; DROP TABLE x`: ValidationError naming "table"; x survives, no statement failed."""
    with store.connect() as conn:
        conn.execute(f"CREATE TABLE {store.schema}.x (id INT)")
        with pytest.raises(ValidationError) as info:
            db.fenced_update(conn, "orders; DROP TABLE x", {"status": "s"}, {"id": 42}, 1)
        assert info.value.argument == "table"
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS  # no error
        assert conn.execute(f"SELECT count(*) FROM {store.schema}.x").fetchone() == (0,)


# --- the lost update -----------------------------------------------------------------------------


def test_lost_update_with_write_only_fencing(store: Store) -> None:
    """The stale holder (33) writes between the new holder's (34) plain read and its write: both
    writes are accepted and the stale one is silently overwritten."""
    with store.connect(autocommit=True) as conn:
        db.fenced_update(conn, store.orders, {"balance": 10}, {"id": 42}, 33)
        read = conn.execute(f"SELECT balance FROM {store.orders} WHERE id = 42").fetchone()
        assert read is not None
        balance = read[0]
        db.fenced_update(conn, store.orders, {"balance": 15}, {"id": 42}, 33)  # stale +5, accepted
        db.fenced_update(conn, store.orders, {"balance": balance + 1}, {"id": 42}, 34)
    assert store.order() == ("new", 11, 34)  # the +5 is lost


def wait_until_blocked(observer: psycopg.Connection, pid: int) -> None:
    """Return once backend ``pid`` waits on a lock (a condition polled, with a deadline)."""
    give_up = time.monotonic() + 30
    while time.monotonic() < give_up:
        row = observer.execute(
            "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", (pid,)
        ).fetchone()
        if row and row[0] == "Lock":
            return
    raise AssertionError(f"backend {pid} never waited on a lock")


def test_fenced_read_prevents_the_lost_update(store: Store) -> None:
    """The new holder reads with fenced_read inside its transaction; the stale holder's write
    waits for it and is then refused, so no accepted write is lost."""
    with store.connect(autocommit=True) as setup:
        db.fenced_update(setup, store.orders, {"balance": 10}, {"id": 42}, 33)
    fresh = store.connect()
    stale = store.connect(autocommit=True)
    observer = store.connect(autocommit=True)
    outcome: list[BaseException | int] = []

    def stale_write() -> None:
        try:
            outcome.append(db.fenced_update(stale, store.orders, {"balance": 15}, {"id": 42}, 33))
        except BaseException as exc:
            outcome.append(exc)

    try:
        row = db.fenced_read(fresh, store.orders, {"id": 42}, 34, columns=["balance"])
        writer = threading.Thread(target=stale_write)
        writer.start()
        wait_until_blocked(observer, stale.info.backend_pid)
        db.fenced_update(fresh, store.orders, {"balance": row[0]["balance"] + 1}, {"id": 42}, 34)
        fresh.commit()
        writer.join(30)
    finally:
        for conn in (fresh, stale, observer):
            conn.close()
    assert len(outcome) == 1
    assert isinstance(outcome[0], StaleTokenError)
    assert outcome[0].last_token == 34
    assert store.order() == ("new", 11, 34)


# --- concurrent writers --------------------------------------------------------------------------

WRITERS = 4
ROUNDS = 60


def test_concurrent_writers_interleaved_tokens(store: Store) -> None:
    """Four connections race each round for tokens r*4+1..r*4+4 (a barrier starts each round):
    the guard's token never decreases, the round's largest token always wins, every refusal names
    a larger accepted token, and no accepted write is lost."""
    with store.connect(autocommit=True) as conn:
        conn.execute(
            f"CREATE TABLE {store.schema}.log (seq BIGSERIAL PRIMARY KEY, token BIGINT, writer INT)"
        )
    barrier = threading.Barrier(WRITERS)
    done = threading.Event()
    accepted: list[list[int]] = [[] for _ in range(WRITERS)]
    refused: list[list[tuple[int, int | None]]] = [[] for _ in range(WRITERS)]
    errors: list[BaseException] = []
    observed: list[int] = []

    def writer(index: int) -> None:
        try:
            with store.connect() as conn:
                for n in range(ROUNDS):
                    barrier.wait(30)
                    token = n * WRITERS + index + 1
                    try:
                        with conn.transaction():
                            db.fence_guard(conn, "ledger", token, table=store.guard)
                            # Taken under the guard's row lock: seq order is commit order.
                            conn.execute(
                                f"INSERT INTO {store.schema}.log (token, writer) VALUES (%s, %s)",
                                (token, index),
                            )
                            conn.execute(
                                f"UPDATE {store.orders} SET balance = balance + 1 WHERE id = 42"
                            )
                            db.fenced_update(conn, store.orders, {"status": "w"}, {"id": 42}, token)
                        accepted[index].append(token)
                    except StaleTokenError as exc:
                        refused[index].append((token, exc.last_token))
        except BaseException as exc:
            errors.append(exc)
            barrier.abort()

    def monitor() -> None:
        with store.connect(autocommit=True) as conn:
            while not done.is_set():
                row = conn.execute(
                    f"SELECT fencing_token FROM {store.guard} WHERE resource = 'ledger'"
                ).fetchone()
                if row:
                    observed.append(row[0])

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(WRITERS)]
    watcher = threading.Thread(target=monitor)
    watcher.start()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    done.set()
    watcher.join(30)

    assert errors == []
    assert accepted[WRITERS - 1] == [n * WRITERS + WRITERS for n in range(ROUNDS)]
    every = sorted(t for row in accepted for t in row)
    assert len(every) + sum(map(len, refused)) == WRITERS * ROUNDS
    assert observed == sorted(observed)  # the stored token never went down
    with store.connect() as conn:
        logged = [t for (t,) in conn.execute(f"SELECT token FROM {store.schema}.log ORDER BY seq")]
        guard = conn.execute(f"SELECT fencing_token FROM {store.guard}").fetchone()
    assert logged == every  # in commit order, increasing; every accepted write is there
    assert guard == (WRITERS * ROUNDS,)
    assert store.order() == ("w", 10 + len(every), WRITERS * ROUNDS)
    for row in refused:
        for token, last in row:
            assert last is not None
            assert last > token
            assert last in every


# --- the guard against the sequential model ------------------------------------------------------


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(accesses=accesses)
def test_postgres_guard_accepts_what_the_model_accepts(
    store: Store, accesses: list[Access]
) -> None:
    """For any sequence of accesses (strict per access; tokens near 0, 2**53 and 2**63 - 1; leases
    of two keys), the guard accepts what the model does and refuses for its reason."""
    resource = uuid.uuid4().hex
    with store.connect(autocommit=True) as conn:
        check_against_model(
            lambda token_or_lease, strict: db.fence_guard(
                conn, resource, token_or_lease, strict=strict, table=store.guard
            ),
            accesses,
        )


# --- exact tokens, numeric comparisons whatever the column type ----------------------------------


def test_guard_tokens_near_2_53_and_at_2_63(store: Store) -> None:
    """The BIGINT guard tells 2**53 from 2**53 + 1 and keeps 2**63 - 1 exactly."""
    with store.connect(autocommit=True) as conn:
        assert db.fence_guard(conn, "r", lease(2**53 + 1), table=store.guard) == 2**53 + 1
        with pytest.raises(StaleTokenError) as info:
            db.fence_guard(conn, "r", lease(2**53), table=store.guard)
        assert info.value.last_token == 9_007_199_254_740_993
        assert db.fence_guard(conn, "r", MAX_FENCING_TOKEN, table=store.guard) == MAX_FENCING_TOKEN
        with pytest.raises(StaleTokenError) as info:
            db.fence_guard(conn, "r", MAX_FENCING_TOKEN - 1, table=store.guard)
        assert info.value.last_token == MAX_FENCING_TOKEN
        assert conn.execute(f"SELECT fencing_token FROM {store.guard}").fetchall() == [
            (9_223_372_036_854_775_807,)
        ]


@pytest.mark.parametrize("declared", ["TEXT", "BIGINT", "NUMERIC"])
def test_token_column_compares_numerically_psycopg(store: Store, declared: str) -> None:
    """TEXT, BIGINT and NUMERIC token columns through psycopg: 10 then 9 refused (a text compare
    would take '9' after '10'), 2**53 + 1 then 2**53 refused, 2**63 - 1 kept exactly."""
    table = f"{store.schema}.t"
    with store.connect(autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} (id INT PRIMARY KEY, v TEXT, fencing_token {declared})")
        conn.execute(f"INSERT INTO {table} (id) VALUES (1)")
        assert db.fenced_update(conn, table, {"v": "10"}, {"id": 1}, 10) == 1
        with pytest.raises(StaleTokenError) as info:
            db.fenced_update(conn, table, {"v": "9"}, {"id": 1}, 9)
        assert info.value.last_token == 10
        assert db.fenced_update(conn, table, {"v": "big"}, {"id": 1}, 2**53 + 1) == 1
        with pytest.raises(StaleTokenError) as info:
            db.fenced_read(conn, table, {"id": 1}, 2**53)
        assert info.value.last_token == 2**53 + 1
        assert db.fenced_read(conn, table, {"id": 1}, MAX_FENCING_TOKEN, columns=["v"]) == [
            {"v": "big"}
        ]
        with pytest.raises(StaleTokenError) as info:
            db.fenced_update(conn, table, {"v": "late"}, {"id": 1}, MAX_FENCING_TOKEN - 1)
        assert info.value.last_token == MAX_FENCING_TOKEN
        row = conn.execute(f"SELECT v, fencing_token::bigint FROM {table}").fetchone()
    assert row == ("big", MAX_FENCING_TOKEN)


@pytest.mark.parametrize("declared", ["TEXT", "BIGINT"])
def test_token_column_compares_numerically_sqlalchemy(store: Store, declared: str) -> None:
    """The same through SQLAlchemy on psycopg, with a lease-key column."""
    table = f"{store.schema}.t"
    engine = sa.create_engine(store.dsn.replace("postgresql://", "postgresql+psycopg://", 1))
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql(
                f"CREATE TABLE {table} (id INT PRIMARY KEY, v TEXT, fencing_token {declared}, "
                "lk TEXT)"
            )
            conn.exec_driver_sql(f"INSERT INTO {table} (id) VALUES (1)")
            assert (
                db.fenced_update(
                    conn, table, {"v": "10"}, {"id": 1}, lease(10), lease_key_column="lk"
                )
                == 1
            )
            with pytest.raises(StaleTokenError) as info:
                db.fenced_update(
                    conn, table, {"v": "9"}, {"id": 1}, lease(9), lease_key_column="lk"
                )
            assert info.value.last_token == 10
            db.fenced_update(
                conn, table, {"v": "big"}, {"id": 1}, lease(2**53 + 1), lease_key_column="lk"
            )
            with pytest.raises(StaleTokenError):
                db.fenced_update(
                    conn, table, {"v": "x"}, {"id": 1}, lease(2**53), lease_key_column="lk"
                )
            with pytest.raises(LeaseKeyMismatchError) as kinfo:
                db.fenced_read(
                    conn, table, {"id": 1}, lease(2**53 + 2, key="order:42"), lease_key_column="lk"
                )
            assert (kinfo.value.lease_key, kinfo.value.presented_key) == ("orders", "order:42")
            assert db.fenced_read(
                conn,
                table,
                {"id": 1},
                lease(MAX_FENCING_TOKEN),
                columns=["v", "lk"],
                lease_key_column="lk",
            ) == [{"v": "big", "lk": "orders"}]
            with pytest.raises(StaleTokenError):
                db.fenced_update(conn, table, {"v": "x"}, {"id": 1}, MAX_FENCING_TOKEN - 1)
            got = conn.exec_driver_sql(f"SELECT v, fencing_token::bigint FROM {table}").one()
        assert tuple(got) == ("big", MAX_FENCING_TOKEN)
    finally:
        engine.dispose()


# --- the guard table's shape and the lease key ---------------------------------------------------


@pytest.mark.parametrize(
    ("ddl", "problem"),
    [
        (
            "resource TEXT PRIMARY KEY, fencing_token TEXT, owner_fingerprint TEXT, lease_key TEXT",
            "column fencing_token is text, not a 64-bit integer",
        ),
        (
            "resource TEXT PRIMARY KEY, fencing_token INTEGER, owner_fingerprint TEXT",
            "column fencing_token is integer, not a 64-bit integer",
        ),
        (
            "resource TEXT, fencing_token BIGINT, owner_fingerprint TEXT",
            "column resource is not its primary key",
        ),
        ("resource TEXT PRIMARY KEY, fencing_token BIGINT", "it has no column owner_fingerprint"),
    ],
)
def test_guard_table_of_another_shape_is_refused(store: Store, ddl: str, problem: str) -> None:
    """create_guard_table inspects an existing PostgreSQL table: another shape is a
    ValidationError naming the table and the problem; the table is left as it was."""
    table = f"{store.schema}.my_guard"
    with store.connect(autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} ({ddl})")
        with pytest.raises(ValidationError) as info:
            db.create_guard_table(conn, table=table)
        assert info.value.argument == "table"
        assert repr(table) in str(info.value)
        assert problem in str(info.value)
        columns = conn.execute(
            "SELECT count(*) FROM information_schema.columns "
            "WHERE table_schema = %s AND table_name = 'my_guard'",
            (store.schema,),
        ).fetchone()
    assert columns == (ddl.count(",") + 1,)


def test_guard_table_of_the_earlier_shape_gains_lease_key(store: Store) -> None:
    """A guard table without lease_key gets the column (in the caller's transaction); its rows
    keep their tokens and record the next lease's key. A unique index on resource is enough."""
    table = f"{store.schema}.old_guard"
    with store.connect() as conn:
        conn.execute(
            f"CREATE TABLE {table} (id SERIAL PRIMARY KEY, resource TEXT NOT NULL, "
            "fencing_token BIGINT NOT NULL, owner_fingerprint TEXT)"
        )
        conn.execute(f"CREATE UNIQUE INDEX ON {table} (resource)")
        conn.execute(f"INSERT INTO {table} (resource, fencing_token) VALUES ('orders', 7)")
        conn.commit()
        with pytest.raises(BackendError, match="lease_key"):
            db.fence_guard(conn, "orders", lease(8), table=table)
        conn.rollback()
        db.create_guard_table(conn, table=table)
        db.create_guard_table(conn, table=table)
        conn.commit()
        with pytest.raises(StaleTokenError):
            db.fence_guard(conn, "orders", lease(6), table=table)
        conn.rollback()
        assert db.fence_guard(conn, "orders", lease(8, key="order:42"), table=table) == 8
        conn.commit()
        assert conn.execute(f"SELECT fencing_token, lease_key FROM {table}").fetchall() == [
            (8, "order:42")
        ]


def test_guard_records_the_lease_key(store: Store) -> None:
    """The guard row records the first lease's key and refuses a lease on another key with
    LeaseKeyMismatchError naming both (no owner token); the row is unchanged."""
    with store.connect(autocommit=True) as conn:
        db.fence_guard(conn, "order:42", lease(34, key="order:42"), table=store.guard)
        with pytest.raises(LeaseKeyMismatchError) as info:
            db.fence_guard(conn, "order:42", lease(50, owner=1, key="orders"), table=store.guard)
        assert (info.value.lease_key, info.value.presented_key, info.value.last_token) == (
            "order:42",
            "orders",
            34,
        )
        assert OWNERS[1] not in str(info.value)
        assert db.fence_guard(conn, "order:42", 35, table=store.guard) == 35
        assert conn.execute(
            f"SELECT fencing_token, lease_key FROM {store.guard} WHERE resource = 'order:42'"
        ).fetchone() == (35, "order:42")


@pytest.mark.parametrize("face", ["sync", "aio"])
@pytest.mark.parametrize("backend", ["memory", "sqlite"])
@pytest.mark.parametrize("how", ["fence_guard", "lease_key_column"])
def test_the_same_key_of_another_counter_is_refused(
    store: Store, how: str, backend: str, face: str, tmp_path: Path
) -> None:
    """The guard row and a row with ``lease_key_column`` record the scope of the counter that
    fences them: appB's lease of "orders" (another prefix, a larger token) is refused with
    LeaseKeyMismatchError naming both scopes, and appA's next holder is accepted."""
    g, _scope_a, _scope_b = grants_of(backend, face, tmp_path)
    with store.connect(autocommit=True) as conn:
        conn.execute(f"ALTER TABLE {store.orders} ADD COLUMN lease_key TEXT")
        check_counters_kept_apart(*pg_store(conn, store, how), g)


def pg_store(
    conn: psycopg.Connection, store: Store, how: str
) -> tuple[Callable[[Any], int], Callable[[], Any]]:
    if how == "fence_guard":

        def recorded() -> Any:
            row = conn.execute(
                f"SELECT lease_key FROM {store.guard} WHERE resource = 'orders-data'"
            ).fetchone()
            return None if row is None else row[0]

        return (
            lambda lease: db.fence_guard(conn, "orders-data", lease, table=store.guard)
        ), recorded

    def accept(lease: Any) -> int:
        updated = db.fenced_update(
            conn, store.orders, {"status": "x"}, {"id": 42}, lease, lease_key_column="lease_key"
        )
        assert updated == 1
        row = conn.execute(f"SELECT fencing_token FROM {store.orders} WHERE id = 42").fetchone()
        assert row is not None
        return int(row[0])

    def recorded_row() -> Any:
        row = conn.execute(f"SELECT lease_key FROM {store.orders} WHERE id = 42").fetchone()
        return None if row is None else row[0]

    return accept, recorded_row


@pytest.mark.parametrize("how", ["fence_guard", "lease_key_column"])
def test_a_bare_key_of_the_earlier_shape_migrates(store: Store, how: str) -> None:
    """A guard row or a row holding the bare key "orders" (written by an earlier version) is
    taken over by the first lease of that key, which records its scope; then appB's lease and an
    unscoped lease of that key are refused."""
    with store.connect(autocommit=True) as conn:
        conn.execute(f"ALTER TABLE {store.orders} ADD COLUMN lease_key TEXT")
        conn.execute(f"UPDATE {store.orders} SET fencing_token = 5, lease_key = 'orders'")
        conn.execute(
            f"INSERT INTO {store.guard} (resource, fencing_token, lease_key) "
            "VALUES ('orders-data', 5, 'orders')"
        )
        check_migration(*pg_store(conn, store, how))


@pytest.mark.parametrize("initial", INITIAL)
@pytest.mark.parametrize("how", ["fence_guard", "lease_key_column"])
@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(steps=steps_strategy)
def test_postgres_stores_follow_the_rule_across_counters(
    store: Store, how: str, initial: str | None, steps: list[Step]
) -> None:
    """The guard and ``lease_key_column`` against the rule, over leases of several counters and a
    record of either shape (the guard row, or row 42, holding it at token 5)."""
    with store.connect(autocommit=True) as conn:
        conn.execute(f"ALTER TABLE {store.orders} ADD COLUMN IF NOT EXISTS lease_key TEXT")
        conn.execute(f"DELETE FROM {store.guard}")
        conn.execute(
            f"UPDATE {store.orders} SET fencing_token = %s, lease_key = %s",
            (None if initial is None else 5, initial),
        )
        if initial is not None:
            conn.execute(
                f"INSERT INTO {store.guard} (resource, fencing_token, lease_key) "
                "VALUES ('orders-data', 5, %s)",
                (initial,),
            )
        check_against_rule(
            *pg_store(conn, store, how), initial, steps, fingerprints=how == "fence_guard"
        )


# --- asyncio connections are refused -------------------------------------------------------------


def test_psycopg_async_connection_is_a_validation_error(store: Store) -> None:
    """A real psycopg.AsyncConnection: every db function raises ValidationError naming conn,
    runs nothing, and leaves no coroutine un-awaited."""

    async def main() -> None:
        aconn = await psycopg.AsyncConnection.connect(store.dsn, autocommit=True)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                for call in (
                    lambda: db.fence_guard(aconn, "r", 1, table=store.guard),
                    lambda: db.create_guard_table(aconn, table=f"{store.schema}.never"),
                    lambda: db.fenced_update(aconn, store.orders, {"status": "x"}, {"id": 42}, 1),
                    lambda: db.fenced_read(aconn, store.orders, {"id": 42}, 1),
                ):
                    with pytest.raises(ValidationError) as info:
                        call()
                    assert info.value.argument == "conn"
                    assert "AsyncConnection" in str(info.value)
        finally:
            await aconn.close()

    asyncio.run(main())
    with store.connect() as conn:
        assert conn.execute(f"SELECT count(*) FROM {store.guard}").fetchone() == (0,)
        assert conn.execute(f"SELECT to_regclass('{store.schema}.never')").fetchone() == (None,)
    assert store.order() == ("new", 10, None)


def test_sqlalchemy_async_connection_is_a_validation_error(store: Store) -> None:
    """A started SQLAlchemy AsyncConnection on PostgreSQL is refused naming conn; through
    run_sync the same call works."""
    pytest.importorskip("greenlet", reason="SQLAlchemy's asyncio extension needs greenlet")
    from sqlalchemy.ext.asyncio import create_async_engine

    async def main() -> int:
        engine = create_async_engine(store.dsn.replace("postgresql://", "postgresql+psycopg://", 1))
        try:
            async with engine.begin() as aconn:
                with pytest.raises(ValidationError) as info:
                    db.fence_guard(aconn, "r", 5, table=store.guard)
                assert info.value.argument == "conn"
                return await aconn.run_sync(
                    lambda sync: db.fence_guard(sync, "r", 5, table=store.guard)
                )
        finally:
            await engine.dispose()

    assert asyncio.run(main()) == 5


# --- SQLAlchemy on psycopg -----------------------------------------------------------------------


def test_sqlalchemy_connection_on_postgres(store: Store) -> None:
    """Guard, update and fenced read through a SQLAlchemy Connection (postgresql+psycopg)."""
    engine = sa.create_engine(store.dsn.replace("postgresql://", "postgresql+psycopg://", 1))
    try:
        with engine.begin() as conn:
            assert db.fence_guard(conn, "orders", lease(34), table=store.guard) == 34
            with pytest.raises(StaleTokenError, match="different lease"):
                db.fence_guard(conn, "orders", lease(34, owner=2), table=store.guard)
            assert db.fenced_update(conn, store.orders, {"status": "sa"}, {"id": 42}, 34) == 1
            assert db.fenced_read(conn, store.orders, {"id": 42}, 34) == [
                {"id": 42, "status": "sa", "balance": 10, "fencing_token": 34}
            ]
        with engine.begin() as conn, pytest.raises(StaleTokenError) as info:
            db.fenced_update(conn, store.orders, {"status": "old"}, {"id": 42}, 33)
        assert info.value.last_token == 34
    finally:
        engine.dispose()
    assert store.order() == ("sa", 10, 34)
