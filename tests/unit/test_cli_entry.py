"""The ``fencedlease`` script without its extras: one line naming the extra to install, exit 2;
the ``cli`` extra (click, rich) for every command, ``lab`` for ``check``, which the lab (the
fencedlease-lab distribution) adds through the ``fencedlease.commands`` entry-point group."""

from __future__ import annotations

import importlib.metadata
import sys
from pathlib import Path

import pytest

from fencedlease.cli import commands, entry

MESSAGE = (
    "fencedlease: the command line needs the {} extra ({} is not installed): "
    'pip install -e ".[{}]" in a clone of fencedlease\n'
)


def test_a_missing_click_is_named_with_the_install_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without click (the cli extra) the script says to install the cli extra, exit 2."""
    monkeypatch.delitem(sys.modules, "fencedlease.cli.commands", raising=False)
    monkeypatch.setitem(sys.modules, "click", None)  # import click -> ModuleNotFoundError
    with pytest.raises(SystemExit) as exited:
        entry.main()
    assert exited.value.code == 2
    assert capsys.readouterr().err == MESSAGE.format("cli", "click", "cli")


@pytest.mark.parametrize(("module", "extra"), [("rich.table", "cli"), ("matplotlib.pyplot", "lab")])
def test_a_package_a_command_imports_when_it_runs_is_named_too(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], module: str, extra: str
) -> None:
    """rich (cli) and matplotlib (lab) are imported by the commands that draw: their extra's
    line, exit 2."""

    def draws() -> None:
        raise ModuleNotFoundError(f"No module named {module!r}", name=module)

    monkeypatch.setattr(commands, "main", draws)
    with pytest.raises(SystemExit) as exited:
        entry.main()
    assert exited.value.code == 2
    assert capsys.readouterr().err == MESSAGE.format(extra, module, extra)


def test_another_missing_module_is_not_hidden(monkeypatch: pytest.MonkeyPatch) -> None:
    """A module of no extra that fails to import is raised as it is, not explained away."""
    monkeypatch.delitem(sys.modules, "fencedlease_lab.cli", raising=False)
    monkeypatch.setitem(sys.modules, "fencedlease_lab.harness.kinds", None)
    monkeypatch.setattr(commands.main, "commands", {})  # check not registered yet
    monkeypatch.setattr(sys, "argv", ["fencedlease", "check", "--help"])
    with pytest.raises(ModuleNotFoundError) as raised:
        entry.main()
    assert raised.value.name == "fencedlease_lab.harness.kinds"


def test_with_the_extra_the_command_line_runs(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """With the extras installed, --help lists every command."""
    monkeypatch.setattr(sys, "argv", ["fencedlease", "--help"])
    with pytest.raises(SystemExit) as exited:
        entry.main()
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert [line.split()[0] for line in out.split("Commands:\n")[1].splitlines()] == [
        "check", "doctor", "inspect", "list", "release",
    ]  # fmt: skip


def test_check_without_the_lab_extra_says_so_before_it_starts(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """fencedlease check with a package of the lab extra missing stops at once (exit 2) with the
    line naming the lab extra and the package, before any server or output directory."""
    monkeypatch.setitem(sys.modules, "toxiproxy", None)
    monkeypatch.setattr(sys, "argv", ["fencedlease", "check", "--out", f"{tmp_path}/out"])
    with pytest.raises(SystemExit) as exited:
        entry.main()
    assert exited.value.code == 2
    assert capsys.readouterr().err == (
        "fencedlease: fencedlease check needs the lab extra (toxiproxy-python is not installed):"
        ' pip install -e ".[lab]" in a clone of fencedlease\n'
    )
    assert not (tmp_path / "out").exists()


def test_check_is_the_lab_s_entry_point() -> None:
    """The installed lab registers ``check`` in the ``fencedlease.commands`` group; the library
    lists no command of its own there."""
    group = importlib.metadata.entry_points(group=commands.COMMAND_GROUP)
    assert {(e.name, e.value) for e in group} == {("check", "fencedlease_lab.cli:check")}
    assert "check" not in commands.COMMANDS


NO_LAB = (
    "fencedlease: fencedlease check needs the lab extra (fencedlease-lab is not installed):"
    ' pip install -e ".[lab]" in a clone of fencedlease\n'
)


@pytest.mark.parametrize(
    "args", [["check"], ["check", "--seed", "1", "--out", "x"], ["check", "--help"]]
)
def test_check_without_the_lab_says_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], args: list[str]
) -> None:
    """Without the lab (no entry point), ``fencedlease check``, whatever its arguments, is one
    line naming the lab and how to install it, exit 2, and nothing of the lab is imported."""
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group: ())
    monkeypatch.setattr(commands.main, "commands", {})
    monkeypatch.setitem(sys.modules, "fencedlease_lab", None)  # an import of it would fail
    monkeypatch.setattr(sys, "argv", ["fencedlease", *args])
    with pytest.raises(SystemExit) as exited:
        entry.main()
    assert exited.value.code == 2
    assert capsys.readouterr() == ("", NO_LAB)


def test_without_the_lab_help_still_lists_check(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without the lab, ``fencedlease --help`` lists ``check``, saying it needs the lab, beside
    the operator's commands."""
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group: ())
    monkeypatch.setattr(commands.main, "commands", {})
    monkeypatch.setattr(sys, "argv", ["fencedlease", "--help"])
    with pytest.raises(SystemExit) as exited:
        entry.main()
    assert exited.value.code == 0
    listed = capsys.readouterr().out.split("Commands:\n")[1].splitlines()
    assert [line.split()[0] for line in listed] == ["check", "doctor", "inspect", "list", "release"]
    assert (
        listed[0].split(None, 1)[1]
        == "Needs the lab (the fencedlease-lab distribution): not installed."
    )
