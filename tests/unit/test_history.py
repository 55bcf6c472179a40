"""The JSON-lines history: one file per process, invocations paired with completions, merged by
time."""

from __future__ import annotations

import itertools
import json
import threading
from pathlib import Path

import pytest

from fencedlease_lab.harness.history import (
    Event,
    HistoryWriter,
    merge_histories,
    read_history,
    write_history,
)


def fake_clock(start: float, step: float = 1.0) -> object:
    counter = itertools.count()
    return lambda: start + step * next(counter)


def test_invoke_and_completion_share_an_id_and_the_invocation_fields(tmp_path: Path) -> None:
    """A completion repeats the invocation's fields unless it gives its own, with the same id."""
    path = tmp_path / "w0.jsonl"
    with HistoryWriter(path, "w0", clock_mono=fake_clock(10.0), clock_wall=fake_clock(1e9)) as w:
        op = w.invoke("write", key="k", token=3, value=8)
        op.fail(outcome="stale", detail={"last": 4})
        second = w.invoke("read", token=3)
        second.ok(value=7)
    events = read_history(path)
    assert [(e.op, e.type, e.id) for e in events] == [
        ("write", "invoke", 0), ("write", "fail", 0), ("read", "invoke", 1), ("read", "ok", 1),
    ]  # fmt: skip
    assert events[1] == Event(
        "w0", "write", "fail", 11.0, 1e9 + 1, id=0, key="k", token=3, outcome="stale", value=8,
        detail={"last": 4},
    )  # fmt: skip
    assert events[3].value == 7
    assert events[3].token == 3


def test_an_operation_completes_once(tmp_path: Path) -> None:
    """A second completion of the same operation is refused."""
    with HistoryWriter(tmp_path / "h.jsonl", "w0") as writer:
        op = writer.invoke("acquire")
        op.ok(token=1)
        with pytest.raises(RuntimeError, match="already completed"):
            op.info()


def test_each_line_is_one_json_object(tmp_path: Path) -> None:
    """The file is JSON lines with the documented keys."""
    path = tmp_path / "h.jsonl"
    with HistoryWriter(path, "nemesis") as writer:
        writer.record("fault", "invoke", id=0, detail={"fault": "partition", "target": "w1"})
    (line,) = path.read_text().splitlines()
    data = json.loads(line)
    assert sorted(data) == sorted(
        ["process", "op", "type", "mono", "wall", "id", "grant", "key", "token", "outcome",
         "value", "detail"]
    )  # fmt: skip
    assert data["detail"] == {"fault": "partition", "target": "w1"}


def test_closed_writer_refuses_records(tmp_path: Path) -> None:
    """Recording after close is an error, not a silent loss."""
    writer = HistoryWriter(tmp_path / "h.jsonl", "w0")
    writer.close()
    writer.close()
    with pytest.raises(RuntimeError, match="closed"):
        writer.record("x", "info")


def test_merge_orders_files_by_monotonic_time(tmp_path: Path) -> None:
    """Events of several processes come out in mono order; ties keep the files' order."""
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    write_history(a, [Event("w0", "x", "info", t, 0.0) for t in (1.0, 3.0, 5.0)])
    write_history(b, [Event("w1", "x", "info", t, 0.0) for t in (2.0, 3.0, 4.0)])
    merged = merge_histories([a, b], tmp_path / "all.jsonl")
    assert [(e.process, e.mono) for e in merged] == [
        ("w0", 1.0), ("w1", 2.0), ("w0", 3.0), ("w1", 3.0), ("w1", 4.0), ("w0", 5.0),
    ]  # fmt: skip
    assert read_history(tmp_path / "all.jsonl") == merged


def test_threads_of_one_process_never_interleave_lines(tmp_path: Path) -> None:
    """Four threads writing 200 events each give 800 whole lines."""
    path = tmp_path / "h.jsonl"
    with HistoryWriter(path, "w0") as writer:

        def spam(n: int) -> None:
            for i in range(200):
                writer.record("x", "info", value=n * 1000 + i, detail={"pad": "y" * 200})

        threads = [threading.Thread(target=spam, args=(n,)) for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    events = read_history(path)
    assert len(events) == 800
    assert sorted(e.value or 0 for e in events) == sorted(
        n * 1000 + i for n in range(4) for i in range(200)
    )
    assert [e.mono for e in events] == sorted(e.mono for e in events)


def test_a_last_line_cut_short_is_skipped(tmp_path: Path) -> None:
    """A process killed mid-line leaves a partial last line: it is dropped."""
    path = tmp_path / "h.jsonl"
    write_history(path, [Event("w0", "x", "info", 1.0, 0.0)])
    with path.open("a") as file:
        file.write('{"process": "w0", "op": "wri')
    assert [e.mono for e in read_history(path)] == [1.0]


def test_a_bad_line_in_the_middle_names_its_line(tmp_path: Path) -> None:
    """Corruption elsewhere is an error with the line number."""
    path = tmp_path / "h.jsonl"
    path.write_text(
        '{"process": "w0", "op": "x", "type": "info", "mono": 1, "wall": 0}\n'
        '{"process": "w0", "op": "x", "type": "maybe", "mono": 2, "wall": 0}\n'
        '{"process": "w0", "op": "x", "type": "info", "mono": 3, "wall": 0}\n'
    )
    with pytest.raises(ValueError, match=r"h\.jsonl:2: event type must be one of"):
        read_history(path)


def test_tokens_past_2_53_and_up_to_2_63_stay_exact(tmp_path: Path) -> None:
    """Fencing tokens go up to 2**63 - 1: written and read back (and merged) as exact ints."""
    path = tmp_path / "w0.jsonl"
    tokens = [2**53, 2**53 + 1, 2**63 - 1]
    with HistoryWriter(path, "w0") as writer:
        for token in tokens:
            writer.invoke("acquire").ok(token=token)
    assert '"token":9007199254740993' in path.read_text("utf-8")
    ok = [e.token for e in read_history(path) if e.type == "ok"]
    assert ok == [9_007_199_254_740_992, 9_007_199_254_740_993, 9_223_372_036_854_775_807]
    merged = merge_histories([path], tmp_path / "all.jsonl")
    assert [e.token for e in merged if e.type == "ok"] == tokens


@pytest.mark.parametrize("token", [9.007199254740993e15, 2.5, 1e300])
def test_a_float_that_is_not_an_exact_integer_is_refused(token: float) -> None:
    """A token written as a float past 2**53 (or with a fraction) is an error, not rounded."""
    line = {
        "process": "w0",
        "op": "acquire",
        "type": "ok",
        "mono": 1.0,
        "wall": 2.0,
        "token": token,
    }
    with pytest.raises(ValueError, match="exact integer"):
        Event.from_dict(line)
    assert Event.from_dict({**line, "token": 34.0}).token == 34


def test_merge_redacts_every_string_of_every_event(tmp_path: Path) -> None:
    """With ``redact``, the merged history (file and events) holds no secret, in any field or
    nested detail; numbers are left alone."""
    from fencedlease._core.redact import redact_text

    url = "redis://user:s3cret@h:6379/0"
    part = tmp_path / "w0.jsonl"
    with HistoryWriter(part, "w0", clock_mono=fake_clock(1.0), clock_wall=fake_clock(1e9)) as w:
        w.record(
            "acquire",
            "info",
            token=7,
            outcome="backend-error",
            detail={"error": f"ConnectionError: {url}", "nested": [{"why": "AUTH s3cret"}]},
        )
    out = tmp_path / "history.jsonl"
    events = merge_histories([part], out, redact=lambda text: redact_text(text, url))
    assert events[0].detail == {
        "error": "ConnectionError: redis://user:***@h:6379/0",
        "nested": [{"why": "AUTH ***"}],
    }
    assert events[0].token == 7
    assert "s3cret" not in out.read_text("utf-8")
    assert read_history(out) == events
