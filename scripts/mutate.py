"""The mutation self-test of ``fencedlease check``: plant realistic safety bugs, see them caught.

Each *mutant* is one realistic safety bug, written as small textual patches (search -> replace;
the search text must occur exactly once in its file, so a refactor that moves the code makes the
mutant fail loudly as *stale* instead of silently not applying; while a refactor moves code, an
edit may name each shape of it, :class:`OneOf`, of which exactly one must apply). A mutant is
applied to a copy of
``src/fencedlease`` in a temporary directory, and ``python -m fencedlease check`` runs with
``PYTHONPATH`` pointing at the copy (its worker processes are spawned from that interpreter with
the same environment and ``sys.path``, so they import the copy too; the run checks it). Each run
uses the check's default arguments plus ``--seed S --out DIR``; a mutant is *killed* by a run
that exits 1 (violations).

Every mutant names the *surfaces* it needs (asyncio workers, the hand-off, the SQL guard, ...).
The copy carries probes (one line each, in the copy only) that note which surfaces a run used; a
run that did not use a mutant's surface and found nothing reports it "not exercised", not
"survived" (the later seeds of that mutant are then skipped).

The control, ``baseline`` (the library unchanged, with the probes), runs first on each seed and
must pass: a violation there is the checker's false alarm, not a kill (``--no-baseline`` skips it).

Usage::

    python scripts/mutate.py                      # every mutant, seeds 1,2,3
    python scripts/mutate.py --quick              # CI: the QUICK mutants, seed 1
    python scripts/mutate.py --mutant acquire-no-incr --seeds 7
    python scripts/mutate.py --list
    python scripts/mutate.py --json out.json --markdown   # + the table for docs/harness.md

Exit status: 0 when every exercised mutant was killed by every run and the baseline passed
every run; 1 otherwise (a survivor, an inconclusive or failed run, a false alarm); 2 for a usage
error or a stale mutant.
"""

# ruff: noqa: E501  (mutants and probes are source text, kept whole)
from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Final

import attrs

ROOT: Final = Path(__file__).resolve().parents[1]
PACKAGE: Final = ROOT / "src" / "fencedlease"
PROBE_ENV: Final = "FENCEDLEASE_MUTATION_PROBES"
RUN_TIMEOUT_S: Final = 900.0


class StaleMutantError(Exception):
    """A patch's search text does not occur exactly once in its file: the code moved."""


@attrs.frozen
class Edit:
    """Replace ``search`` (exactly once) by ``replace`` in ``path`` (relative to the package)."""

    path: str
    search: str
    replace: str


@attrs.frozen
class OneOf:
    """The same change written for each shape the code has had while a refactor moves it (another
    file, other words): exactly one of ``edits`` must apply."""

    edits: tuple[Edit, ...]


@attrs.frozen
class Mutant:
    """One planted bug: ``name``, the ``kind`` of fault, what it does (``summary``), the
    ``surfaces`` a run must use to meet it, and its ``edits``. ``unit_test``: for a bug the check
    cannot show end to end, the pytest node (relative to the repository) that runs against the
    copy in place of ``fencedlease check`` (killed when it fails)."""

    name: str
    kind: str
    summary: str
    surfaces: tuple[str, ...]
    edits: tuple[Edit | OneOf, ...]
    unit_test: str = ""


@attrs.frozen
class Probe:
    """A line inserted before ``anchor`` (a whole line, exactly once) in ``path`` (or, for code a
    refactor moved, in the one of ``moved_to`` that holds it): it notes that the run used
    ``surface``."""

    surface: str
    path: str
    anchor: str
    moved_to: tuple[str, ...] = ()


def apply_edit(text: str, search: str, replace: str, where: str) -> str:
    """``text`` with ``search`` replaced by ``replace``; raises :class:`StaleMutantError` unless
    ``search`` occurs exactly once."""
    count = text.count(search)
    if count != 1:
        raise StaleMutantError(
            f"{where}: the search text occurs {count} times (expected once): {search[:80]!r}"
        )
    return text.replace(search, replace)


def probe_line(surface: str, indent: str) -> str:
    return f'{indent}__import__("fencedlease._mutation_probe", fromlist=["hit"]).hit("{surface}")\n'


def probe_edit(probe: Probe) -> Edit | OneOf:
    """The probe as an edit: its line inserted before its anchor line, at the anchor's indent."""
    anchor = probe.anchor.rstrip("\n") + "\n"
    indent = anchor[: len(anchor) - len(anchor.lstrip())]
    line = probe_line(probe.surface, indent)
    edits = tuple(Edit(path, anchor, line + anchor) for path in (probe.path, *probe.moved_to))
    return edits[0] if len(edits) == 1 else OneOf(edits)


def _variants(item: Edit | OneOf) -> tuple[Edit, ...]:
    return (item,) if isinstance(item, Edit) else item.edits


def resolve(item: Edit | OneOf, read: Callable[[str], str], where: str) -> Edit:
    """The edit of ``item`` that applies to the files ``read(path)`` gives: ``item`` itself, or
    the one variant of a :class:`OneOf` whose file exists and holds its search text once;
    raises :class:`StaleMutantError` when none or several do."""
    if isinstance(item, Edit):
        return item
    fits = []
    for edit in item.edits:
        try:
            text = read(edit.path)
        except FileNotFoundError:
            continue
        if text.count(edit.search) == 1:
            fits.append(edit)
    if len(fits) != 1:
        paths = ", ".join(edit.path for edit in item.edits)
        raise StaleMutantError(
            f"{where}: {len(fits)} of the variants in {paths} apply (expected one): "
            f"{item.edits[0].search[:80]!r}"
        )
    return fits[0]


PROBE_MODULE: Final = '''"""Notes which surfaces a run of a mutant used (written by scripts/mutate.py, copy only)."""

import os

_seen = set()


def hit(surface):
    if surface in _seen:
        return
    _seen.add(surface)
    folder = os.environ.get("FENCEDLEASE_MUTATION_PROBES")
    if folder:
        with open(os.path.join(folder, surface), "a"):
            pass
'''

#: What each surface is. Probed ones have entries in PROBES; the others are read from the
#: run's history (HISTORY_SURFACES).
SURFACES: Final[dict[str, str]] = {
    "redis-lock": "an acquire on the Redis backend (either face)",
    "sync-renewer": "a lease given to the sync face's background renewer",
    "asyncio": "a lease given to the asyncio face's renewal task (asyncio workers)",
    "handoff": "a waiter queued for a hand-off",
    "sql-guard": "fencedlease.db.fence_guard on a SQL resource",
    "sql-guard-strict": "fencedlease.db.fence_guard in strict mode",
    "redis-resource-strict": "RedisFencedResource in strict mode",
    "fenced-resource": "the in-memory FencedResource",
    "redis-resource": "RedisFencedResource",
    "clock-fault": "a clock fault (the wall clock jumps) in the schedule",
}

PROBES: Final[tuple[Probe, ...]] = (
    Probe("redis-lock", "_sync/redis_backend.py", "        decoded = decode_acquire(reply, key)"),
    Probe("redis-lock", "_async/redis_backend.py", "        decoded = decode_acquire(reply, key)"),
    Probe("sync-renewer", "_sync/renewer.py", "        if self._owner.running:"),
    Probe("asyncio", "_async/renewer.py", "        if self._owner.running:"),
    Probe("handoff", "_sync/handoff.py", "        keys, args = self._enqueue_args(key, owner_token, ttl_ms, wait_ms, final)"),
    Probe("handoff", "_async/handoff.py", "        keys, args = self._enqueue_args(key, owner_token, ttl_ms, wait_ms, final)"),
    # A waiter queued by its refused acquire (both faces): no queueing command follows.
    Probe("handoff", "_handoff/base.py", "        self._channels.join(channel, waiter_name(owner_token), event)"),
    Probe("sql-guard", "db/_guard.py", "    access = coerce_access(token_or_lease)"),
    Probe("fenced-resource", "_core/fencing.py", "        with self._lock:\n            state = self._state", ("_core/fenced_resource.py",)),
    Probe("redis-resource", "redis_fencing.py", "        keys = (self._fence_key, self._data_key)"),
)  # fmt: skip


def _when_strict(surface: str, path: str, line: str, condition: str, indent: str) -> Edit:
    """A probe of ``surface`` that notes only a strict store: ``if <condition>:`` and the probe,
    inserted after ``line`` (a whole line, exactly once) of ``path``, at ``indent``."""
    probe = f"{indent}if {condition}:\n" + probe_line(surface, indent + "    ")
    return Edit(path, line, line + probe)


#: The probes that run only in strict mode, one per store whose strict mode a mutant changes.
STRICT_PROBES: Final[dict[str, Edit]] = {
    "sql-guard-strict": _when_strict(
        "sql-guard-strict", "db/_guard.py", "    strict = check_strict(strict)\n",
        "strict", "    ",
    ),
    "redis-resource-strict": _when_strict(
        "redis-resource-strict", "redis_fencing.py",
        "        keys = (self._fence_key, self._data_key)\n", "self._strict", "        ",
    ),
}  # fmt: skip


def _history_has_clock_fault(history: Path) -> bool:
    try:
        lines = history.read_text("utf-8").splitlines()
    except OSError:
        return False
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError:
            continue
        fault = (event.get("detail") or {}).get("fault")
        if event.get("op") == "fault" and isinstance(fault, str) and "clock" in fault:
            return True
    return False


HISTORY_SURFACES: Final[dict[str, Callable[[Path], bool]]] = {
    "clock-fault": _history_has_clock_fault,
}


MUTANTS: Final[tuple[Mutant, ...]] = (
    Mutant(
        "renew-no-owner-check",
        "renew without the owner check",
        "renew_many.lua resets the TTL of the key whoever owns it (and answers its token)",
        ("redis-lock",),
        (Edit("scripts/renew_many.lua", "      elseif holder == owner then", "      elseif true then"),),
    ),
    Mutant(
        "release-no-owner-check",
        "release without the owner check",
        "release.lua deletes (or hands on) the key whoever owns it",
        ("redis-lock",),
        (
            OneOf((
                Edit("scripts/release.lua", "  ours = holder == owner\n", "  ours = true\n"),
                Edit("scripts/release.lua", "local ours = current and holder == owner\n", "local ours = current and true\n"),
            )),
            # ... and on the common release's path, when nobody waits
            Edit("scripts/release.lua", "    if holder ~= owner then\n      return 0\n", "    if false then\n      return 0\n"),
        ),
    ),
    Mutant(
        "renew-recreates-key",
        "renew recreating a missing key",
        "renew_many.lua sets a missing key again for the renewing owner (SET PX) and confirms",
        ("redis-lock",),
        (
            Edit(
                "scripts/renew_many.lua",
                "    elseif not current then\n      replies[i] = 0\n",
                "    elseif not current then\n"
                "      redis.call('SET', KEYS[i], '1:' .. owner, 'PX', ARGV[2 * i])\n"
                "      replies[i] = '1'\n",
            ),
        ),
    ),
    Mutant(
        "renew-zero-is-success",
        "a renewer that reads a 0 reply as success",
        "the renewal schedule confirms a lease on a 0 (key gone or another's) reply",
        ("sync-renewer",),
        (Edit("_core/schedule/heaps.py", "            elif reply > 0:\n", "            elif reply >= 0:\n"),),
    ),
    Mutant(
        "no-body-end-loss-check",
        "the body-end loss check removed",
        "a hold whose lease was lost ends normally (no LeaseLostError at the end of the block)",
        ("redis-lock",),
        (
            Edit(
                "_core/decisions.py",
                "    if lease._state.lost:  # as marked so far",
                "    if False:  # as marked so far",
            ),
        ),
    ),
    Mutant(
        "deadline-from-reply",
        "deadlines taken from the reply instead of the send",
        "the sync renewer dates a confirmed renewal's deadline from its reply",
        ("sync-renewer",),
        (
            Edit(
                "_sync/renewer.py",
                "            replies = self._backend.renew_many(items)\n"
                "        return sent.mono, sent.wall, replies\n",
                "            replies = self._backend.renew_many(items)\n"
                "        sent.mark()\n"
                "        return sent.mono, sent.wall, replies\n",
            ),
        ),
    ),
    Mutant(
        "deadline-from-reply-aio",
        "deadlines taken from the reply instead of the send",
        "the asyncio renewer dates a confirmed renewal's deadline from its reply",
        ("asyncio",),
        (
            Edit(
                "_async/renewer.py",
                "            replies = await self._backend.renew_many(items)\n"
                "        return sent.mono, sent.wall, replies\n",
                "            replies = await self._backend.renew_many(items)\n"
                "        sent.mark()\n"
                "        return sent.mono, sent.wall, replies\n",
            ),
        ),
    ),
    Mutant(
        "acquire-deadline-from-reply",
        "deadlines taken from the reply instead of the send",
        "a grant's deadline counts from the acquire's reply (both faces)",
        ("redis-lock",),
        (
            Edit(
                "_core/attempt.py",
                "        self._in_flight = False\n        state = LeaseState.granted(",
                "        self._in_flight = False\n"
                "        self.sent_mono, self.sent_wall = self._clock.monotonic(), self._clock.time()\n"
                "        state = LeaseState.granted(",
            ),
        ),
    ),
    Mutant(
        "wall-clock-deadlines",
        "wall-clock deadlines",
        "the manager dates its deadlines by the wall time of the clock it is given (clock.time() for clock.monotonic(), both faces)",
        ("redis-lock", "clock-fault"),
        tuple(
            Edit(
                path,
                "        check_clock(clock)\n        batch = check_ms(",
                "        check_clock(clock)\n"
                "        clock = type('WallClock', (), {'monotonic': staticmethod(clock.time), 'time': staticmethod(clock.time),"
                " 'sleep': staticmethod(clock.sleep), **({'async_sleep': staticmethod(clock.async_sleep)} if hasattr(clock, 'async_sleep') else {})})()\n"
                "        batch = check_ms(",
            )
            for path in ("_sync/manager_base.py", "_async/manager_base.py")
        ),
    ),
    Mutant(
        "wall-clock-default-clock",
        "wall-clock deadlines",
        "the library's default clock reads the wall clock for its monotonic time (SystemClock.monotonic is time.time)",
        ("redis-lock", "clock-fault"),
        (Edit("_core/clock.py", "    monotonic = staticmethod(time.monotonic)\n", "    monotonic = staticmethod(time.time)\n"),),
    ),
    Mutant(
        "release-owner-check-one-path",
        "release without the owner check",
        "release.lua deletes the key whoever owns it on its common path only (nobody waits); the hand-off path still checks",
        ("redis-lock",),
        (Edit("scripts/release.lua", "    if holder ~= owner then\n      return 0\n", "    if false then\n      return 0\n"),),
    ),
    Mutant(
        "owner-token-reused",
        "one owner token reused across acquisitions",
        "new_owner_token() is one value per process, so every acquisition of a worker shares it",
        ("redis-lock",),
        (
            Edit(
                "_core/protocol.py",
                "    return os.urandom(16).hex()\n",
                '    return hashlib.sha256(b"%d" % __import__("os").getpid()).hexdigest()[:32]\n',
            ),
        ),
    ),
    Mutant(
        "non-atomic-accept",
        "a non-atomic FencedResource",
        "FencedResource.accept decides outside its lock (check, then set)",
        ("fenced-resource",),
        (
            OneOf(tuple(Edit(
                path,
                "        with self._lock:\n"
                "            state = self._state\n"
                "            outcome = decide(state, access, strict=self._strict)\n"
                "            if isinstance(outcome, FenceState):\n"
                "                self._state = outcome\n"
                "                return access.token\n",
                "        state = self._state\n"
                "        outcome = decide(state, access, strict=self._strict)\n"
                "        if isinstance(outcome, FenceState):\n"
                "            with self._lock:\n"
                "                self._state = outcome\n"
                "            return access.token\n",
            ) for path in ("_core/fencing.py", "_core/fenced_resource.py"))),
        ),
        # a stale holder's write is held inside its accept while the newer holder's read
        # passes (the memory resource's race): it records the older token after the newer
    ),
    Mutant(
        "strict-admits-equal",
        "an equal token accepted in strict mode",
        "a strict FencedResource accepts a token equal to the last one from another lease",
        ("fenced-resource",),
        (
            Edit(
                "_core/fencing.py",
                '    if strict:\n        return "strict"\n',
                '    if strict and access.fingerprint == state.fingerprint:\n        return "strict"\n'
                "    if strict:\n        return FenceState(state.token, access.fingerprint, lease_key)\n",
            ),
        ),
    ),
    Mutant(
        "strict-accepts-equal",
        "an equal token accepted in strict mode",
        "fence_guard(strict=True) accepts a token equal to the last one",
        ("sql-guard-strict",),
        (Edit("db/_guard.py", "    if not strict:\n        stmt.sql(", "    if True:\n        stmt.sql("),),
    ),
    Mutant(
        "strict-accepts-equal-redis",
        "an equal token accepted in strict mode",
        "RedisFencedResource(strict=True) accepts a token equal to the last one",
        ("redis-resource-strict",),
        (Edit("scripts/fenced_check.lua", "  if ARGV[3] == '1' then", "  if false then"),),
    ),
    Mutant(
        "sql-guard-wrong-operator",
        "a guard comparing with the wrong operator (SQL)",
        "fence_guard's upsert moves the fence when the new token is smaller (< for >)",
        ("sql-guard",),
        (
            Edit(
                "db/_guard.py",
                'stmt.sql(f") AND ({new_token} > {old_token}")',
                'stmt.sql(f") AND ({new_token} < {old_token}")',
            ),
        ),
    ),
    Mutant(
        "redis-guard-wrong-operator",
        "a guard comparing with the wrong operator (Redis)",
        "fenced_check.lua compares the stored token with the presented one the wrong way round",
        ("redis-resource",),
        (
            Edit(
                "scripts/fenced_check.lua",
                "  local order = compare_tokens(token, last)",
                "  local order = compare_tokens(last, token)",
            ),
        ),
    ),
    Mutant(
        "aio-body-not-cancelled",
        "the asyncio body not cancelled on loss",
        "an async hold's body runs on after the loss (the cancel is never sent)",
        ("asyncio",),
        (
            OneOf((
                *(Edit(
                    path,
                    "        self._cancel_requested = True\n"
                    '        task.cancel(f"fencedlease: the lease on {self._args.key!r} was lost")\n',
                    "        self._cancel_requested = False\n",
                ) for path in ("_async/manager.py", "_async/hold.py")),
                Edit(
                    "_async/primitives/callers.py",
                    "        self._requested = True\n        task.cancel(self._message)\n",
                    "        self._requested = False\n",
                ),
            )),
        ),
    ),
    Mutant(
        "handoff-no-incr",
        "a hand-off grant without INCR",
        "release.lua hands the key to a waiter with the next token but leaves the counter",
        ("redis-lock", "handoff"),
        (
            OneOf(tuple(
                Edit(
                    "scripts/release.lua",
                    f"      redis.call('INCR', KEYS[2])\n      redis.call('SET', KEYS[1], {name}",
                    f"      redis.call('SET', KEYS[1], {name}",
                )
                for name in ("next_token", "handed_token")
            )),
        ),
    ),
    Mutant(
        "handoff-deadline-from-message",
        "deadlines taken from the reply instead of the send",
        "a grant taken from a hand-off message counts its deadline from the message's arrival,"
        " not from the first queueing send",
        ("redis-lock", "handoff"),
        (
            Edit(
                "_core/attempt.py",
                "        deadline = on_ns_grid(self.queued_mono + reply.ttl_ms / 1000)\n",
                "        deadline = on_ns_grid(self._clock.monotonic() + reply.ttl_ms / 1000)\n",
            ),
            Edit(
                "_core/attempt.py",
                "reply.ttl_ms, self.queued_mono,\n            self.queued_wall,\n",
                "reply.ttl_ms, self._clock.monotonic(),\n            self._clock.time(),\n",
            ),
        ),
        # The deadline outlives the key by the message's delivery: the slow-handoff fault
        # delays that message by ttl/3 and cuts the waiter off, and the next grant of the key
        # falls into the stale claim.
    ),
    Mutant(
        "acquire-no-incr",
        "acquire without INCR (token not increasing)",
        "acquire.lua grants counter + 1 but never INCRs the counter",
        ("redis-lock",),
        (
            Edit("scripts/acquire.lua", "redis.call('INCR', KEYS[2])\nredis.call('SET'", "redis.call('SET'"),
            # ... and on the common grant's path, where the INCR's reply is the token
            Edit(
                "scripts/acquire.lua",
                "  local n = redis.pcall('INCR', KEYS[2])\n",
                "  local n = tonumber(redis.pcall('GET', KEYS[2]) or '0') + 1\n",
            ),
        ),
    ),
    Mutant(
        "renew-after-ttl",
        "renewal interval too long (renew after the TTL)",
        "the renewal interval is heartbeat_ms * 5 (past the TTL for the default ttl/4)",
        ("sync-renewer",),
        (
            Edit(
                "_core/schedule/entry.py",
                "        self.heartbeat_s = heartbeat_ms / 1000\n",
                "        self.heartbeat_s = heartbeat_ms * 5 / 1000\n",
            ),
        ),
    ),
    Mutant(
        "loss-notice-dropped",
        "loss notice never delivered",
        "a renewal refused by Redis stops renewing but never marks the lease lost",
        ("sync-renewer",),
        (
            Edit(
                "_core/schedule/heaps.py",
                "                if not state.releasing:\n"
                "                    state.mark_lost(LossReason.RENEW_REFUSED)\n",
                "                if not state.releasing:\n                    pass\n",
            ),
        ),
    ),
    Mutant(
        "loss-listeners-dropped",
        "loss notice never delivered",
        "marking a lease lost calls none of its listeners (wait_lost, the async body's cancel)",
        ("redis-lock",),
        (
            Edit(
                "_core/state.py",
                "        listeners, self._listeners = self._listeners, []\n"
                "        for listener in listeners:\n"
                "            listener(self)\n",
                "        self._listeners = []\n",
            ),
        ),
    ),
)  # fmt: skip

#: The control: the library as it is, run like a mutant on the same seeds. It must pass (exit
#: 0); a violation there is a false alarm of the checker, and the kills of that seed prove less.
BASELINE: Final = Mutant(
    "baseline", "none: the library unchanged", "no change (the control: must pass)", (), ()
)

#: ``--quick`` (CI): these mutants (and the baseline), one seed, default check arguments: fewer
#: mutants, not shorter runs (four runs, two at once: CI's 30 minutes). Each was killed on every
#: seed of the full score, and each lives in another part of the library (the acquire script, the
#: renewer, the default clock). ``renew-after-ttl`` is killed by construction:
#: every run's ``latency`` fault holds its victim in one lease through replies late by less than
#: ttl - heartbeat, with nothing else on that worker or Redis, and a renewer that renews after
#: the ttl loses it with nothing to explain the loss (property f). ``wall-clock-default-clock``
#: is the one that needs the ``clock`` fault to reach the workers' own clock (libfaketime): its
#: first jump, five ttls forwards, ends every lease of the library's default clock at once.
QUICK: Final[tuple[str, ...]] = (
    "acquire-no-incr",
    "renew-after-ttl",
    "wall-clock-default-clock",
)


# --- applying ---------------------------------------------------------------------------------


def _reader(package: Path) -> Callable[[str], str]:
    return lambda path: (package / path).read_text("utf-8")


def patched_files(mutant: Mutant, read: Callable[[str], str]) -> dict[str, str]:
    """The texts of the files ``mutant`` changes (each read by ``read(path)``), patched; raises
    :class:`StaleMutantError`."""
    return _apply_all(mutant.edits, read, mutant.name)


def _apply_all(
    items: Iterable[Edit | OneOf], read: Callable[[str], str], where: str
) -> dict[str, str]:
    texts: dict[str, str] = {}

    def current(path: str) -> str:
        return texts[path] if path in texts else read(path)

    for item in items:
        edit = resolve(item, current, where)
        try:
            text = current(edit.path)
        except FileNotFoundError:
            raise StaleMutantError(f"{where}: {edit.path} does not exist") from None
        texts[edit.path] = apply_edit(text, edit.search, edit.replace, f"{where}: {edit.path}")
    return texts


def probed_files(read: Callable[[str], str]) -> dict[str, str]:
    """The texts of the files the probes change (each read by ``read(path)``), probes in."""
    probes = [*(probe_edit(probe) for probe in PROBES), *STRICT_PROBES.values()]
    return _apply_all(probes, read, "probe")


def copy_texts(mutant: Mutant | None, package: Path | None = None) -> dict[str, str]:
    """Every file a run's copy changes, as it writes them: the probes, then ``mutant``'s edits
    on top (as they apply to the current source: raises :class:`StaleMutantError`)."""
    read = _reader(PACKAGE if package is None else package)
    texts = probed_files(read)
    if mutant is not None:
        texts.update(patched_files(mutant, lambda path: texts.get(path) or read(path)))
    texts["_mutation_probe.py"] = PROBE_MODULE
    return texts


def make_copy(mutant: Mutant | None, dest: Path) -> Path:
    """Copy the package to ``dest/src/fencedlease`` with the probes and ``mutant`` applied.
    Returns the ``src`` directory to put on ``PYTHONPATH``."""
    src = dest / "src"
    package = src / "fencedlease"
    shutil.copytree(PACKAGE, package, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for path, text in copy_texts(mutant).items():
        (package / path).write_text(text, "utf-8")
    return src


def stale_mutants(mutants: Iterable[Mutant] = MUTANTS) -> list[str]:
    """Why each mutant (or a probe) no longer applies to the current source; empty when all do."""
    try:
        copy_texts(None)
    except StaleMutantError as exc:
        return [f"probe: {exc}"]
    problems = []
    for mutant in mutants:
        try:
            copy_texts(mutant)
        except StaleMutantError as exc:
            problems.append(str(exc))
    return problems


# --- running ----------------------------------------------------------------------------------


@attrs.define
class RunResult:
    """One run of one mutant: ``status`` is ``killed`` (exit 1), ``survived`` (exit 0),
    ``not exercised`` (no violation, and a surface the mutant needs was not used),
    ``inconclusive`` (exit 2) or ``error`` (another exit, a timeout)."""

    mutant: str
    seed: int
    status: str
    exit_code: int | None
    seconds: float
    surfaces: list[str]
    first: str
    out_dir: str


def _first_report(out_dir: Path, output: str) -> str:
    try:
        report = json.loads((out_dir / "report.json").read_text("utf-8"))
    except (OSError, ValueError):
        tail = [line for line in output.splitlines() if line.strip()][-1:]
        return "no report.json" + (f": {tail[0][:160]}" if tail else "")
    for prop in report.get("properties", []):
        for violation in prop.get("violations", []):
            return f"({prop.get('letter')}) {violation.get('message', '')}"
    reasons = report.get("inconclusive") or []
    if reasons:
        return f"proved nothing: {reasons[0]}"
    return "no violation"


def _run_check(cmd: list[str], env: dict[str, str], cwd: Path) -> tuple[int | None, str]:
    """Run ``cmd`` in a session of its own; its exit status (None: timed out) and its output.
    On timeout the whole session (the check, its workers, its servers) gets SIGTERM, then
    SIGKILL: a hung run leaves nothing behind."""
    proc = subprocess.Popen(
        cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        output, _ = proc.communicate(timeout=RUN_TIMEOUT_S)
        return proc.returncode, output
    except subprocess.TimeoutExpired:
        stop_session(proc)
        return None, f"timed out after {RUN_TIMEOUT_S:g} s"


def stop_session(proc: subprocess.Popen[str], grace_s: float = 20.0) -> None:
    """Stop ``proc``, started with ``start_new_session``, and every process of its session:
    SIGTERM (the check then stops its workers and servers), and SIGKILL after ``grace_s``."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, None)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.communicate(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


def run_mutant(mutant: Mutant, seed: int, work: Path, check_args: Sequence[str] = ()) -> RunResult:
    """Run ``fencedlease check`` (default arguments, ``--seed``, ``--out``, ``check_args``) on a
    copy of the package with ``mutant`` applied."""
    base = work / f"{mutant.name}-s{seed}"
    if base.exists():
        shutil.rmtree(base)
    base.mkdir(parents=True)
    src = make_copy(mutant, base)
    probes = base / "probes"
    probes.mkdir()
    out_dir = base / "out"
    # Each mutant run starts a Redis of its own: a shared one named by the environment is left out.
    env = {
        k: v for k, v in os.environ.items() if k not in ("FENCEDLEASE_URL", "FENCEDLEASE_REDIS_URL")
    }
    # The harness of this checkout (not whichever one the environment installed) runs the copy.
    env["PYTHONPATH"] = os.pathsep.join([str(src), str(ROOT / "lab" / "src")])
    env[PROBE_ENV] = str(probes)
    where = subprocess.run(
        [sys.executable, "-c", "import fencedlease; print(fencedlease.__file__)"],
        env=env, capture_output=True, text=True, check=False, cwd=base,
    )  # fmt: skip
    if not where.stdout.strip().startswith(str(src)):
        return RunResult(
            mutant.name, seed, "error", None, 0.0, [],
            f"the copy is not what imports: {where.stdout.strip() or where.stderr[-200:]}",
            str(out_dir),
        )  # fmt: skip
    cmd = [sys.executable, "-m", "fencedlease", "check", "--seed", str(seed), "--out", str(out_dir)]
    if mutant.unit_test:  # pytest's exit 1: a test failed
        cmd = [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--rootdir",
            str(ROOT),
        ]
        cmd += ["-c", str(ROOT / "pyproject.toml"), str(ROOT / mutant.unit_test)]
        check_args = ()
    started = time.monotonic()
    code, output = _run_check([*cmd, *check_args], env, base)
    seconds = time.monotonic() - started
    used = sorted(p.name for p in probes.iterdir())
    history = out_dir / "history.jsonl"
    used += [name for name, seen in HISTORY_SURFACES.items() if seen(history)]
    missing = [s for s in mutant.surfaces if s not in used]
    if code == 1:
        status = "killed"
    elif code in (0, 2) and missing:
        status = "not exercised"
    elif code == 0:
        status = "survived"
    elif code == 2:
        status = "inconclusive"
    else:
        status = "error"
    first = _first_report(out_dir, output)
    if mutant.unit_test:
        first = (
            f"{mutant.unit_test.rpartition('::')[2]}: {'failed' if code == 1 else f'exit {code}'}"
        )
    if status == "not exercised":
        first = f"not exercised: {', '.join(missing)}"
    elif status == "error":
        first = f"exit {code}: {output.strip().splitlines()[-1:] or ''}"
    return RunResult(mutant.name, seed, status, code, round(seconds, 1), used, first, str(out_dir))


@attrs.define
class Score:
    """One mutant's runs and what they add up to."""

    mutant: Mutant
    runs: list[RunResult] = attrs.field(factory=list)

    @property
    def killed(self) -> int:
        return sum(r.status == "killed" for r in self.runs)

    @property
    def exercised(self) -> bool:
        return any(r.status != "not exercised" for r in self.runs)

    @property
    def verdict(self) -> str:
        if not self.runs:
            return "not run"
        if self.mutant is BASELINE:
            clean = sum(r.status == "survived" for r in self.runs)
            return "clean" if clean == len(self.runs) else "FALSE ALARM / not clean"
        if not self.exercised:
            return "not exercised"
        if self.killed == len(self.runs):
            return "killed"
        return "survived" if self.killed == 0 else "partly killed"

    @property
    def first(self) -> str:
        for status in ("killed", "survived", "inconclusive", "error", "not exercised"):
            for run in self.runs:
                if run.status == status:
                    return run.first
        return ""


def run_all(
    mutants: Sequence[Mutant],
    seeds: Sequence[int],
    work: Path,
    jobs: int,
    check_args: Sequence[str],
    log: Callable[[str], None],
) -> list[Score]:
    """Every mutant on every seed (``jobs`` runs at once). A mutant whose first finished run did
    not use its surfaces gets no further runs."""
    scores = {m.name: Score(m) for m in mutants}
    skip: set[str] = set()

    def one(mutant: Mutant, seed: int) -> None:
        if mutant.name in skip:
            return
        result = run_mutant(mutant, seed, work, check_args)
        scores[mutant.name].runs.append(result)
        if result.status == "not exercised":
            skip.add(mutant.name)
        log(f"{mutant.name} seed {seed}: {result.status} ({result.seconds:.0f} s) {result.first}")

    # seed-major order: every mutant gets its first run (and its surface verdict) early
    tasks = [(m, s) for s in seeds for m in mutants]
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        for future in [pool.submit(one, m, s) for m, s in tasks]:
            future.result()
    return [scores[m.name] for m in mutants]


# --- reporting --------------------------------------------------------------------------------


def markdown_table(scores: Sequence[Score]) -> str:
    """The score as the markdown table of ``docs/harness.md``."""
    lines = [
        "| mutant | kind | surfaces | killed / runs | verdict | first report |",
        "|---|---|---|---|---|---|",
    ]
    for score in scores:
        m = score.mutant
        runs = [r for r in score.runs if r.status != "not exercised"]
        first = score.first.replace("|", "\\|")
        if len(first) > 140:
            first = first[:137] + "..."
        test = "live test" if m.unit_test.startswith("tests/live/") else "unit test"
        where = f" ({test}, not `fencedlease check`)" if m.unit_test else ""
        lines.append(
            f"| `{m.name}` | {m.kind} | {', '.join(m.surfaces)}{where} | {score.killed}/{len(runs)} "
            f"| {score.verdict} | {first} |"
        )
    mutants = [s for s in scores if s.mutant is not BASELINE]
    exercised = [s for s in mutants if s.exercised and not s.mutant.unit_test]
    all_killed = sum(s.verdict == "killed" for s in exercised)
    by_unit = [s for s in mutants if s.mutant.unit_test]
    lines.append("")
    lines.append(
        f"{len(mutants) - len(by_unit)} mutants; {len(exercised)} exercised by the default run; "
        f"{all_killed} killed on every seed"
        + (f"; and {len(by_unit)} shown by a test only." if by_unit else ".")
    )
    return "\n".join(lines)


def print_table(scores: Sequence[Score]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="fencedlease check: mutation score", title_justify="left")
    for column in ("mutant", "kind", "killed/run", "verdict", "first report"):
        table.add_column(column, overflow="fold")
    for score in scores:
        runs = [r for r in score.runs if r.status != "not exercised"]
        table.add_row(
            score.mutant.name, score.mutant.kind, f"{score.killed}/{len(runs)}", score.verdict,
            score.first,
        )  # fmt: skip
    Console(width=200).print(table)


def to_json(scores: Sequence[Score], seeds: Sequence[int]) -> dict[str, Any]:
    return {
        "seeds": list(seeds),
        "mutants": [
            {
                "name": s.mutant.name,
                "kind": s.mutant.kind,
                "summary": s.mutant.summary,
                "surfaces": list(s.mutant.surfaces),
                "verdict": s.verdict,
                "killed": s.killed,
                "runs": [attrs.asdict(r) for r in s.runs],
            }
            for s in scores
        ],
    }


def _seeds(text: str) -> list[int]:
    try:
        seeds = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--seeds wants integers like 1,2,3, got {text!r}"
        ) from None
    if not seeds:
        raise argparse.ArgumentTypeError("--seeds names no seed")
    return seeds


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--mutant", action="append", default=[], help="run only this (repeatable)")
    parser.add_argument(
        "--seeds", type=_seeds, default=None, help="comma-separated (default 1,2,3)"
    )
    parser.add_argument(
        "--quick", action="store_true",
        help=f"CI: only {', '.join(QUICK)}, seed 1 (unless --seeds/--mutant say otherwise)",
    )  # fmt: skip
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    parser.add_argument(
        "--no-baseline", action="store_true",
        help="skip the control run of the unchanged library on each seed (it must pass)",
    )  # fmt: skip
    parser.add_argument("--json", dest="json_path", type=Path, help="write the results here")
    parser.add_argument("--markdown", action="store_true", help="also print the docs table")
    parser.add_argument("--jobs", type=int, default=1, help="runs at once (default 1)")
    parser.add_argument("--work-dir", type=Path, help="keep the copies and runs here")
    parser.add_argument(
        "--check-arg", action="append", default=[],
        help="one more argument for fencedlease check (repeatable; the score uses none)",
    )  # fmt: skip
    args = parser.parse_args(argv)

    if args.list:  # with --quick: the quick ones
        for m in MUTANTS if not args.quick else [m for m in MUTANTS if m.name in QUICK]:
            files = sorted({e.path for item in m.edits for e in _variants(item)})
            print(f"{m.name:28} {m.kind:52} {','.join(m.surfaces):24} {' '.join(files)}")
        return 0
    by_name = {m.name: m for m in (BASELINE, *MUTANTS)}
    unknown = [name for name in args.mutant if name not in by_name]
    if unknown:
        parser.error(f"unknown mutant(s): {', '.join(unknown)}; see --list")
    names = args.mutant or (list(QUICK) if args.quick else [m.name for m in MUTANTS])
    mutants = [by_name[name] for name in names]
    if not args.no_baseline and BASELINE not in mutants:
        mutants.insert(0, BASELINE)
    seeds = args.seeds or ([1] if args.quick else [1, 2, 3])
    problems = stale_mutants(mutants)
    if problems:
        for problem in problems:
            print(f"stale mutant: {problem}", file=sys.stderr)
        return 2

    def log(line: str) -> None:
        print(line, flush=True)

    if args.work_dir is not None:
        args.work_dir.mkdir(parents=True, exist_ok=True)
        scores = run_all(mutants, seeds, args.work_dir, args.jobs, args.check_arg, log)
    else:
        with tempfile.TemporaryDirectory(prefix="fencedlease-mutants-") as work:
            scores = run_all(mutants, seeds, Path(work), args.jobs, args.check_arg, log)
    print_table(scores)
    if args.markdown:
        print(markdown_table(scores))
    if args.json_path is not None:
        args.json_path.write_text(json.dumps(to_json(scores, seeds), indent=2) + "\n", "utf-8")
    failed = [s for s in scores if s.exercised and s.verdict not in ("killed", "clean")]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
