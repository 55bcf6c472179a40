"""scripts/mutate.py: every mutant and probe still applies to the current source (cheap).

A refactor that moves the code a mutant patches makes its search text miss (or match twice); that
must fail here, in the normal suite, not silently shrink the mutation score.
"""

from __future__ import annotations

import importlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import attrs
import pytest

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"

sys.path.insert(0, str(SCRIPTS))  # scripts/mutate.py, imported as the module it is
mutate = importlib.import_module("mutate")
NAMES = [m.name for m in mutate.MUTANTS]


def test_the_set_covers_every_required_kind() -> None:
    kinds = {m.kind for m in mutate.MUTANTS}
    assert kinds == {
        "renew without the owner check",
        "release without the owner check",
        "renew recreating a missing key",
        "a renewer that reads a 0 reply as success",
        "the body-end loss check removed",
        "deadlines taken from the reply instead of the send",
        "wall-clock deadlines",
        "one owner token reused across acquisitions",
        "a non-atomic FencedResource",
        "an equal token accepted in strict mode",
        "a guard comparing with the wrong operator (SQL)",
        "a guard comparing with the wrong operator (Redis)",
        "the asyncio body not cancelled on loss",
        "a hand-off grant without INCR",
        "acquire without INCR (token not increasing)",
        "renewal interval too long (renew after the TTL)",
        "loss notice never delivered",
    }
    assert len(NAMES) == len(set(NAMES)) == 25
    assert set(mutate.QUICK) <= set(NAMES)
    for m in mutate.MUTANTS:
        assert m.surfaces, m.name
        assert set(m.surfaces) <= set(mutate.SURFACES), m.name


def test_every_surface_has_a_probe_or_a_history_reading() -> None:
    probed = {p.surface for p in mutate.PROBES} | set(mutate.STRICT_PROBES)
    assert probed | set(mutate.HISTORY_SURFACES) == set(mutate.SURFACES)


def test_the_baseline_is_the_unchanged_copy() -> None:
    assert mutate.BASELINE not in mutate.MUTANTS
    assert mutate.BASELINE.edits == ()
    assert mutate.copy_texts(mutate.BASELINE) == mutate.copy_texts(None)


def test_no_mutant_is_stale() -> None:
    assert mutate.stale_mutants() == []


@pytest.mark.parametrize("name", NAMES)
def test_each_mutant_changes_its_files_and_python_still_compiles(name: str) -> None:
    mutant = next(m for m in mutate.MUTANTS if m.name == name)
    clean = mutate.copy_texts(None)
    texts = mutate.copy_texts(mutant)

    def before(path: str) -> str:  # the copy without the mutant: probed, or as in the source
        return str(clean.get(path) or (mutate.PACKAGE / path).read_text("utf-8"))

    changed = {path for path in texts if texts[path] != before(path)}
    read = mutate._reader(mutate.PACKAGE)
    chosen = {mutate.resolve(item, read, name).path for item in mutant.edits}
    assert changed == chosen
    for path in changed:
        if path.endswith(".py"):
            compile(texts[path], path, "exec")  # a SyntaxError fails the test


def test_probes_compile_and_mark_only_their_surface(tmp_path: Path) -> None:
    for path, text in mutate.copy_texts(None).items():
        if path.endswith(".py"):
            compile(text, path, "exec")
    namespace: dict[str, object] = {}
    exec(compile(mutate.PROBE_MODULE, "_mutation_probe.py", "exec"), namespace)
    hit = namespace["hit"]
    assert callable(hit)
    os.environ[mutate.PROBE_ENV] = str(tmp_path)
    try:
        hit("handoff")
        hit("handoff")
    finally:
        del os.environ[mutate.PROBE_ENV]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["handoff"]


def test_a_search_text_missing_or_twice_is_stale() -> None:
    assert mutate.apply_edit("a b c", "b", "B", "f") == "a B c"
    with pytest.raises(mutate.StaleMutantError, match="occurs 0 times"):
        mutate.apply_edit("a c", "b", "B", "f")
    with pytest.raises(mutate.StaleMutantError, match="occurs 2 times"):
        mutate.apply_edit("b b", "b", "B", "f")


def test_a_stale_mutant_is_reported_by_name() -> None:
    stale = mutate.Mutant(
        "moved", "k", "s", ("redis-lock",), (mutate.Edit("_core/state.py", "no such text\n", "x"),)
    )
    problems = mutate.stale_mutants([stale])
    assert len(problems) == 1
    assert problems[0].startswith("moved: _core/state.py: the search text occurs 0 times")


def test_an_unknown_mutant_is_a_usage_error() -> None:
    with pytest.raises(SystemExit) as exc:
        mutate.main(["--mutant", "no-such-mutant"])
    assert exc.value.code == 2


def test_history_surface_reads_clock_faults(tmp_path: Path) -> None:
    history = tmp_path / "history.jsonl"
    history.write_text(
        '{"process":"nemesis","op":"fault","type":"invoke","detail":{"fault":"partition"}}\n',
        "utf-8",
    )
    assert mutate.HISTORY_SURFACES["clock-fault"](history) is False
    history.write_text(
        '{"process":"nemesis","op":"fault","type":"invoke","detail":{"fault":"clock-jump"}}\n',
        "utf-8",
    )
    assert mutate.HISTORY_SURFACES["clock-fault"](history) is True
    assert mutate.HISTORY_SURFACES["clock-fault"](tmp_path / "missing.jsonl") is False


def _run(name: str, seed: int, status: str, first: str) -> object:
    return mutate.RunResult(name, seed, status, None, 1.0, [], first, "")


def test_verdicts_and_the_docs_table() -> None:
    by = {m.name: m for m in mutate.MUTANTS}
    scores = [
        mutate.Score(mutate.BASELINE, [_run("baseline", 1, "survived", "no violation")]),
        mutate.Score(
            by["acquire-no-incr"],
            [
                _run("acquire-no-incr", 1, "killed", "(d) token 1 | twice"),
                _run("acquire-no-incr", 2, "killed", "(d) again"),
            ],
        ),
        mutate.Score(
            by["renew-no-owner-check"],
            [
                _run("renew-no-owner-check", 1, "survived", "no violation"),
                _run("renew-no-owner-check", 2, "killed", "(f) overlap"),
            ],
        ),
        mutate.Score(
            by["aio-body-not-cancelled"],
            [_run("aio-body-not-cancelled", 1, "not exercised", "not exercised: asyncio")],
        ),
    ]
    assert [s.verdict for s in scores] == ["clean", "killed", "partly killed", "not exercised"]
    assert scores[2].first == "(f) overlap"  # a kill is reported before a survival
    table = mutate.markdown_table(scores).splitlines()
    assert table[3] == (
        "| `acquire-no-incr` | acquire without INCR (token not increasing) | redis-lock | 2/2 "
        "| killed | (d) token 1 \\| twice |"
    )
    assert table[5].startswith("| `aio-body-not-cancelled` | the asyncio body not cancelled on")
    assert table[5].endswith("| asyncio | 0/0 | not exercised | not exercised: asyncio |")
    assert table[-1] == "3 mutants; 2 exercised by the default run; 1 killed on every seed."


def test_a_mutant_shown_by_a_unit_test_names_an_existing_test_and_is_counted_apart() -> None:
    """Every mutant of the set is run end to end (the memory resource's race shows a non-atomic
    accept); one shown by a unit test in its place names an existing test and the table counts
    it apart from the check's mutants."""
    assert [m.name for m in mutate.MUTANTS if m.unit_test] == []
    unit = [
        attrs.evolve(
            next(m for m in mutate.MUTANTS if m.name == "non-atomic-accept"),
            unit_test="tests/unit/test_fencing.py::test_an_accept_decides_and_records_in_one_step",
        )
    ]
    for mutant in unit:
        path, _, test = mutant.unit_test.partition("::")
        assert f"def {test}(" in (SCRIPTS.parent / path).read_text("utf-8")
    path, _, test = unit[0].unit_test.partition("::")
    scores = [
        mutate.Score(unit[0], [_run(unit[0].name, 1, "killed", f"{test}: failed")]),
        mutate.Score(
            next(m for m in mutate.MUTANTS if m.name == "acquire-no-incr"),
            [_run("acquire-no-incr", 1, "killed", "(d) token 1")],
        ),
    ]
    table = mutate.markdown_table(scores).splitlines()
    assert table[2] == (
        "| `non-atomic-accept` | a non-atomic FencedResource | fenced-resource (unit "
        f"test, not `fencedlease check`) | 1/1 | killed | {test}: failed |"
    )
    assert table[-1] == (
        "1 mutants; 1 exercised by the default run; 1 killed on every seed; and 1 shown by a "
        "test only."
    )


def test_run_check_gives_the_exit_status_and_the_output(tmp_path: Path) -> None:
    code, output = mutate._run_check(
        [sys.executable, "-c", "print('checked'); raise SystemExit(3)"], dict(os.environ), tmp_path
    )
    assert (code, output) == (3, "checked\n")


def test_a_hung_check_is_stopped_with_its_whole_session(tmp_path: Path) -> None:
    pid_file = tmp_path / "grandchild.pid"
    script = (
        "import pathlib, signal, subprocess; signal.signal(signal.SIGTERM, signal.SIG_IGN);"
        " child = subprocess.Popen(['sleep', '600']);"
        f" pathlib.Path({str(pid_file)!r}).write_text(str(child.pid)); signal.pause()"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        while not pid_file.exists() or not pid_file.read_text():  # the session is complete
            assert proc.poll() is None
            time.sleep(0.01)
        mutate.stop_session(proc, grace_s=0.2)  # SIGTERM ignored by the child: SIGKILL follows
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGKILL
    stat = Path(f"/proc/{pid_file.read_text()}/stat")
    deadline = time.monotonic() + 30.0  # the grandchild was signalled; wait for its end
    while stat.exists() and time.monotonic() < deadline:
        try:
            if stat.read_text().split(") ", 1)[1].startswith("Z"):  # dead, not yet reaped
                break
        except FileNotFoundError:  # reaped meanwhile
            break
        time.sleep(0.01)
    else:
        assert not stat.exists(), "the grandchild outlived its session's stop"


def test_one_of_applies_the_single_variant_that_fits() -> None:
    texts = {"old.py": "x = 1\n", "new.py": "y = 1\n"}

    def read(path: str) -> str:
        if path not in texts:
            raise FileNotFoundError(path)
        return texts[path]

    moved = mutate.OneOf(
        (mutate.Edit("old.py", "x = 1", "x = 2"), mutate.Edit("gone.py", "x = 1", "x = 2"))
    )
    assert mutate.resolve(moved, read, "m") == mutate.Edit("old.py", "x = 1", "x = 2")
    assert mutate._apply_all([moved], read, "m") == {"old.py": "x = 2\n"}
    neither = mutate.OneOf(
        (mutate.Edit("old.py", "z = 1", "z = 2"), mutate.Edit("gone.py", "z = 1", "z = 2"))
    )
    with pytest.raises(mutate.StaleMutantError, match=r"0 of the variants in old\.py, gone\.py"):
        mutate.resolve(neither, read, "m")
    both = mutate.OneOf((mutate.Edit("old.py", "= 1", "= 2"), mutate.Edit("new.py", "= 1", "= 2")))
    with pytest.raises(mutate.StaleMutantError, match="2 of the variants"):
        mutate.resolve(both, read, "m")
