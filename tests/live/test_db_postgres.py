"""fencedlease.db on a real PostgreSQL: psycopg 3 and SQLAlchemy, concurrent writers."""

from __future__ import annotations

import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from pg_fixtures import postgres_dsn  # noqa: F401 (the fixture)

from fencedlease import StaleTokenError, ValidationError, db

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))
from test_fencing_model import Access, accesses, attempt, lease, model_accepts, present

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
    """For any sequence of accesses (strict per access), the guard accepts what the model does."""
    resource = uuid.uuid4().hex
    history: list[tuple[int, int | None]] = []
    with store.connect(autocommit=True) as conn:
        for token, who, strict in accesses:
            got, last = attempt(
                db.fence_guard,
                conn,
                resource,
                present(who, token),
                strict=strict,
                table=store.guard,
            )
            assert got == model_accepts(history, token, who, strict)
            if got:
                history.append((token, who))
            else:
                assert last == max(t for t, _ in history)


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
