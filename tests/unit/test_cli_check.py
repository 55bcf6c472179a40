"""``fencedlease check`` never deletes what it did not create, and never shows a password.

The refusals happen before any server or worker starts, so these run without Redis."""

from __future__ import annotations

import json
import socket
import sqlite3
from pathlib import Path

import attrs
import pytest
from click.testing import CliRunner

from fencedlease.cli.commands import main
from fencedlease_lab.harness.checker import CheckParams, check_history
from fencedlease_lab.harness.history import Event
from fencedlease_lab.harness.nemesis import (
    DEFAULT_FAULTS,
    FAULTS,
    SERVER_WIDE,
    left_out_faults,
)
from fencedlease_lab.harness.report import report_dict, write_report_json
from fencedlease_lab.harness.run import (
    OUT_MARKER,
    RESOURCE_MARKER,
    CheckConfig,
    CheckResult,
    UnsafeTargetError,
    check_out_dir,
    check_sqlite_resource,
    inconclusive_reasons,
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
    code, output = _run("--resource", "sqlite", "--resource-url", str(app), "--out", str(out))
    assert code == 2
    assert "did not create" in output
    assert app.read_bytes() == before
    assert _users(app) == [("ada",)]
    assert not out.exists()


def test_the_mixed_resource_takes_no_url(tmp_path: Path) -> None:
    """The default resource puts each of its kinds where the check does: a --resource-url
    without --resource is refused (exit 2), naming the way out, and no database is made."""
    app = tmp_path / "app.db"
    code, output = _run("--resource-url", str(app), "--out", str(tmp_path / "out"))
    assert code == 2
    assert "--resource mixed runs each kind where the check puts it" in output
    assert not app.exists()


def test_a_file_that_is_not_sqlite_is_refused(tmp_path: Path) -> None:
    """A --resource-url that is some other file is not SQLite the check made: refused."""
    notes = tmp_path / "notes.txt"
    notes.write_text("not a database, but mine", "utf-8")
    code, _output = _run(
        "--resource", "sqlite", "--resource-url", str(notes), "--out", str(tmp_path / "out")
    )
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
        run_check(
            CheckConfig(
                out_dir=tmp_path / "new", resource="sqlite", resource_url=str(app), duration_s=1
            )
        )
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
    """A mistyped FENCEDLEASE_URL: exit 2 before anything starts, with an error that shows
    the URL with *** for the password; nothing is written."""
    out = tmp_path / "out"
    result = CliRunner().invoke(
        main,
        ["check", "--duration", "1", "--faults", "none", "--no-toxiproxy", "--out", str(out)],
        env={"FENCEDLEASE_URL": url},
    )
    assert result.exit_code == 2, result.output
    assert "error: ValidationError" in result.output
    assert "user:***@127.0.0.1" in result.output.replace("\n", "")
    assert "s3cret" not in result.output
    assert not out.exists()


# --- faults that act on the whole server; runs that prove nothing ------------------------------


def test_the_faults_that_act_on_the_whole_server() -> None:
    """Exactly these kinds touch more than the run's own keys, connections, proxies and worker
    processes; every other kind is scoped to the run. The topology faults act on the whole
    deployment (they run only on one the check started: --topology)."""
    assert sorted(SERVER_WIDE) == [
        "cluster-failover", "cluster-kill-master", "deposed-primary", "lag-failover",
        "redis-pause", "redis-restart-aof", "redis-restart-nopersist", "replica-lag",
        "script-flush", "sentinel-failover", "sentinel-kill-primary",
    ]  # fmt: skip
    assert sorted(k for k, info in FAULTS.items() if not info.server_wide) == [
        "client-kill", "clock", "drop-replies", "drop-requests", "evict", "kernel-drop",
        "kernel-reject", "kill-holder", "latency", "partition", "pause-holder", "reset-peer",
        "resource-link", "slow-cut", "slow-grant", "slow-handoff", "timeout",
    ]  # fmt: skip


def test_server_wide_faults_are_left_out_on_a_redis_the_check_did_not_start() -> None:
    """On a user's Redis the default schedule loses the server-wide kinds (in their order);
    on the check's own Redis, or with the opt-in, nothing is left out."""
    assert left_out_faults(DEFAULT_FAULTS, own_server=False, allow=False) == [
        "script-flush",
        "redis-pause",
        "redis-restart-aof",
        "redis-restart-nopersist",
    ]
    assert left_out_faults(DEFAULT_FAULTS, own_server=True, allow=False) == []
    assert left_out_faults(DEFAULT_FAULTS, own_server=False, allow=True) == []
    assert left_out_faults(["client-kill", "script-flush", "script-flush"], own_server=False,
                           allow=False) == ["script-flush"]  # fmt: skip
    assert left_out_faults(["pause-holder", "latency"], own_server=False, allow=False) == []


def _event(process: str, op: str, kind: str, at: float, **fields: object) -> Event:
    return Event(process, op, kind, at, 1e9 + at, **fields)  # type: ignore[arg-type]


def _history(*, grant: bool, accepted: bool, fault: bool) -> list[Event]:
    """A run's history: optionally one grant with a write (accepted or refused as stale) and
    one fault (completed)."""
    events = [_event("run", "start", "info", 0.0, detail={"ttl_ms": 1000, "heartbeat_ms": 250})]
    if grant:
        events += [
            _event("w0", "acquire", "invoke", 0.1, id=0),
            _event("w0", "acquire", "ok", 0.2, id=0, token=1, outcome="granted"),
            _event("w0", "write", "invoke", 0.3, id=1, grant=0, token=1, value=1),
            _event("w0", "write", "ok" if accepted else "fail", 0.4, id=1, grant=0, token=1,
                   value=1, outcome="accepted" if accepted else "stale"),
            _event("w0", "hold", "ok", 0.5, id=0, grant=0, token=1),
        ]  # fmt: skip
    if fault:
        events += [
            _event("nemesis", "fault", "invoke", 0.6, id=0, detail={"fault": "pause-holder"}),
            _event("nemesis", "fault", "ok", 0.7, id=0, detail={"fault": "pause-holder"}),
        ]
    events += [_event("run", "stop", "info", 1.0), _event("run", "final", "ok", 1.1, value=1)]
    return events


def test_a_run_that_proved_nothing_says_why() -> None:
    """No grant, no accepted access, or no fault injected though some were asked for: each is a
    reason; a run with a grant, an accepted write and an injected fault has none."""
    faults = ("pause-holder",)
    assert inconclusive_reasons(check_history(_history(grant=True, accepted=True, fault=True)),
                                faults, []) == []  # fmt: skip
    none = check_history(_history(grant=False, accepted=False, fault=False))
    reasons = inconclusive_reasons(none, faults, [])
    assert len(reasons) == 2
    assert reasons[0].startswith("no lease was granted")
    assert reasons[1] == "no fault was injected though faults were asked for"
    assert inconclusive_reasons(none, (), []) == [reasons[0]]
    refused = check_history(_history(grant=True, accepted=False, fault=True))
    assert inconclusive_reasons(refused, faults, []) == [
        "the resource accepted no access: nothing was written under a lease"
    ]
    no_fault = check_history(_history(grant=True, accepted=True, fault=False))
    assert inconclusive_reasons(no_fault, ("script-flush",), ["script-flush"]) == [
        "no fault was injected though faults were asked for (script-flush left out)"
    ]


def test_the_exit_code_and_verdict_of_a_result(tmp_path: Path) -> None:
    """0 only without violations and with something proved; 2 for a run that proved nothing;
    report.json says which, with the reasons and the faults left out."""
    report = check_history(_history(grant=True, accepted=True, fault=True))
    result = CheckResult(
        CheckConfig(out_dir=tmp_path), report, tmp_path, tmp_path / "h", tmp_path / "r", None,
        (), 1, "external", None, ("script-flush",), (),
    )  # fmt: skip
    assert (result.exit_code, result.passed) == (0, True)
    data = report_dict(result)
    assert (data["verdict"], data["exit_code"], data["left_out"]) == ("pass", 0, ["script-flush"])
    empty = attrs.evolve(result, inconclusive=("no lease was granted",))
    assert (empty.exit_code, empty.passed, empty.valid) == (2, False, True)
    data = report_dict(empty)
    assert (data["verdict"], data["inconclusive"]) == ("inconclusive", ["no lease was granted"])


def test_help_explains_the_opt_in_and_the_exit_codes() -> None:
    """--help names --allow-server-faults with what it allows, and the three exit codes."""
    output = CliRunner().invoke(main, ["check", "--help"], terminal_width=200).output
    assert "--allow-server-faults" in output
    assert "script-flush" in output
    assert "0  no violation, and the run proved something" in output
    assert "1  violations" in output
    assert "2  the run could not be done" in output
    assert "proved nothing" in output


def test_an_unreachable_redis_is_a_run_that_could_not_be_done(tmp_path: Path) -> None:
    """FENCEDLEASE_URL naming a port nothing listens on: exit 2 with one line naming the
    Redis (*** for the password) and the connection error; no report, no traceback."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    out = tmp_path / "out"
    result = CliRunner().invoke(
        main,
        ["check", "--duration", "1", "--faults", "none", "--no-toxiproxy", "--out", str(out)],
        env={"FENCEDLEASE_URL": f"redis://user:s3cret@127.0.0.1:{port}/0",
             "COLUMNS": "400"},
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.output
    assert errors[0].startswith(
        f"error: ResourceUnavailable: cannot use the Redis at redis://user:***@127.0.0.1:{port}/0:"
        " ConnectionError: Error 111 connecting to 127.0.0.1:"
    )
    assert "s3cret" not in result.output
    assert not (out / "report.json").exists()


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


# --- replays and campaigns --------------------------------------------------------------------


def _lost_update_history() -> list[Event]:
    """One acknowledged increment, and a final counter of 5: property b fails."""
    events = _history(grant=True, accepted=True, fault=True)
    return [*events[:-1], _event("run", "final", "ok", 1.1, value=5)]


def test_a_campaign_runs_each_seed_in_its_own_directory(tmp_path: Path) -> None:
    """Seeds 3, 4, 5 in seed-3/, seed-4/, seed-5/; one row each with its verdict, violations,
    operations (invocations) and faults; a run that raised is an ``error`` row; campaign.json
    holds the rows and exit code 1 because one run found violations."""
    from fencedlease_lab.harness.campaign import campaign_exit_code, run_campaign
    from fencedlease_lab.harness.history import write_history

    seen: list[tuple[int | None, Path]] = []

    def fake_run(config: CheckConfig) -> CheckResult:
        seen.append((config.seed, config.out_dir))
        if config.seed == 5:
            raise RuntimeError("workers not ready within 60 s")
        events = _lost_update_history() if config.seed == 4 else _history(
            grant=True, accepted=True, fault=True)  # fmt: skip
        config.out_dir.mkdir(parents=True)
        write_history(config.out_dir / "history.jsonl", events)
        return CheckResult(
            config, check_history(events), config.out_dir, config.out_dir / "history.jsonl",
            config.out_dir / "report.json", None, (), config.seed or 0, "external", None,
        )  # fmt: skip

    root = tmp_path / "campaign"
    rows = run_campaign(CheckConfig(out_dir=root, seed=3), 3, fake_run, errors=(RuntimeError,))
    assert seen == [(seed, root / f"seed-{seed}") for seed in (3, 4, 5)]
    assert [
        (r.seed, r.verdict, r.violations, r.operations, r.faults, r.exit_code) for r in rows
    ] == [
        (3, "pass", 0, 3, 1, 0),
        (4, "fail", 1, 3, 1, 1),
        (5, "error", 0, 0, 0, 2),
    ]
    assert rows[2].error == "RuntimeError: workers not ready within 60 s"
    assert campaign_exit_code(rows) == 1
    assert campaign_exit_code(rows[::2]) == 2
    assert campaign_exit_code(rows[:1]) == 0
    data = json.loads((root / "campaign.json").read_text("utf-8"))
    assert data["exit_code"] == 1
    assert [run["seed"] for run in data["runs"]] == [3, 4, 5]
    assert data["runs"][1]["out_dir"] == str(root / "seed-4")
    assert (root / OUT_MARKER).is_file()


def test_a_campaign_refuses_what_it_cannot_do(tmp_path: Path) -> None:
    from fencedlease_lab.harness.campaign import run_campaign

    def never(config: CheckConfig) -> CheckResult:
        raise AssertionError("no run may start")

    with pytest.raises(ValueError, match="runs must be at least 1, got 0"):
        run_campaign(CheckConfig(out_dir=tmp_path / "a", seed=1), 0, never)
    with pytest.raises(ValueError, match="needs a first seed"):
        run_campaign(CheckConfig(out_dir=tmp_path / "a"), 2, never)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "keep.txt").write_text("x", "utf-8")
    with pytest.raises(UnsafeTargetError, match="did not create"):
        run_campaign(CheckConfig(out_dir=mine, seed=1), 2, never)
    assert sorted(p.name for p in mine.iterdir()) == ["keep.txt"]


def test_runs_at_the_command_line_write_the_table_and_campaign_json(tmp_path: Path) -> None:
    """--runs 2 --seed 40 against a Redis that refuses connections: two runs that could not be
    done, each a row of the printed table and of campaign.json; exit 2 (no violation found)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed when the block ends: nothing listens there
    out = tmp_path / "out"
    result = CliRunner().invoke(
        main,
        ["check", "--duration", "1", "--faults", "none", "--no-toxiproxy", "--runs", "2",
         "--seed", "40", "--redis-url", f"redis://127.0.0.1:{port}/0", "--out", str(out)],
        terminal_width=200,
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    assert "seed 40: error, 0 violation(s)" in result.output
    assert "seed 41: error, 0 violation(s)" in result.output
    assert "fencedlease check: campaign" in result.output
    data = json.loads((out / "campaign.json").read_text("utf-8"))
    assert data["exit_code"] == 2
    assert [(r["seed"], r["verdict"]) for r in data["runs"]] == [(40, "error"), (41, "error")]


def test_replay_refuses_a_seed_and_a_file_that_is_no_report(tmp_path: Path) -> None:
    notes = tmp_path / "notes.json"
    notes.write_text('{"not": "a report"}', "utf-8")
    code, output = _run("--replay", str(notes), "--seed", "3", "--out", str(tmp_path / "o"))
    assert code == 2
    assert "leave out --seed, --runs" in output
    code, output = _run("--replay", str(notes), "--out", str(tmp_path / "o"))
    assert code == 2
    assert "is not a report.json of fencedlease check" in output
    assert not (tmp_path / "o").exists()


def test_replay_takes_options_given_anew_and_checks_them_against_the_schedule(
    tmp_path: Path,
) -> None:
    """--workers given with --replay replaces the recorded 3; a schedule drawn for 3 workers
    cannot run with 4: exit 2 naming both, before any server starts or --out is made."""
    from fencedlease_lab.harness.schedule import draw_schedule

    schedule = draw_schedule(DEFAULT_FAULTS, seed=8, workers=3, ttl_ms=1000, heartbeat_ms=250,
                             body_ms=1800, lead_ms=1000)  # fmt: skip
    report = tmp_path / "report.json"
    report.write_text(
        json.dumps({"seed": 8, "schedule": schedule.to_dict(), "config": {"workers": 3}}), "utf-8"
    )
    out = tmp_path / "again"
    code, output = _run("--replay", str(report), "--workers", "4", "--out", str(out))
    assert code == 2
    assert "the schedule is for 3 workers, the run has 4" in output
    assert not out.exists()
