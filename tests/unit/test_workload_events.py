"""The check workload's lease events: what :class:`Recorder` writes into the history for each
:class:`LeaseEvent`, that the lock-level check judges all three of its parts from it, and that a
worker's choices come from its seed."""

from __future__ import annotations

import threading
from pathlib import Path

from fencedlease import LeaseEvent, LeaseManager, MemoryBackend
from fencedlease_lab.harness.history import HistoryWriter, read_history
from fencedlease_lab.harness.mutex import check_mutex
from fencedlease_lab.harness.recorder import Recorder
from fencedlease_lab.harness.resources import ResourceSpec
from fencedlease_lab.harness.workload import WorkerConfig, lane_rng, pick


def event(kind: str, status: str, **fields: object) -> LeaseEvent:
    values: dict[str, object] = {
        "key": "k", "fencing_token": 7, "owner_fingerprint": "f" * 16, "at_monotonic": 0.0,
    }  # fmt: skip
    values.update(fields)
    return LeaseEvent(kind, status, **values)  # type: ignore[arg-type]


def rows(path: Path) -> list[tuple[object, ...]]:
    return [
        (e.op, e.type, e.grant, e.token, e.outcome, e.detail.get("deadline"))
        for e in read_history(path)
    ]


def test_recorder_writes_each_event(tmp_path: Path) -> None:
    path = tmp_path / "h.jsonl"
    with HistoryWriter(path, "w0") as writer:
        recorder = Recorder(writer)
        acquire = writer.invoke("acquire", key="k")
        recorder.expect(acquire)
        recorder(event("acquire", "granted", deadline_monotonic=2.0))
        recorder(event("renew", "confirmed", deadline_monotonic=2.5))
        recorder(event("renew", "error", reason="BackendError: reset"))
        recorder(event("release", "sent"))
        recorder(event("renew", "refused"))  # the release decides now
        recorder(event("release", "refused"))
        recorder(event("lost", "lost", reason="the release found the key gone"))
        recorder(event("renew", "confirmed", owner_fingerprint="0" * 16))  # not ours: ignored
        other = writer.invoke("acquire", key="k")
        recorder.expect(other)
        recorder(event("acquire", "not-granted", fencing_token=None, owner_fingerprint=None))
    assert rows(path) == [
        ("acquire", "invoke", None, None, None, None),
        ("acquire", "ok", None, 7, "granted", 2.0),
        ("renew", "ok", 0, 7, None, 2.5),
        ("renew", "info", 0, 7, "error", None),
        ("release", "invoke", 0, 7, None, None),
        ("renew", "info", 0, 7, "refused-while-releasing", None),
        ("release", "fail", 0, 7, "refused", None),
        ("lease-lost", "info", 0, 7, "lease-lost", None),
        ("acquire", "invoke", None, None, None, None),
        ("acquire", "fail", None, None, "not-acquired", None),
    ]


def test_a_refused_renewal_before_the_release_is_a_refusal(tmp_path: Path) -> None:
    path = tmp_path / "h.jsonl"
    with HistoryWriter(path, "w0") as writer:
        recorder = Recorder(writer)
        recorder.expect(writer.invoke("acquire", key="k"))
        recorder(event("acquire", "granted", deadline_monotonic=2.0))
        recorder(event("renew", "refused"))
        recorder(event("lost", "lost", reason="a renewal found the key gone"))
    assert rows(path)[2:] == [
        ("renew", "fail", 0, 7, "refused", None),
        ("lease-lost", "info", 0, 7, "lease-lost", None),
    ]


def test_the_mutex_check_judges_a_real_managers_history(tmp_path: Path) -> None:
    """A manager on the memory backend with the recorder as its hook: two holds of one key, the
    second broken by a force release (no fault): every part of the lock-level check is judged,
    and the unexplained loss is found."""
    path = tmp_path / "h.jsonl"
    backend = MemoryBackend()
    lost = threading.Event()
    with HistoryWriter(path, "w0") as writer:
        recorder = Recorder(writer)

        def hook(e: LeaseEvent) -> None:
            recorder(e)
            if e.kind == "lost":
                lost.set()

        with LeaseManager(backend, on_event=hook) as leases:
            for n in range(2):
                recorder.expect(writer.invoke("acquire", key="k"))
                try:
                    with leases.hold("k", ttl_ms=2_000, heartbeat_ms=20) as lease:
                        renewed = lease.expires_at
                        while lease.expires_at == renewed:  # one confirmed renewal
                            lease.wait_lost(timeout_ms=10)
                        if n == 1:
                            backend.force_release("k")
                            assert lost.wait(30.0)
                except Exception:
                    assert n == 1
    verdict = check_mutex(read_history(path), ttl_ms=2_000, heartbeat_ms=20)
    assert verdict.not_judged == ()
    assert (verdict.claims, verdict.refusals, verdict.losses) == (2, 1, 1)
    assert verdict.lower_bound_claims == 0
    assert [i.kind for i in verdict.issues] == ["loss-explained"]


def config(seed: int, index: int) -> WorkerConfig:
    return WorkerConfig(
        index=index, name=f"w{index}", redis_url="redis://unused", prefix="p",
        keys=tuple(f"k{i}" for i in range(32)), mode="fenced",
        resource=ResourceSpec("sqlite", "unused"), history_path="unused", ttl_ms=1000,
        heartbeat_ms=250, body_ms=10, wait_ms=100, socket_timeout_ms=500, duration_s=1.0,
        seed=seed, wait_share=0.5,
    )  # fmt: skip


def test_a_workers_choices_come_from_its_seed() -> None:
    def choices(seed: int, index: int, lane: int) -> list[tuple[str, int]]:
        rng = lane_rng(config(seed, index), lane)
        return [pick(config(seed, index), rng) for _ in range(50)]

    first = choices(1, 0, 0)
    assert first == choices(1, 0, 0)
    assert first != choices(1, 1, 0) and first != choices(1, 0, 1) and first != choices(2, 0, 0)
    assert {wait for _, wait in first} == {0, 100}
    assert len({key for key, _ in first}) > 10
