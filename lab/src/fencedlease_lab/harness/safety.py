"""Target safety of ``fencedlease check``: it writes, replaces and deletes only what it made.

The output directory is marked by [`OUT_MARKER`][fencedlease_lab.harness.run.OUT_MARKER], a resource
(SQLite file, PostgreSQL database, Redis server) by
[`RESOURCE_MARKER`][fencedlease_lab.harness.run.RESOURCE_MARKER]; a target that holds data without
the mark is refused with [`UnsafeTargetError`][fencedlease_lab.harness.run.UnsafeTargetError] before
anything is written to it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
from pathlib import Path
from typing import Final

from fencedlease import redact_url

from .resources import COUNTER_TABLE, LIST_TABLE, ResourceSpec

__all__ = [
    "OUT_FILES",
    "OUT_MARKER",
    "RESOURCE_MARKER",
    "UnsafeTargetError",
    "check_out_dir",
    "check_sqlite_resource",
    "claim_out_dir",
    "mark_resource",
    "redis_marker_key",
    "remove_sqlite_resource",
]

#: The file that marks a directory as made by ``fencedlease check``: only such a directory (or
#: an empty one, which then gets it) takes the run's files, and only the run's own file names
#: are ever replaced or removed in it.
OUT_MARKER: Final = ".fencedlease-check"
#: The table (SQLite, PostgreSQL) and key suffix (Redis) that mark a resource the check made.
RESOURCE_MARKER: Final = "fencedlease_check_marker"
#: The run's own files in the output directory (besides ``parts/`` and the SQLite resource).
OUT_FILES: Final = ("history.jsonl", "report.json", "timeline.png")
_SQLITE_SUFFIXES: Final = ("", "-wal", "-shm", "-journal")


class UnsafeTargetError(ValueError):
    """``--out`` or ``--resource-url`` names something that holds data the check did not write:
    the check refuses rather than overwrite or delete it."""


def check_out_dir(out_dir: Path) -> None:
    """Refuse an ``out_dir`` that exists, is not empty and lacks
    [`OUT_MARKER`][fencedlease_lab.harness.run.OUT_MARKER].

    Raises:
        UnsafeTargetError: so; nothing is written or removed.
    """
    if not out_dir.exists():
        return
    if not out_dir.is_dir():
        raise UnsafeTargetError(f"--out {out_dir} exists and is not a directory")
    if (out_dir / OUT_MARKER).is_file():
        return
    if any(out_dir.iterdir()):
        raise UnsafeTargetError(
            f"--out {out_dir} is a non-empty directory that fencedlease check did not create"
            f" (no {OUT_MARKER} in it); give a new or empty directory"
        )


def claim_out_dir(out_dir: Path) -> Path:
    """Check ``out_dir`` ([`check_out_dir`][fencedlease_lab.harness.run.check_out_dir]), mark it,
    remove the files of an earlier run ([`OUT_FILES`][fencedlease_lab.harness.safety.OUT_FILES] and
    ``parts/``, nothing else) and return a new, empty ``parts/`` in it.

    Raises:
        UnsafeTargetError: ``out_dir`` is not the check's; nothing is written or removed.
    """
    check_out_dir(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / OUT_MARKER).write_text(
        "made by fencedlease check; it replaces history.jsonl, report.json, timeline.png,"
        " parts/ and resource.sqlite3 here\n",
        "utf-8",
    )
    parts_dir = out_dir / "parts"
    shutil.rmtree(parts_dir, ignore_errors=True)  # a marked directory: parts/ is the check's
    for name in OUT_FILES:
        with contextlib.suppress(FileNotFoundError):
            (out_dir / name).unlink()
    parts_dir.mkdir()
    return parts_dir


def check_sqlite_resource(path: str) -> bool:
    """Whether the SQLite file ``path`` is the check's own (it has the
    [`RESOURCE_MARKER`][fencedlease_lab.harness.run.RESOURCE_MARKER] table; True) or absent or empty
    (False; it may be created). A file of any other content is refused.

    Raises:
        UnsafeTargetError: ``path`` holds data the check did not write (or is not SQLite).
    """
    if path == ":memory:" or not os.path.exists(path):
        return False
    if not os.path.isfile(path):
        raise UnsafeTargetError(f"the SQLite resource {path} exists and is not a file")
    if os.path.getsize(path) == 0:
        return False
    try:
        conn = sqlite3.connect(f"file:{Path(path).resolve().as_posix()}?mode=ro", uri=True)
        try:
            tables = {
                row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
            }
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise UnsafeTargetError(
            f"the SQLite resource {path} exists and is not a database the check made ({exc})"
        ) from None
    if RESOURCE_MARKER not in tables:
        raise UnsafeTargetError(
            f"the SQLite resource {path} is an existing database that fencedlease check did not"
            " create; the check would drop its tables, so it refuses: give a new path"
        )
    return True


def remove_sqlite_resource(path: str) -> None:
    """Remove the SQLite file ``path`` (and its ``-wal``, ``-shm``, ``-journal``) if it is the
    check's own ([`check_sqlite_resource`][fencedlease_lab.harness.run.check_sqlite_resource]); an
    absent or empty one is left as it is.

    Raises:
        UnsafeTargetError: ``path`` holds data the check did not write; nothing is removed.
    """
    if check_sqlite_resource(path):
        for suffix in _SQLITE_SUFFIXES:
            with contextlib.suppress(FileNotFoundError):
                os.remove(path + suffix)


def mark_resource(spec: ResourceSpec) -> bool:
    """Mark the resource as the check's before it is prepared (which drops and recreates the
    counter), refusing one that holds the counter or its fence without the mark: a table or key
    the check did not create is never dropped or deleted. Returns whether this call set the
    Redis marker key (False when an earlier run's was there, and for the SQL resources).

    Raises:
        UnsafeTargetError: so.
    """
    if spec.family == "memory":
        return False  # a process of the run's own: nothing to mark
    if spec.family == "sqlite":
        conn = sqlite3.connect(spec.target)
        try:
            conn.execute(f"CREATE TABLE IF NOT EXISTS {RESOURCE_MARKER} (made_by TEXT)")
            conn.commit()
        finally:
            conn.close()
        return False
    if spec.family == "redis":
        return _mark_redis_resource(spec)
    _mark_postgres_resource(spec)
    return False


def redis_marker_key(spec: ResourceSpec) -> str:
    """The key that marks a Redis resource as the check's (beside its resource's data key)."""
    from .resources import base_data_key

    return f"{base_data_key(spec)}:{RESOURCE_MARKER}"


def _mark_redis_resource(spec: ResourceSpec) -> bool:
    import redis

    from fencedlease import RedisFencedResource

    from .resources import registry_key

    with redis.Redis.from_url(spec.target, socket_timeout=5.0, socket_connect_timeout=5.0) as r:
        marker = redis_marker_key(spec)
        base = RedisFencedResource(r, spec.name)
        names = (registry_key(spec), base.data_key, base.fence_key)
        if not r.exists(marker) and r.exists(*names):
            raise UnsafeTargetError(
                f"the Redis resource {redact_url(spec.target)} holds one of"
                f" {', '.join(repr(n) for n in names)}, which fencedlease check did not create;"
                " the check would delete the keys they name, so it refuses"
            )
        return bool(r.set(marker, "made by fencedlease check", nx=True))


def _mark_postgres_resource(spec: ResourceSpec) -> None:
    import psycopg  # optional: only for --resource postgres

    with psycopg.connect(spec.target, autocommit=True, connect_timeout=5) as conn:
        for table in (COUNTER_TABLE, LIST_TABLE):
            row = conn.execute(
                "SELECT to_regclass(%s) IS NOT NULL, to_regclass(%s) IS NOT NULL",
                (table, RESOURCE_MARKER),
            ).fetchone()
            assert row is not None
            counter, marked = row
            if counter and not marked:
                raise UnsafeTargetError(
                    f"the PostgreSQL resource {redact_url(spec.target)} has a table {table}"
                    " that fencedlease check did not create; the check would drop it, so it"
                    " refuses"
                )
        conn.execute(f"CREATE TABLE IF NOT EXISTS {RESOURCE_MARKER} (made_by TEXT)")
