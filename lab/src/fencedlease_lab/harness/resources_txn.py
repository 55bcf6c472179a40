"""The list-append resources (``sqlite-append``, ``postgres-append``): each critical section is
also a transaction over several lists, recorded for [`elle`][fencedlease_lab.harness.elle].

The counter is kept as in ``sqlite`` / ``postgres`` (guard-fenced), so every other property is
judged as usual. Beside it, each key has
[`LISTS_PER_KEY`][fencedlease_lab.harness.resources_txn.LISTS_PER_KEY] lists (rows ``<key>#0``... of
[`LIST_TABLE`][fencedlease_lab.harness.resource_spec.LIST_TABLE], space-separated elements). A
critical section is one *logical transaction*, as Elle's list-append workload has them (Kingsbury &
Alvaro, "Elle: Inferring Isolation Anomalies from Experimental Observations", 2020): the counter's
read also reads all of the key's lists (same SQL transaction, same guard), and the counter's write
also appends a value unique in the run to one or two of them. The lease is what should make those
two SQL transactions one isolated transaction; the fence is what makes it so when the lease fails: a
stale holder's appends are refused with its write.

Each logical transaction is one ``txn`` operation of the worker's history: invoked when the read
starts, with ``detail.txn`` the micro-operations (``["r", list, null]``, ``["append", list,
value]``); completed ``ok`` (the reads filled in with the lists as read), ``fail`` (the read or the
write was refused, or the hold ended before the write: nothing was appended) or ``info`` (the
write's outcome is unknown). The history writer is handed over by
[`AppendStore.attach_history`][fencedlease_lab.harness.resources_txn.AppendStore.attach_history];
without one the store is a plain guard-fenced counter.
"""

from __future__ import annotations

import random
from typing import Any, Final

from fencedlease import BackendError, Lease, StaleTokenError

from .history import HistoryWriter, Operation
from .resource_spec import LIST_TABLE, ResourceSpec, access_key
from .resources_sql import SqlConnection, SqlCounterStore, ensure_row, select_counter

__all__ = ["LISTS_PER_KEY", "AppendStore", "list_name"]

#: How many lists each key has.
LISTS_PER_KEY: Final = 3


def list_name(key: str, index: int) -> str:
    """The row of the ``index``-th list of ``key``: ``<key>#<index>``."""
    return f"{key}#{index}"


def _read_list(sql: SqlConnection, row: str) -> list[str]:
    found = sql.run(f"SELECT elements FROM {LIST_TABLE} WHERE name = ?", (row,))  # noqa: S608
    return str(found[0][0]).split() if found else []


def _append(sql: SqlConnection, row: str, value: str) -> None:
    sql.run(
        f"INSERT INTO {LIST_TABLE} (name, elements) VALUES (?, ?) ON CONFLICT (name) DO UPDATE"  # noqa: S608
        f" SET elements = {LIST_TABLE}.elements || ' ' || excluded.elements",
        (row, value),
    )


class AppendStore(SqlCounterStore):
    """A guard-fenced counter per key, and a list-append transaction per critical section
    (module docstring)."""

    def __init__(self, spec: ResourceSpec) -> None:
        super().__init__(spec)
        self._writer: HistoryWriter | None = None
        self._rng = random.Random(0)
        self._seq = 0
        self._tag = "p"
        self._open: tuple[Operation, list[list[Any]], tuple[str, int | None]] | None = None
        self._appending: list[list[Any]] | None = None

    def attach_history(self, writer: HistoryWriter, *, lane: int = 0) -> None:
        """Record a ``txn`` operation per critical section in ``writer``'s history (its
        process name and ``lane``, the thread or task of the worker using this store, seed the
        choice of lists and name the appended values, so that the lanes of one worker never
        append the same value)."""
        self._writer = writer
        self._tag = writer.process if lane == 0 else f"{writer.process}/{lane}"
        self._rng = random.Random(self._tag)

    def prepare(self) -> None:
        super().prepare()
        self.sql.run(f"DROP TABLE IF EXISTS {LIST_TABLE}")
        self.sql.run(f"CREATE TABLE {LIST_TABLE} (name TEXT PRIMARY KEY, elements TEXT NOT NULL)")

    def _plan(self, key: str) -> list[list[Any]]:
        """The micro-operations of a new transaction on ``key``'s lists: a read of each list,
        then appends of fresh values to 1 or 2 of them. Reading every list makes any two
        transactions that overlap without isolation a cycle: each misses the other's append."""
        rows = [list_name(key, i) for i in range(LISTS_PER_KEY)]
        appends = sorted(self._rng.sample(rows, self._rng.randint(1, 2)))
        ops: list[list[Any]] = [["r", row, None] for row in rows]
        for row in appends:
            self._seq += 1
            ops.append(["append", row, f"{self._tag}.{self._seq}"])
        return ops

    def _abandon(self) -> None:
        if self._open is not None:
            op, _, _ = self._open
            op.fail(outcome="abandoned", detail={"why": "the hold ended before the write"})
            self._open = None

    def read(self, lease: Lease, *, fenced: bool, key: str | None = None) -> int:
        name = access_key(lease, key)
        if self._writer is None:
            return super().read(lease, fenced=fenced, key=name)
        self._abandon()
        ops = self._plan(name)
        token = lease.fencing_token
        op = self._writer.invoke("txn", key=name, token=token, detail={"txn": ops})
        try:
            with self.sql.transaction():
                value = self._read_counter(lease, fenced, name)
                for micro in ops:
                    if micro[0] == "r":
                        micro[2] = _read_list(self.sql, micro[1])
        except StaleTokenError as exc:
            op.fail(outcome="stale", detail={"txn": ops, "last": exc.last_token})
            raise
        except BackendError:
            op.fail(outcome="backend-error", detail={"txn": ops})  # a read changes nothing
            raise
        self._open = (op, ops, (name, token))
        return value

    def _read_counter(self, lease: Lease, fenced: bool, key: str) -> int:
        ensure_row(self.sql, key)
        if fenced:
            self.guard(lease, key)
        return select_counter(self.sql, key)

    def write(self, value: int, lease: Lease, *, fenced: bool, key: str | None = None) -> None:
        name = access_key(lease, key)
        opened, self._open = self._open, None
        if opened is None or opened[2] != (name, lease.fencing_token):
            self._open = opened
            self._abandon()
            super().write(value, lease, fenced=fenced, key=name)
            return
        op, ops, _ = opened
        self._appending = ops
        try:
            super().write(value, lease, fenced=fenced, key=name)
        except StaleTokenError as exc:
            op.fail(outcome="stale", detail={"txn": ops, "last": exc.last_token})
            raise
        except BackendError:
            op.info(outcome="backend-error", detail={"txn": ops})
            raise
        finally:
            self._appending = None
        op.ok(outcome="committed", detail={"txn": ops})

    def also_in_write(self) -> None:
        if self._appending is not None:
            self._appends(self._appending)

    def _appends(self, ops: list[list[Any]]) -> None:
        for micro in ops:
            if micro[0] == "append":
                _append(self.sql, micro[1], micro[2])

    def lists(self) -> dict[str, list[str]]:
        """Every list, as it is now (for tests and the final read)."""
        rows = self.sql.run(f"SELECT name, elements FROM {LIST_TABLE} ORDER BY name")  # noqa: S608
        return {str(row): str(elements).split() for row, elements in rows}

    def close(self) -> None:
        self._abandon()
        super().close()
