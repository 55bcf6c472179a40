"""``fencedlease check --resource postgres --resource-url DSN`` never drops a counter table it
did not create."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import pytest
from click.testing import CliRunner
from pg_fixtures import postgres_dsn  # noqa: F401 (the fixture)

from fencedlease.cli.commands import main
from fencedlease_lab.harness.resources import COUNTER_TABLE as _TABLE
from fencedlease_lab.harness.run import (
    RESOURCE_MARKER,
    CheckConfig,
    UnsafeTargetError,
    run_check,
)

pytestmark = pytest.mark.live


def test_a_postgres_counter_table_it_did_not_create_survives(
    postgres_dsn: str,  # noqa: F811 (the fixture)
    tmp_path: Path,
) -> None:
    """A user table named like the counter, without the check's marker table: run_check
    refuses (UnsafeTargetError) and the table keeps its rows; no marker is created."""
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {RESOURCE_MARKER}")
        conn.execute(f"DROP TABLE IF EXISTS {_TABLE}")
        conn.execute(f"CREATE TABLE {_TABLE} (id INTEGER PRIMARY KEY, value BIGINT NOT NULL)")
        conn.execute(f"INSERT INTO {_TABLE} VALUES (1, 41)")
    try:
        config = CheckConfig(
            out_dir=tmp_path / "out",
            resource="postgres",
            resource_url=postgres_dsn,
            duration_s=1,
            faults=(),
            toxiproxy=False,
        )
        with pytest.raises(UnsafeTargetError, match="did not create"):
            run_check(config)
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            row = conn.execute(f"SELECT value FROM {_TABLE} WHERE id = 1").fetchone()
            marker = conn.execute("SELECT to_regclass(%s)", (RESOURCE_MARKER,)).fetchone()
        assert row == (41,)
        assert marker == (None,)
    finally:
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            conn.execute(f"DROP TABLE IF EXISTS {_TABLE}")


def test_a_postgres_connection_failure_is_one_redacted_line(
    postgres_dsn: str,  # noqa: F811 (the fixture)
    tmp_path: Path,
) -> None:
    """A real PostgreSQL, a DSN with a password and a database that does not exist: ``check``
    exits 2 with one line naming the DSN (*** for the password) and psycopg's error, no
    traceback, no password."""
    parts = urlsplit(postgres_dsn)
    user = parts.username or "postgres"
    dsn = f"postgresql://{user}:pg-s3cret-77@{parts.hostname}:{parts.port}/no_such_db"
    result = CliRunner().invoke(
        main,
        ["check", "--duration", "1", "--faults", "none", "--no-toxiproxy", "--resource",
         "postgres", "--resource-url", dsn, "--out", str(tmp_path / "out")],
        env={"COLUMNS": "400"},
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.output
    assert errors[0].startswith(
        f"error: ResourceUnavailable: cannot use the postgres resource postgresql://{user}:***@"
        f"{parts.hostname}:{parts.port}/no_such_db: OperationalError: connection"
    )
    assert 'database "no_such_db" does not exist' in errors[0]
    assert "pg-s3cret-77" not in result.output
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
