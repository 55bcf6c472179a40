"""The ``fencedlease`` script without the ``lab`` extra: one line naming the extra, exit 2."""

from __future__ import annotations

import sys

import pytest

from fencedlease.lab import entry

MESSAGE = (
    "fencedlease: the command line needs the lab extra ({} is not installed): "
    'pip install -e ".[lab]" in a clone of fencedlease\n'
)


def test_a_missing_click_is_named_with_the_install_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delitem(sys.modules, "fencedlease.lab.cli", raising=False)
    monkeypatch.setitem(sys.modules, "click", None)  # import click -> ModuleNotFoundError
    with pytest.raises(SystemExit) as exited:
        entry.main()
    assert exited.value.code == 2
    assert capsys.readouterr().err == MESSAGE.format("click")


def test_a_package_a_command_imports_when_it_runs_is_named_too(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """rich and matplotlib are imported by the commands that draw; the same line, exit 2."""
    from fencedlease.lab import cli

    def draws() -> None:
        raise ModuleNotFoundError("No module named 'matplotlib.pyplot'", name="matplotlib.pyplot")

    monkeypatch.setattr(cli, "main", draws)
    with pytest.raises(SystemExit) as exited:
        entry.main()
    assert exited.value.code == 2
    assert capsys.readouterr().err == MESSAGE.format("matplotlib.pyplot")


def test_another_missing_module_is_not_hidden(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "fencedlease.lab.cli", raising=False)
    monkeypatch.setitem(sys.modules, "fencedlease.lab.harness.kinds", None)
    with pytest.raises(ModuleNotFoundError) as raised:
        entry.main()
    assert raised.value.name == "fencedlease.lab.harness.kinds"


def test_with_the_extra_the_command_line_runs(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "argv", ["fencedlease", "--help"])
    with pytest.raises(SystemExit) as exited:
        entry.main()
    assert exited.value.code == 0
    assert "doctor" in capsys.readouterr().out
