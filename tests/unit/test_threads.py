"""The library's thread pool: daemon workers (a hung store never blocks interpreter exit), named,
reused while idle, bounded in number, and refusing work after shutdown."""

from __future__ import annotations

import threading

import pytest

from fencedlease._core.threads import BoundedCalls, DaemonThreadPool


def test_workers_are_named_daemons_reused_while_idle() -> None:
    pool = DaemonThreadPool(2, thread_name_prefix="t-pool")
    first = pool.submit(threading.current_thread).result(timeout=10)
    second = pool.submit(threading.current_thread).result(timeout=10)
    assert first.daemon and first.name == "t-pool_0"
    assert second is first  # the idle worker took it: no second thread
    pool.shutdown(wait=True)
    assert not first.is_alive()
    with pytest.raises(RuntimeError, match="after shutdown"):
        pool.submit(threading.current_thread)


def test_at_most_max_workers_and_queued_calls_run_after_shutdown() -> None:
    pool = DaemonThreadPool(2, thread_name_prefix="t-busy")
    gate = threading.Event()
    blocked = [pool.submit(gate.wait, 10) for _ in range(2)]
    queued = pool.submit(threading.current_thread)
    assert sorted(t.name for t in pool._threads) == ["t-busy_0", "t-busy_1"]
    pool.shutdown(wait=False)
    gate.set()
    assert [f.result(timeout=10) for f in blocked] == [True, True]
    assert queued.result(timeout=10).name in {"t-busy_0", "t-busy_1"}
    pool.shutdown(wait=True)
    assert all(not t.is_alive() for t in pool._threads)


def test_an_exception_reaches_the_future_and_cancel_futures_cancels_the_queue() -> None:
    pool = DaemonThreadPool(1, thread_name_prefix="t-exc")
    with pytest.raises(ZeroDivisionError):
        pool.submit(lambda: 1 // 0).result(timeout=10)
    gate, started = threading.Event(), threading.Event()

    def hold() -> bool:
        started.set()
        return gate.wait(10)

    running = pool.submit(hold)
    assert started.wait(10)
    waiting = pool.submit(threading.current_thread)
    pool.shutdown(wait=False, cancel_futures=True)
    gate.set()
    assert running.result(timeout=10) is True
    assert waiting.cancelled()


def test_bounded_calls_run_on_daemon_threads() -> None:
    calls = BoundedCalls("t-release")
    thread = calls.run(threading.current_thread, 10.0, "probe")
    assert thread.daemon and thread.name == "t-release_0"
    calls.close()
