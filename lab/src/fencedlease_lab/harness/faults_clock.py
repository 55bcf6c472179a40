"""The ``clock`` fault: the workers' wall clocks jump and strobe; their leases must not notice.

A lease's deadline is counted on the monotonic clock only; the wall clock dates nothing but the
``expires_at`` estimate a caller may persist. Jepsen's clock nemesis (Kingsbury, "Jepsen:
clocks") bumps and strobes the nodes' clocks to find code that trusts wall time. Here the clock
moved is the operating system's, as each worker process sees it, so the fault reaches whatever
reads the wall clock: the library's default clock ([`SystemClock`][fencedlease.SystemClock],
which every worker runs on), redis-py, the stores, the history's ``wall`` readings.

Each worker is started under libfaketime
([`WallClock`][fencedlease_lab.harness.faults_clock.WallClock]: ``LD_PRELOAD``), which adds to
``CLOCK_REALTIME`` the offset written in the run's timestamp file, read again at every call
(``FAKETIME_NO_CACHE``); the monotonic clock is left alone (``FAKETIME_DONT_FAKE_MONOTONIC``),
as a real clock step leaves it. The nemesis moves every worker's wall clock at once by writing
that file ([`WallClock.set`][fencedlease_lab.harness.faults_clock.WallClock.set]).

The fault ([`run_clock_fault`][fencedlease_lab.harness.faults_clock.run_clock_fault]) takes the
``duration_s`` it is given in four steps: the wall clock jumps forwards by several TTLs, then
backwards by several TTLs, then strobes (it flips between the two every few milliseconds), then
the offset is set back to 0. A jump that shortened a lease would show as a loss with no fault to
explain it (the clock fault never explains one); one that lengthened it would let two leases of
the key overlap. Both are properties the checker judges.

[`OffsetClock`][fencedlease_lab.harness.faults_clock.OffsetClock] is the same jump for one
[`Clock`][fencedlease.Clock] given to a manager as ``clock=`` (the live tests' clock).
"""

from __future__ import annotations

import contextlib
import multiprocessing.spawn
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Final

import attrs

__all__ = [
    "JUMP_TTLS",
    "LIBFAKETIME_PATHS",
    "STROBE_PERIOD_S",
    "OffsetClock",
    "WallClock",
    "find_libfaketime",
    "run_clock_fault",
    "spawning_under",
]

#: How far a jump goes, in TTLs (forwards, then backwards).
JUMP_TTLS: Final = 5
#: How long a strobe keeps each of its two offsets, in seconds.
STROBE_PERIOD_S: Final = 0.01
#: Where libfaketime is looked for (the multi-threaded build: the workers run threads).
LIBFAKETIME_PATHS: Final = (
    "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1",
    "/usr/lib/aarch64-linux-gnu/faketime/libfaketimeMT.so.1",
    "/usr/lib/faketime/libfaketimeMT.so.1",
    "/usr/local/lib/faketime/libfaketimeMT.so.1",
)


def find_libfaketime(paths: tuple[str, ...] = LIBFAKETIME_PATHS) -> str | None:
    """The first of ``paths`` that is a file, or None (libfaketime is not installed)."""
    return next((path for path in paths if os.path.isfile(path)), None)


@attrs.frozen
class WallClock:
    """The wall clock of the workers of one run: ``library`` (libfaketime's path) preloaded into
    each, reading its offset from the timestamp file ``path`` at every call."""

    path: str
    library: str

    @classmethod
    def in_folder(cls, folder: Path, library: str) -> WallClock:
        """The run's wall clock, its timestamp file in ``folder``, the offset 0, and its
        launcher ([`python`][fencedlease_lab.harness.faults_clock.WallClock.python]) written
        there once: a process that starts reads it while the next one is being started."""
        clock = cls(str(folder / "wall-clock.faketime"), library)
        clock.set(0.0)
        site = Path(f"{clock.path}.site")
        site.mkdir(exist_ok=True)
        (site / "sitecustomize.py").write_text(_SLEEP_ON_SELECT, "utf-8")
        exports = " ".join(f"{name}='{value}'" for name, value in clock.environ().items())
        script = Path(clock.python)
        script.write_text(
            f"#!/bin/sh\nexport {exports}\n"
            f'export PYTHONPATH="{site}${{PYTHONPATH:+:$PYTHONPATH}}"\n'
            f"exec '{sys.executable}' \"$@\"\n",
            "utf-8",
        )
        script.chmod(0o700)
        return clock

    @property
    def python(self) -> str:
        """The launcher: a shell script that sets
        [`environ`][fencedlease_lab.harness.faults_clock.WallClock.environ] and a
        ``sitecustomize`` of the clock's own, then runs this interpreter."""
        return f"{self.path}.python"

    def environ(self) -> dict[str, str]:
        """The environment a process is started with to run on this clock."""
        return {
            "LD_PRELOAD": self.library,
            "FAKETIME_TIMESTAMP_FILE": self.path,
            "FAKETIME_NO_CACHE": "1",
            "FAKETIME_DONT_FAKE_MONOTONIC": "1",
            # On by default with a recent glibc, the fix moves the timeouts of
            # pthread_cond_timedwait, on which the interpreter hands its lock between threads:
            # each hand-off then waits up to hundreds of milliseconds, and leases expire.
            "FAKETIME_FORCE_MONOTONIC_FIX": "0",
        }

    def set(self, offset_s: float) -> None:
        """Move the wall clock of every process on this clock to real time plus ``offset_s``
        (seconds). The file is replaced whole (a rename), so no reader sees it half written."""
        part = f"{self.path}.{os.getpid()}.{threading.get_ident()}"
        Path(part).write_text(f"{offset_s:+.6f}\n", "ascii")
        os.replace(part, self.path)


#: The ``sitecustomize`` of a process on the wall clock. libfaketime (0.9.10) answers
#: ``clock_nanosleep`` on the monotonic clock, what `time.sleep` calls, with EINVAL when it leaves
#: that clock alone; a wait on ``select``'s relative timeout is not touched.
_SLEEP_ON_SELECT: Final = """import select
import time


def _sleep(seconds):
    if seconds < 0:
        raise ValueError("sleep length must be non-negative")
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        select.select([], [], [], left)


time.sleep = _sleep
"""

#: multiprocessing's spawn executable is one per process: one start at a time changes it.
_SPAWN_LOCK = threading.Lock()


@contextlib.contextmanager
def spawning_under(clock: WallClock | None) -> Iterator[None]:
    """Processes started by a ``spawn`` context inside the block run on ``clock`` (nothing
    changes with None): the interpreter is started through the clock's launcher
    ([`python`][fencedlease_lab.harness.faults_clock.WallClock.python]; ``LD_PRELOAD`` works
    only from a process's start)."""
    if clock is None:
        yield
        return
    with _SPAWN_LOCK:
        before = multiprocessing.spawn.get_executable()
        multiprocessing.spawn.set_executable(clock.python)
        try:
            yield
        finally:
            multiprocessing.spawn.set_executable(before)


class OffsetClock:
    """A [`fencedlease.Clock`][] whose wall time is ``base.time()`` plus ``offsets[index]``
    (seconds, read at every call); ``monotonic`` and ``sleep`` are ``base``'s. ``base``: any
    clock (default the real one: `time.monotonic`, `time.time`,
    `time.sleep`; a [`FakeClock`][fencedlease.testing.FakeClock] in tests)."""

    def __init__(self, offsets: Any, index: int, base: Any = None) -> None:
        self._offsets = offsets
        self._index = index
        self._base = time if base is None else base
        self.monotonic: Callable[[], float] = self._base.monotonic
        self.sleep: Callable[[float], None] = self._base.sleep

    def time(self) -> float:
        """Seconds since the epoch, as the jumped clock reads."""
        return float(self._base.time()) + float(self._offsets[self._index])


def run_clock_fault(
    set_offset: Callable[[float], None],
    *,
    ttl_ms: int,
    duration_s: float,
    stop: threading.Event,
) -> dict[str, Any]:
    """Jump the wall clock (``set_offset(seconds)``, e.g.
    [`WallClock.set`][fencedlease_lab.harness.faults_clock.WallClock.set]) forwards by
    [`JUMP_TTLS`][fencedlease_lab.harness.faults_clock.JUMP_TTLS] x ``ttl_ms``, then backwards as
    far, then strobe between the two, each for a third of ``duration_s`` (seconds); then set it
    back to 0 (also when ``stop`` is set or an error is raised).

    Returns what was done, for the history: ``steps`` (``{"step", "offset_ms", "at_ms"}``:
    ``"forward"``, ``"backward"``, ``"strobe"`` (``offset_ms`` the amplitude, ± that) and
    ``"reset"``; ``at_ms`` milliseconds after the fault began), ``strobe_flips`` (how many
    times the strobe flipped) and ``jump_ms``.
    """
    jump_s = JUMP_TTLS * ttl_ms / 1000
    third = duration_s / 3
    began = time.monotonic()
    steps: list[dict[str, Any]] = []

    def step(name: str, offset_s: float) -> None:
        set_offset(offset_s)
        at_ms = round((time.monotonic() - began) * 1000)
        steps.append({"step": name, "offset_ms": round(offset_s * 1000), "at_ms": at_ms})

    flips = 0
    try:
        step("forward", jump_s)
        if not stop.wait(third):
            step("backward", -jump_s)
            if not stop.wait(third):
                step("strobe", jump_s)
                strobe_end = time.monotonic() + third
                sign = 1.0
                while time.monotonic() < strobe_end and not stop.is_set():
                    set_offset(sign * jump_s)
                    flips += 1
                    sign = -sign
                    time.sleep(STROBE_PERIOD_S)
    finally:
        step("reset", 0.0)
    return {"steps": steps, "strobe_flips": flips, "jump_ms": round(jump_s * 1000)}
