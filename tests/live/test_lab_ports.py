"""The lab's servers on ports of their own: ports drawn distinct, and a server whose drawn port
another process took before it bound moves to a new one (a sentinel that found its port taken
used to end the whole deployment: "a sentinel exited with 1")."""

from __future__ import annotations

import socket
from collections.abc import Collection, Iterator

import pytest
import redis

import fencedlease_lab.servers.redis as lab_redis
import fencedlease_lab.servers.sentinel as lab_sentinel
from fencedlease_lab.servers.redis import RedisServer, RedisUnavailable, free_ports
from fencedlease_lab.servers.sentinel import SentinelDeployment

pytestmark = [pytest.mark.live, pytest.mark.timeout(300)]


def _pid(port: int) -> int:
    with redis.Redis(host="127.0.0.1", port=port, socket_timeout=5) as client:
        return int(client.info("server")["process_id"])


@pytest.fixture
def held_port() -> Iterator[int]:
    """A loopback port another process could hold: a socket listening on it that never
    answers."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        yield int(sock.getsockname()[1])


def test_free_ports_are_distinct_and_skip_the_excluded() -> None:
    first = free_ports(8)
    assert len(set(first)) == 8
    again = free_ports(8, exclude=first)
    assert len(set(again)) == 8 and not set(again) & set(first)


def test_a_server_whose_port_another_server_took_moves_to_a_new_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    try:
        other = RedisServer().start()
    except RedisUnavailable as exc:
        pytest.skip(str(exc))
    drawn = iter([other.port])
    real = lab_redis.free_port
    monkeypatch.setattr(lab_redis, "free_port", lambda: next(drawn, None) or real())
    server = RedisServer()
    assert server.port == other.port  # the clash: drawn while the other holds it
    try:
        server.start()
        assert server.process is not None and other.process is not None
        assert server.port != other.port
        assert _pid(server.port) == server.process.pid  # ours answers on its new port
        assert _pid(other.port) == other.process.pid  # the other one is untouched
    finally:
        server.close()
        other.close()


def test_a_server_given_a_taken_port_says_so(held_port: int) -> None:
    """A port the caller chose is not moved: the start fails, naming it."""
    server = RedisServer(port=held_port)
    with pytest.raises(RedisUnavailable) as caught:
        server.start()
    assert str(caught.value) == (
        f"{server.binary}: port {held_port} is taken: it logged 'Address already in use'"
    )
    server.close()


@pytest.mark.sentinel
def test_a_sentinel_whose_port_was_taken_starts_on_another(
    held_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = lab_redis.free_ports
    calls: list[int] = []

    def drawn(count: int, exclude: Collection[int] = ()) -> list[int]:
        calls.append(count)
        ports = real(count, exclude)
        return [held_port, *ports[1:]] if len(calls) == 1 else ports

    monkeypatch.setattr(lab_sentinel, "free_ports", drawn)
    try:
        deployment = SentinelDeployment()
    except RedisUnavailable as exc:
        pytest.skip(str(exc))
    assert deployment.sentinel_ports[0] == held_port
    with deployment:
        ports = deployment.sentinel_ports
        assert held_port not in ports
        assert len({*ports, *(s.port for s in deployment.servers)}) == len(ports) + 2
        for index, port in enumerate(ports):
            assert _pid(port) == deployment._sentinels[index].pid
        assert deployment.primary_port() == deployment.primary.port
