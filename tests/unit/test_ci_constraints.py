"""CI's oldest-versions run (.ci/oldest.txt) pins each of the library's dependencies to the lowest
version pyproject.toml allows: a raised floor without a raised pin would test a version the
project no longer allows, and a dependency without a pin would go untested at its floor."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib", reason="tomllib is in the standard library from 3.11")

ROOT = Path(__file__).resolve().parents[2]


def test_the_oldest_constraints_pin_every_dependency_at_its_floor() -> None:
    """Every ``name>=floor`` of [project] dependencies is ``name==floor`` in .ci/oldest.txt, and
    the file pins nothing else."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    floors = {}
    for requirement in project["dependencies"]:
        match = re.fullmatch(r"([A-Za-z0-9_.-]+)>=([0-9.]+)", requirement)
        assert match, f"{requirement!r}: a dependency is given as name>=floor"
        floors[match[1].lower()] = match[2]
    pins = {}
    for line in (ROOT / ".ci" / "oldest.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, version = line.split("==")
            pins[name.lower()] = version
    assert {name: version.removesuffix(".0") for name, version in pins.items()} == {
        name: floor.removesuffix(".0") for name, floor in floors.items()
    }
