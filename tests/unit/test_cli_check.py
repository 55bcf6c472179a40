"""``fencedlease check`` never deletes what it did not create, and never shows a password.

The refusals happen before any server or worker starts, so these run without Redis."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import attrs
import pytest
from click.testing import CliRunner

from fencedlease.lab.cli import main
from fencedlease.lab.harness.checker import CheckParams, check_history
from fencedlease.lab.harness.report import report_dict, write_report_json
from fencedlease.lab.harness.run import (
    OUT_MARKER,
    RESOURCE_MARKER,
    CheckConfig,
    CheckResult,
    UnsafeTargetError,
    check_out_dir,
    check_sqlite_resource,
    run_check,
)


def _run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["check", "--duration", "1", *args])
    return result.exit_code, result.output


def _user_db(path: Path) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE fencedlease_check_counter (id INTEGER, value INTEGER)")
        conn.execute("CREATE TABLE users (name TEXT)")
        conn.execute("INSERT INTO users VALUES ('ada')")
    conn.close()


def _users(path: Path) -> list[tuple[str]]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute("SELECT name FROM users").fetchall()
    finally:
        conn.close()


def test_a_non_empty_out_dir_it_did_not_make_is_refused(tmp_path: Path) -> None:
    """--out on a directory holding the user's files (parts/ included): exit 2, a message that
    says why, and every file is still there, unchanged."""
    out = tmp_path / "mine"
    (out / "parts").mkdir(parents=True)
    (out / "parts" / "notes.txt").write_text("keep me", "utf-8")
    (out / "report.json").write_text("{}", "utf-8")
    code, output = _run("--out", str(out))
    assert code == 2
    assert "did not create" in output
    assert (out / "parts" / "notes.txt").read_text("utf-8") == "keep me"
    assert (out / "report.json").read_text("utf-8") == "{}"
    assert not (out / OUT_MARKER).exists()


def test_an_existing_sqlite_resource_it_did_not_make_is_refused(tmp_path: Path) -> None:
    """--resource-url app.db (a user's database, even one with a table of the counter's name):
    exit 2 before anything runs; the database keeps its rows and no --out is made."""
    app = tmp_path / "app.db"
    _user_db(app)
    before = app.read_bytes()
    out = tmp_path / "out"
    code, output = _run("--resource-url", str(app), "--out", str(out))
    assert code == 2
    assert "did not create" in output
    assert app.read_bytes() == before
    assert _users(app) == [("ada",)]
    assert not out.exists()


def test_a_file_that_is_not_sqlite_is_refused(tmp_path: Path) -> None:
    """A --resource-url that is some other file is not SQLite the check made: refused."""
    notes = tmp_path / "notes.txt"
    notes.write_text("not a database, but mine", "utf-8")
    code, _output = _run("--resource-url", str(notes), "--out", str(tmp_path / "out"))
    assert code == 2
    assert notes.read_text("utf-8") == "not a database, but mine"


def test_run_check_refuses_too_when_called_as_a_library(tmp_path: Path) -> None:
    """run_check itself raises UnsafeTargetError (a ValueError) for both, before it writes."""
    out = tmp_path / "mine"
    out.mkdir()
    (out / "keep.txt").write_text("x", "utf-8")
    with pytest.raises(UnsafeTargetError, match="did not create"):
        run_check(CheckConfig(out_dir=out, duration_s=1))
    app = tmp_path / "app.db"
    _user_db(app)
    with pytest.raises(UnsafeTargetError, match="did not create"):
        run_check(CheckConfig(out_dir=tmp_path / "new", resource_url=str(app), duration_s=1))
    assert sorted(p.name for p in out.iterdir()) == ["keep.txt"]
    assert _users(app) == [("ada",)]
    assert not (tmp_path / "new").exists()


def test_what_the_check_may_use(tmp_path: Path) -> None:
    """A missing or empty directory, or one with the marker, is accepted; so is a missing or
    empty SQLite file (False: create it) and a file with the marker table (True: the check's)."""
    check_out_dir(tmp_path / "missing")
    empty = tmp_path / "empty"
    empty.mkdir()
    check_out_dir(empty)
    marked = tmp_path / "marked"
    marked.mkdir()
    (marked / OUT_MARKER).write_text("", "utf-8")
    (marked / "history.jsonl").write_text("", "utf-8")
    check_out_dir(marked)
    assert check_sqlite_resource(str(tmp_path / "new.db")) is False
    (tmp_path / "zero.db").write_bytes(b"")
    assert check_sqlite_resource(str(tmp_path / "zero.db")) is False
    ours = tmp_path / "ours.db"
    with sqlite3.connect(ours) as conn:
        conn.execute(f"CREATE TABLE {RESOURCE_MARKER} (made_by TEXT)")
    conn.close()
    assert check_sqlite_resource(str(ours)) is True
    with pytest.raises(UnsafeTargetError, match="not a directory"):
        check_out_dir(ours)


def test_report_json_redacts_both_urls(tmp_path: Path) -> None:
    """report.json shows redis_url and resource_url with *** for the password."""
    config = CheckConfig(
        redis_url="redis://user:s3cret@127.0.0.1:6379/0",
        resource_url="postgresql://app:pg-s3cret@db/app",
        out_dir=tmp_path,
    )
    report = check_history([], _params())
    result = CheckResult(
        config, report, tmp_path, tmp_path / "h", tmp_path / "r", None, (), 1, "external", None
    )
    path = tmp_path / "report.json"
    write_report_json(path, result)
    text = path.read_text("utf-8")
    assert "s3cret" not in text
    data = json.loads(text)
    assert data["config"]["redis_url"] == "redis://user:***@127.0.0.1:6379/0"
    assert data["config"]["resource_url"] == "postgresql://app:***@db/app"
    assert report_dict(attrs.evolve(result, config=CheckConfig()))["config"]["redis_url"] is None


def _params() -> CheckParams:
    return CheckParams.from_history([])


@pytest.mark.parametrize(
    "url",
    [
        "rdis://user:s3cret@127.0.0.1:1/0",
        "redis://user:s3cret@127.0.0.1:notaport/0",
        "redis://user:s3cret@127.0.0.1:1/0?colour=red",
    ],
)
def test_a_bad_redis_url_fails_without_showing_the_password(tmp_path: Path, url: str) -> None:
    """A mistyped FENCEDLEASE_REDIS_URL: exit 2 before anything starts, with an error that shows
    the URL with *** for the password; nothing is written."""
    out = tmp_path / "out"
    result = CliRunner().invoke(
        main,
        ["check", "--duration", "1", "--faults", "none", "--no-toxiproxy", "--out", str(out)],
        env={"FENCEDLEASE_REDIS_URL": url},
    )
    assert result.exit_code == 2, result.output
    assert "error: ValidationError" in result.output
    assert "user:***@127.0.0.1" in result.output.replace("\n", "")
    assert "s3cret" not in result.output
    assert not out.exists()


@pytest.mark.parametrize(
    ("dsn", "shown"),
    [
        ("host=db user=app password = hunter5zz", "host=db user=app password = ***"),
        ("host=db password='hunter6 zz' dbname=d", "host=db password=*** dbname=d"),
        ("host=db password='a\\'b c' dbname=d", "host=db password=*** dbname=d"),
    ],
)
def test_report_json_redacts_a_libpq_dsn_in_every_form(
    tmp_path: Path, dsn: str, shown: str
) -> None:
    """A key=value DSN given as --resource-url: its password, with spaces around = or quoted
    with spaces and escapes, never reaches report.json."""
    config = CheckConfig(resource_url=dsn, out_dir=tmp_path)
    result = CheckResult(
        config, check_history([], _params()), tmp_path, tmp_path / "h", tmp_path / "r", None, (),
        1, "external", None,
    )  # fmt: skip
    path = tmp_path / "report.json"
    write_report_json(path, result)
    text = path.read_text("utf-8")
    assert "hunter" not in text and "zz" not in text and "b c" not in text
    assert json.loads(text)["config"]["resource_url"] == shown
