"""Every redis-server the lab starts is stopped by the object that started it, and by nothing
else: a second start of a running server is refused (it used to start another process in its
place and move it to a new port, the first one left running, orphaned when the test process exited
and its data directory removed by close()); a forked child's close() leaves its parent's server and
data directory alone (in the child, Popen.poll() takes a process that is not its own for gone)."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import unavailable
from fencedlease_lab.servers.redis import RedisServer, RedisUnavailable, answers_as
from fencedlease_lab.servers.sentinel import SentinelDeployment

pytestmark = pytest.mark.live


def _alive(pid: int) -> bool:
    """Whether the process exists (a zombie included: not reaped yet)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@contextlib.contextmanager
def _reaped_at_the_end(
    pids: list[int], closing: RedisServer | SentinelDeployment
) -> Iterator[None]:
    """Whatever the test asserts, ``closing`` is closed and none of ``pids`` outlives it (without
    the fix some did)."""
    try:
        yield
    finally:
        closing.close()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)


def _started() -> RedisServer:
    try:
        return RedisServer().start()
    except RedisUnavailable as exc:
        unavailable(str(exc))
        raise


def test_a_running_server_is_not_started_again() -> None:
    server = _started()
    assert server.process is not None
    pid, port = server.process.pid, server.port
    with _reaped_at_the_end([pid], server):
        with pytest.raises(RuntimeError) as refused:
            server.start()
        assert str(refused.value) == (
            f"redis-server on port {port} is already running (pid {pid}):"
            " stop() it first, or restart()"
        )
        assert (server.port, server.process.pid, server.process.poll()) == (port, pid, None)
        with server.client(socket_timeout=5) as client:
            assert answers_as(client, pid)
        server.close()
        assert (_alive(pid), Path(server.data_dir).exists()) == (False, False)
        assert server.process is None


def test_a_server_that_exited_on_its_own_starts_again() -> None:
    server = _started()
    assert server.process is not None
    first = server.process.pid
    with _reaped_at_the_end([first], server):
        os.kill(first, signal.SIGKILL)
        server.process.wait()
        server.start()
        assert server.process is not None
        second = server.process.pid
        with _reaped_at_the_end([second], server):
            with server.client(socket_timeout=5) as client:
                assert answers_as(client, second)
            server.close()
            assert (_alive(first), _alive(second)) == (False, False)


def test_a_forked_childs_close_leaves_the_parents_server_alone() -> None:
    server = _started()
    assert server.process is not None
    pid = server.process.pid
    with _reaped_at_the_end([pid], server):
        child = os.fork()
        if child == 0:  # the child's cleanup, as a forked worker's exit would run it
            code = 0
            try:
                server.stop()
                server.kill()
                server.close()
                with pytest.raises(RuntimeError):
                    server.start()
            except BaseException:
                code = 1
            os._exit(code)
        _, status = os.waitpid(child, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert server.process is not None and server.process.pid == pid
        assert (server.process.poll(), Path(server.data_dir).is_dir()) == (None, True)
        with server.client(socket_timeout=5) as client:
            assert answers_as(client, pid)
        server.close()
        assert (_alive(pid), Path(server.data_dir).exists()) == (False, False)


@pytest.mark.sentinel
def test_a_sentinel_deployment_started_then_entered_runs_once_and_stops_everything() -> None:
    """``SentinelDeployment(...).start()`` then ``with deployment:`` (a test did so): the ``with``
    takes the running deployment as it is; it used to start it again, a second primary on a new
    port replacing the first, which was never stopped."""
    try:
        deployment = SentinelDeployment(replicas=0, sentinels=1).start()
    except RedisUnavailable as exc:
        unavailable(str(exc))
        raise
    primary = deployment.primary
    assert primary.process is not None
    pids = [primary.process.pid, *(p.pid for p in deployment._sentinels)]
    port = primary.port
    with _reaped_at_the_end(pids, deployment):
        with deployment as entered:
            assert entered is deployment
            assert primary.process is not None
            assert (primary.port, primary.process.pid) == (port, pids[0])
            assert [p.pid for p in deployment._sentinels] == pids[1:]
            with pytest.raises(RuntimeError) as refused:
                deployment.start()
            assert str(refused.value) == "the Sentinel deployment is started already"
        assert [_alive(pid) for pid in pids] == [False] * len(pids)
        assert Path(primary.data_dir).exists() is False
        assert primary.process is None
