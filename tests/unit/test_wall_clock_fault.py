"""The ``clock`` fault moves the wall clock of a process started on the run's libfaketime clock
for real: the library's default clock reads the jump, the monotonic clock does not move."""

from __future__ import annotations

import multiprocessing
import multiprocessing.spawn
import time
from pathlib import Path
from typing import Any

import pytest

from fencedlease import SystemClock
from fencedlease_lab.harness.faults_clock import WallClock, find_libfaketime, spawning_under

LIBRARY = find_libfaketime()
SYSTEM_CLOCK = SystemClock()
pytestmark = pytest.mark.skipif(LIBRARY is None, reason="libfaketime is not installed")


def _read_clocks(ready: Any, jumped: Any, out: Any) -> None:
    """In the child: the default clock's readings before and after the parent's jump."""
    before = (SYSTEM_CLOCK.time(), SYSTEM_CLOCK.monotonic())
    ready.set()
    jumped.wait(30.0)
    out.put((before, (SYSTEM_CLOCK.time(), SYSTEM_CLOCK.monotonic())))


def test_a_jump_reaches_the_default_clock_of_a_started_process(tmp_path: Path) -> None:
    """Written mid-run, an offset of +1000 s moves the child's default wall clock by 1000 s
    (within the real seconds that passed) and leaves its monotonic clock on the parent's."""
    assert LIBRARY is not None
    clock = WallClock.in_folder(tmp_path, LIBRARY)
    ctx = multiprocessing.get_context("spawn")
    ready, jumped, out = ctx.Event(), ctx.Event(), ctx.Queue()
    proc = ctx.Process(target=_read_clocks, args=(ready, jumped, out), daemon=True)
    with spawning_under(clock):
        proc.start()
    try:
        assert ready.wait(60.0)
        clock.set(1000.0)
        jumped.set()
        (wall0, mono0), (wall1, mono1) = out.get(timeout=30.0)
        parent_mono = time.monotonic()
    finally:
        proc.join(10.0)
    assert 1000.0 <= wall1 - wall0 <= 1000.0 + (mono1 - mono0) + 0.01
    assert mono0 <= mono1 <= parent_mono  # one monotonic clock: not faked
    assert abs(wall0 - time.time()) < 60.0  # offset 0 before the jump
    assert Path(clock.path).read_text("ascii") == "+1000.000000\n"


def test_spawning_under_restores_the_interpreter(tmp_path: Path) -> None:
    """After the block, processes are started with the interpreter they were before."""
    assert LIBRARY is not None
    before = multiprocessing.spawn.get_executable()
    with spawning_under(WallClock.in_folder(tmp_path, LIBRARY)):
        assert multiprocessing.spawn.get_executable() != before
    assert multiprocessing.spawn.get_executable() == before


def test_the_launcher_is_written_once(tmp_path: Path) -> None:
    """Starting processes does not rewrite the launcher or its ``sitecustomize`` (a process
    still starting may be reading them): both keep the bytes and the time the clock gave them."""
    assert LIBRARY is not None
    clock = WallClock.in_folder(tmp_path, LIBRARY)
    files = [Path(clock.python), Path(f"{clock.path}.site") / "sitecustomize.py"]
    before = [(f.read_bytes(), f.stat().st_mtime_ns) for f in files]
    for _ in range(2):
        with spawning_under(clock):
            pass
    assert [(f.read_bytes(), f.stat().st_mtime_ns) for f in files] == before
