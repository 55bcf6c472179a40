"""``fencedlease doctor``, ``inspect``, ``list`` and ``release`` without a Redis: the usage errors,
the refusals that come before any connection, an unreachable server, and that no output shows the
URL's password. The live behaviour is in tests/live/test_doctor.py and test_operator_cli.py."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from fencedlease._acl import ACL_COMMANDS
from fencedlease.lab.cli import main
from fencedlease.lab.doctor import Check, exit_code
from fencedlease.lab.doctor_acl import ACL_PROBES
from fencedlease.lab.servers.redis import free_port

SECRET = "s3cr3t-Pa55"
COMMANDS = (["doctor"], ["list"], ["inspect", "k"], ["release", "k", "--force", "--yes"])


@pytest.fixture(autouse=True)
def _no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FENCEDLEASE_URL", raising=False)
    monkeypatch.delenv("FENCEDLEASE_PREFIX", raising=False)


def test_doctor_probes_every_command_the_library_needs() -> None:
    assert sorted(ACL_PROBES) == list(ACL_COMMANDS)


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
    result = CliRunner().invoke(main, [*command, "--url", f"http://u:{SECRET}@h/0"])
    assert result.exit_code == 2
    assert "Redis URL must specify one of the following schemes" in result.output
    assert SECRET not in result.output


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
