"""``fencedlease doctor``, ``inspect``, ``list`` and ``release`` without a Redis: the usage errors,
the refusals that come before any connection, an unreachable server, and that no output shows the
URL's password. The live behaviour is in tests/live/test_doctor.py and test_operator_cli.py."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from fencedlease._core import acl as _acl
from fencedlease._core.acl import ACL_COMMANDS
from fencedlease.cli.commands import main
from fencedlease.cli.doctor import Check, exit_code
from fencedlease.cli.doctor_acl import _probe, acl_commands
from fencedlease_lab.servers.redis import free_port

SECRET = "s3cr3t-Pa55"
COMMANDS = (["doctor"], ["list"], ["inspect", "k"], ["release", "k", "--force", "--yes"])


@pytest.fixture(autouse=True)
def _no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FENCEDLEASE_URL", raising=False)
    monkeypatch.delenv("FENCEDLEASE_REDIS_URL", raising=False)
    monkeypatch.delenv("FENCEDLEASE_PREFIX", raising=False)


def test_doctor_checks_the_library_list_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    """Doctor's commands are the library's ``ACL_COMMANDS`` read at each check (and SELECT on a
    database other than 0): a command added to the list is checked, with no list of doctor's."""
    assert acl_commands(0) == ACL_COMMANDS
    assert acl_commands(3) == (*ACL_COMMANDS, "SELECT")
    monkeypatch.setattr(_acl, "ACL_COMMANDS", (*ACL_COMMANDS, "XADD"))
    assert acl_commands(0) == (*ACL_COMMANDS, "XADD")


def test_doctor_builds_each_probe_from_command_info() -> None:
    """Arguments from ``COMMAND INFO`` entries as Redis 7 gives them: the fewest the arity
    allows, the key (K) at the first key position, a channel (C) for pub/sub, ``<script> 1 K``
    for the script commands, the library's own argument of INFO."""
    entries = {
        "HSET": [b"hset", -4, [b"write", b"denyoom", b"fast"], 1, 1, 1],
        "GET": [b"get", 2, [b"readonly", b"fast"], 1, 1, 1],
        "EVALSHA": [b"evalsha", -3, [b"noscript", b"movablekeys"], 0, 0, 0],
        "PUBLISH": [b"publish", 3, [b"pubsub", b"fast"], 0, 0, 0],
        "UNSUBSCRIBE": [b"unsubscribe", -1, [b"pubsub", b"noscript"], 0, 0, 0],
        "SPUBLISH": [b"spublish", 3, [b"pubsub", b"fast"], 1, 1, 1],
        "WAIT": [b"wait", 3, [b"noscript"], 0, 0, 0],
        "TIME": [b"time", 1, [b"fast"], 0, 0, 0],
        "INFO": [b"info", -1, [b"loading", b"stale"], 0, 0, 0],
        "XADD": [b"xadd", -5, [b"write", b"denyoom", b"fast"], 1, 1, 1],
    }
    assert {command: _probe(command, entry) for command, entry in entries.items()} == {
        "HSET": ("K", "0", "0"),
        "GET": ("K",),
        "EVALSHA": ("0", "1", "K"),
        "PUBLISH": ("C", "0"),
        "UNSUBSCRIBE": ("C",),
        "SPUBLISH": ("C", "0"),
        "WAIT": ("0", "0"),
        "TIME": (),
        "INFO": ("replication",),
        "XADD": ("K", "0", "0", "0"),
    }


def test_exit_codes() -> None:
    passed, warned, failed = Check("a", "pass", ""), Check("b", "warn", ""), Check("c", "fail", "")
    assert [exit_code(checks, strict=False) for checks in ([passed], [passed, warned],
            [warned, failed])] == [0, 0, 1]  # fmt: skip
    assert [exit_code(checks, strict=True) for checks in ([passed], [passed, warned],
            [warned, failed])] == [0, 1, 1]  # fmt: skip


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
def test_no_url_is_a_usage_error(command: list[str]) -> None:
    result = CliRunner().invoke(main, command)
    assert result.exit_code == 2
    assert "no Redis: give --url or set FENCEDLEASE_URL" in result.output


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
def test_a_malformed_url_is_a_usage_error_without_its_password(command: list[str]) -> None:
    """A URL naming no Redis (another scheme, or a store that lives in the application: memory://,
    sqlite://) is a usage error listing the Redis URLs taken; the library's own refusal of a
    Redis URL (a cluster URL naming a database) too; no password shown."""
    for url in (f"http://u:{SECRET}@h/0", "memory://", "sqlite:///leases.db"):
        result = CliRunner().invoke(main, [*command, "--url", url])
        assert result.exit_code == 2
        shown = url.replace(SECRET, "***")
        assert result.output.endswith(
            "Error: the URL must name a Redis: redis://, rediss://, unix://, redis+sentinel://,"
            f" redis+cluster://, rediss+cluster://; got {shown!r}\n"
        )
    cluster = f"redis+cluster://:{SECRET}@127.0.0.1:{free_port()}/3"
    result = CliRunner().invoke(main, [*command, "--url", cluster])
    assert result.exit_code == 2
    assert "Error: a Redis Cluster has only database 0; got 'redis+cluster://:***@" in result.output
    assert SECRET not in result.output


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
def test_the_deprecated_url_variable_is_read_with_a_warning(command: list[str]) -> None:
    """Each command takes the store from FENCEDLEASE_REDIS_URL when FENCEDLEASE_URL is not set,
    saying on stderr that the name is deprecated; FENCEDLEASE_URL wins when both are set."""
    old = f"redis://:{SECRET}@127.0.0.1:{free_port()}/0"  # nothing listens: the error names it
    result = CliRunner().invoke(main, command, env={"FENCEDLEASE_REDIS_URL": old})
    assert result.stderr.splitlines()[0] == (
        "warning: FENCEDLEASE_REDIS_URL is deprecated: set FENCEDLEASE_URL instead (the one"
        f" variable naming the store); 'redis://:***@127.0.0.1:{old.rsplit(':', 1)[1]}' is used"
    )
    assert old.rsplit(":", 1)[1].partition("/")[0] in result.output  # that URL was tried
    assert SECRET not in result.output
    both = CliRunner().invoke(
        main, command, env={"FENCEDLEASE_REDIS_URL": old, "FENCEDLEASE_URL": "http://h/0"}
    )
    assert both.exit_code == 2
    assert "is deprecated and ignored: FENCEDLEASE_URL is set too and wins" in both.stderr
    assert "'http://h/0'" in both.output  # the new one was used, and refused
    assert SECRET not in both.output


def test_release_without_force_refuses_before_connecting() -> None:
    url = f"redis://:{SECRET}@127.0.0.1:{free_port()}/0"  # nothing listens there
    result = CliRunner().invoke(main, ["release", "k", "--url", url, "--yes"])
    assert result.exit_code == 2
    assert "release deletes a lease whose holder may still be working" in result.output
    assert "Give --force to release anyway (it asks first unless --yes)." in result.output


def test_an_unreachable_redis() -> None:
    """doctor reports a failed ``connect`` check (exit 1); the others cannot run (exit 2)."""
    port = free_port()
    url = f"redis://:{SECRET}@127.0.0.1:{port}/0"
    result = CliRunner().invoke(main, ["doctor", "--url", url, "--json"])
    assert result.exit_code == 1
    document = json.loads(result.output)
    assert document["url"] == f"redis://:***@127.0.0.1:{port}/0"
    assert document["summary"] == {"pass": 0, "warn": 0, "fail": 1}
    (check,) = document["checks"]
    assert (check["name"], check["status"]) == ("connect", "fail")
    assert check["detail"].startswith("ConnectionError: ")
    text = CliRunner().invoke(main, ["doctor", "--url", url])
    assert text.exit_code == 1
    assert "0 passed, 0 warned, 1 failed" in text.output
    for command in COMMANDS[1:]:
        result = CliRunner().invoke(main, [*command, "--url", url])
        assert result.exit_code == 2
        assert result.output.startswith("error: ")
        assert SECRET not in result.output


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
@pytest.mark.parametrize("prefix", ["a{b", "x}", ""])
def test_a_prefix_the_library_refuses_is_a_usage_error(command: list[str], prefix: str) -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"  # never reached
    result = CliRunner().invoke(main, [*command, "--url", url, "--prefix", prefix])
    assert result.exit_code == 2
    assert "Invalid value for '--prefix'" in result.output
    assert "prefix" in result.output.split("Invalid value for '--prefix':", 1)[1]


def test_a_long_key_is_shown_whole_in_a_narrow_terminal(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The key is what an operator copies into ``release``: folded, never cut with an ellipsis."""
    from fencedlease.cli.operator_cli.options import _rich_table
    from fencedlease.cli.operator_cli.reading import _COLUMNS

    monkeypatch.setenv("COLUMNS", "60")
    key = "reports:daily:2026-12-01:eu-west"
    _rich_table("leases under app (1)", _COLUMNS, [[key, "7", "0123456789abcdef", "900", "7"]])
    out = capsys.readouterr().out
    assert "…" not in out
    rows = [line for line in out.splitlines() if line.startswith("│")]
    assert all(line.count("│") == 6 for line in rows)  # every column there, none cropped
    assert "".join(line.split("│")[1].strip() for line in rows) == key


def test_a_url_from_the_environment_is_recorded_as_such() -> None:
    """A URL option left out takes FENCEDLEASE_URL and records its source as the environment
    (what check --replay counts as given, as click's own envvar did); --url wins over it, and
    with neither the value is None from the default."""
    import click

    from fencedlease.cli.commands import url_option

    @click.command()
    @click.option("--url", callback=url_option)
    @click.pass_context
    def show(ctx: click.Context, url: str | None) -> None:
        click.echo(f"{url} {ctx.get_parameter_source('url').name}")  # type: ignore[union-attr]

    env = {"FENCEDLEASE_URL": "redis://h:1/0"}
    assert CliRunner().invoke(show, [], env=env).output == "redis://h:1/0 ENVIRONMENT\n"
    assert CliRunner().invoke(show, ["--url", "redis://o:2/0"], env=env).output == (
        "redis://o:2/0 COMMANDLINE\n"
    )
    assert CliRunner().invoke(show, []).output == "None DEFAULT\n"
