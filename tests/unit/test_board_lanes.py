"""The board slot of a worker of several lanes shows its holder: another lane that starts or
ends a cycle meanwhile does not hide it (the nemesis aims at the holder the board shows, and
reads the key it holds there)."""

from __future__ import annotations

import contextlib
import multiprocessing
import random
import time
from collections.abc import Iterator
from pathlib import Path

from fencedlease_lab.harness.history import HistoryWriter
from fencedlease_lab.harness.nemesis import NemesisEnv
from fencedlease_lab.harness.recorder import Recorder
from fencedlease_lab.harness.resources import ResourceSpec
from fencedlease_lab.harness.workload import (
    ACQUIRING,
    BODY,
    HOLDING,
    IDLE,
    Board,
    Cycle,
    WorkerConfig,
)
from fencedlease_lab.harness.workload import cycle as cycles

KEYS = ("k0", "k1", "k2")


def config() -> WorkerConfig:
    return WorkerConfig(
        index=1, name="w1", redis_url="redis://unused", prefix="p", keys=KEYS, mode="fenced",
        resource=ResourceSpec("sqlite", "unused"), history_path="unused", ttl_ms=1000,
        heartbeat_ms=250, body_ms=10, wait_ms=100, socket_timeout_ms=500, duration_s=1.0,
        seed=3, wait_share=0.5,
    )  # fmt: skip


def shown(board: Board) -> tuple[int, int, int]:
    return board.get(1, "phase"), board.get(1, "token"), board.get(1, "key")


def test_a_holding_lane_is_not_hidden_by_the_others(tmp_path: Path) -> None:
    board = Board(multiprocessing.get_context("spawn"), 2)
    with HistoryWriter(tmp_path / "h.jsonl", "w1") as writer:
        recorder = Recorder(writer)
        a = Cycle(config(), board, recorder, random.Random(1))
        assert shown(board) == (ACQUIRING, 0, KEYS.index(a.key))
        b = Cycle(config(), board, recorder, random.Random(2))
        assert shown(board) == (ACQUIRING, 0, KEYS.index(a.key))  # a shows until it is done
        b.granted(9)  # a holder takes the slot from a lane that only acquires
        assert shown(board) == (HOLDING, 9, KEYS.index(b.key))
        a.granted(4)  # but never from another holder
        a.phase(BODY)
        a.finish()
        assert shown(board) == (HOLDING, 9, KEYS.index(b.key))
        c = Cycle(config(), board, recorder, random.Random(3))
        c.finish()
        b.phase(BODY)
        assert shown(board) == (BODY, 9, KEYS.index(b.key))
        b.finish()
        assert shown(board) == (IDLE, 0, KEYS.index(b.key))
        a2 = Cycle(config(), board, recorder, random.Random(4))  # the free slot is taken
        a2.granted(11)
        assert shown(board) == (HOLDING, 11, KEYS.index(a2.key))
        a2.finish()
    assert board.get(1, "grants") == 3


def test_the_nemesis_reads_the_key_its_victim_holds(tmp_path: Path) -> None:
    board = Board(multiprocessing.get_context("spawn"), 2)
    with HistoryWriter(tmp_path / "h.jsonl", "w1") as writer:
        env = NemesisEnv(
            writer=writer, board=board, worker_names=["w0", "w1"], admin_url="redis://unused",
            prefix="p", key="k0", ttl_ms=1000, heartbeat_ms=250, body_ms=10, keys=KEYS,
        )  # fmt: skip
        for seed in range(50):  # a cycle that picked k2
            held = Cycle(config(), board, Recorder(writer), random.Random(seed))
            if held.key == "k2":
                break
            held.finish()
        assert held.key == "k2"
        held.granted(5)
        assert env.held_key(1) == "k2"
        assert env.lease_keys == KEYS
        assert NemesisEnv(
            writer=writer, board=board, worker_names=["w0", "w1"], admin_url="redis://unused",
            prefix="p", key="k0", ttl_ms=1000, heartbeat_ms=250, body_ms=10,
        ).held_key(1) == "k0"  # fmt: skip


def test_a_steered_cycle_waits_for_the_key_it_was_steered_to(tmp_path: Path) -> None:
    cycles._shown.pop(1, None)  # a cycle another test left shown in this process
    board = Board(multiprocessing.get_context("spawn"), 2)
    with HistoryWriter(tmp_path / "h.jsonl", "w1") as writer:
        recorder = Recorder(writer)
        drawn = Cycle(config(), board, recorder, random.Random(5))
        drawn.finish()
        board.set(1, "steer", KEYS.index("k2") + 1)
        steered = Cycle(config(), board, recorder, random.Random(5))
        assert (steered.key, steered.wait_ms) == ("k2", 100)
        assert steered.acquire.fields["detail"] == {"wait_ms": 100, "steered": True}
        assert board.get(1, "steer") == 0  # taken once
        steered.finish()
        again = Cycle(config(), board, recorder, random.Random(5))
        assert (again.key, again.wait_ms) == (drawn.key, drawn.wait_ms)  # the seeded draw
        again.finish()


def test_only_the_shown_cycle_takes_a_stretch(tmp_path: Path) -> None:
    cycles._shown.pop(1, None)  # a cycle another test left shown in this process
    board = Board(multiprocessing.get_context("spawn"), 2)
    with HistoryWriter(tmp_path / "h.jsonl", "w1") as writer:
        recorder = Recorder(writer)
        holder = Cycle(config(), board, recorder, random.Random(1))
        holder.granted(7)
        other = Cycle(config(), board, recorder, random.Random(2))
        board.set(1, "stretch", 60_000)
        assert other.body_left(0.0) <= 0  # not shown: its body is not stretched
        assert board.get(1, "stretch") == 60_000
        assert holder.body_left(0.0) > 59.0  # the shown holder takes it
        assert board.get(1, "stretch") == 0
        holder.finish()
        other.finish()


@contextlib.contextmanager
def fresh_lanes(tmp_path: Path) -> Iterator[tuple[Board, Recorder]]:
    """A board of two workers and a recorder of w1's history, no cycle of w1 shown."""
    cycles._shown.pop(1, None)  # a cycle another test left shown in this process
    board = Board(multiprocessing.get_context("spawn"), 2)
    with HistoryWriter(tmp_path / "h.jsonl", "w1") as writer:
        yield board, Recorder(writer)


def test_a_steered_cycle_holds_its_key_two_heartbeats_at_least(tmp_path: Path) -> None:
    """A steered cycle's body lasts two heartbeats (0.5 s here) whatever ``body_ms`` (10 ms):
    the holder the key was freed from renews meanwhile and meets the new owner; a drawn cycle's
    body ends at its own ``until``."""
    with fresh_lanes(tmp_path) as (board, recorder):
        drawn = Cycle(config(), board, recorder, random.Random(5))
        drawn.granted(3)
        drawn.phase(BODY)
        assert not drawn.steered
        assert drawn.body_left(0.0) <= 0  # ends at its own until (long past)
        drawn.finish()
        board.set(1, "steer", KEYS.index("k2") + 1)
        steered = Cycle(config(), board, recorder, random.Random(5))
        steered.granted(4)
        assert steered.steered
        entered = time.monotonic()
        steered.phase(BODY)
        left = steered.body_left(0.0)
        assert 0 < left <= 0.5
        assert steered.stretched_until >= entered + 0.5
        steered.finish()


def test_a_shunned_key_is_not_picked_by_a_new_cycle(tmp_path: Path) -> None:
    with fresh_lanes(tmp_path) as (board, recorder):
        drawn = Cycle(config(), board, recorder, random.Random(5))
        drawn.finish()
        board.set(1, "shun", KEYS.index(drawn.key) + 1)
        shunned = Cycle(config(), board, recorder, random.Random(5))
        assert shunned.key == KEYS[(KEYS.index(drawn.key) + 1) % len(KEYS)]
        assert shunned.wait_ms == drawn.wait_ms  # the same draw, only the key gives way
        shunned.finish()
        board.set(1, "shun", 0)
        again = Cycle(config(), board, recorder, random.Random(5))
        assert again.key == drawn.key
        again.finish()


def lanes_on_one_key(board: Board, recorder: Recorder) -> tuple[Cycle, Cycle]:
    """Two cycles of w1 on the same key (the second steered to the first's): the first holds it
    and is shown, the second waits for it."""
    holder = Cycle(config(), board, recorder, random.Random(1))
    holder.granted(7)
    holder.phase(BODY)
    board.set(1, "steer", KEYS.index(holder.key) + 1)
    waiter = Cycle(config(), board, recorder, random.Random(2))
    assert waiter.key == holder.key
    return holder, waiter


def test_a_stretch_asked_alone_skips_a_holder_another_lane_waits_behind(tmp_path: Path) -> None:
    """With ``alone`` set, the shown holder does not take the stretch while another lane of its
    worker acquires the same key (that lane would take the key the nemesis deletes); it does
    once that lane is done."""
    with fresh_lanes(tmp_path) as (board, recorder):
        holder, waiter = lanes_on_one_key(board, recorder)
        board.set(1, "alone", 1)
        board.set(1, "stretch", 60_000)
        assert holder.body_left(0.0) <= 0
        assert board.get(1, "stretch") == 60_000
        waiter.finish()
        assert holder.body_left(0.0) > 59.0
        assert board.get(1, "stretch") == 0
        holder.finish()


def test_a_stretch_not_asked_alone_is_taken_by_the_shown_holder(tmp_path: Path) -> None:
    with fresh_lanes(tmp_path) as (board, recorder):
        before = dict(cycles._in_use)  # cycles other tests left unfinished in this process
        holder, waiter = lanes_on_one_key(board, recorder)
        assert cycles._in_use[holder.key] == before.get(holder.key, 0) + 2
        board.set(1, "stretch", 60_000)
        assert holder.body_left(0.0) > 59.0
        waiter.finish()
        holder.finish()
    assert dict(cycles._in_use) == before  # every cycle that ended gave its key back
