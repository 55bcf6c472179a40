"""Ports for the servers the lab starts: drawn free on 127.0.0.1, moved when another process
takes one first (a start that logged its port taken is tried again on another,
`PORT_ATTEMPTS` times), and a server that answers on a port checked to be ours (`answers_as`)."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Collection
from pathlib import Path

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry


class _PortTaken(RuntimeError):
    """The port a server was started on is another process's."""


#: How many ports a server we start tries when the one it drew is taken meanwhile.
PORT_ATTEMPTS = 5
#: Each PING of a server coming up is tried once (the loop around it is the retry): on a port
#: another process holds without answering, redis-py's own backoff would outlast the start.
NO_RETRY = Retry(NoBackoff(), 0)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    return free_ports(1)[0]


def free_ports(count: int, exclude: Collection[int] = ()) -> list[int]:
    """``count`` distinct TCP ports on 127.0.0.1 that were free a moment ago, none in
    ``exclude`` (ports drawn before for servers not started yet): each socket stays bound until
    every port is drawn, so no port is drawn twice. Another process may still take one before
    it is used: a server we start moves to another port then (`PORT_ATTEMPTS`)."""
    with contextlib.ExitStack() as stack:
        ports: list[int] = []
        while len(ports) < count:
            sock = stack.enter_context(socket.socket())
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
            if port not in exclude:
                ports.append(port)
        return ports


def port_clash(log_file: Path) -> bool:
    """Whether a ``redis-server`` (or sentinel) that exited at start logged that its port was
    taken."""
    try:
        return "Address already in use" in log_file.read_text("utf-8", "replace")
    except OSError:
        return False


def answers_as(client: redis.Redis, pid: int) -> bool:
    """Whether the server ``client`` reaches is the process ``pid`` (``INFO server``'s
    ``process_id``): on a port another server took first, the other one would answer."""
    return int(client.info("server")["process_id"]) == pid
