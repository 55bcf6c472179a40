"""A lease holder in a process of its own, driven over its stdin and stdout (JSON lines): a client
a test can put where the test's own process is not (a network namespace of its own, behind a
[`Partitions`][fencedlease_lab.servers.partitions.Partitions] hub).

``python -m fencedlease_lab.servers.lease_client <url> [--fencing counter|epoch|clock]`` makes a
``LeaseManager`` from the URL and reads commands, one JSON object a line:

``{"acquire": key, "ttl_ms": n, "for_s": s}``
    hold ``key`` (``hold``, in a thread of its own: renewed in the background) until the lease is
    lost; asked again after each refusal or error until it is granted or ``s`` seconds have
    passed.

Every lease event the manager reports is written as a line, ``{"kind", "status", "key", "token",
"at", "deadline", "reason"}`` (``at`` and ``deadline`` on ``time.monotonic``, the machine's clock,
which every process on it shares); an acquire that failed, as ``{"kind": "error", "reason",
"at"}``; the manager made (a cluster client has read the slot map), as ``{"kind": "ready",
"at"}``. The process ends when its stdin closes.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from typing import IO, Any

from fencedlease import FencedLeaseError, LeaseEvent, LeaseLostError, LeaseManager

__all__ = ["LeaseClient", "main"]


def _say(out: IO[str], lock: threading.Lock, line: dict[str, Any]) -> None:
    with lock:
        out.write(json.dumps(line) + "\n")
        out.flush()


def _hold(manager: LeaseManager, command: dict[str, Any], say: Callable[[dict[str, Any]], None]
          ) -> None:  # fmt: skip
    """Hold ``command``'s key (``hold``: renewed in the background) until the lease is lost,
    trying again after each refusal or error until it is granted or ``for_s`` has passed."""
    give_up = time.monotonic() + float(command["for_s"])
    while time.monotonic() < give_up:
        wait_ms = max(0, int((give_up - time.monotonic()) * 1000))
        try:
            with manager.hold(
                command["acquire"], ttl_ms=command["ttl_ms"], wait_ms=wait_ms
            ) as lease:
                lease.wait_lost()
        except LeaseLostError:
            return  # the "lost" event said so
        except FencedLeaseError as exc:  # not granted, the store unreachable, a refused grant
            say({"kind": "error", "reason": f"{type(exc).__name__}: {exc}", "at": time.monotonic()})
            time.sleep(0.05)  # a refusal that comes at once is not tried again in a tight loop
        else:
            return


def main(argv: Sequence[str] | None = None) -> None:
    """Run the client (module docstring) on this process's stdin and stdout."""
    parser = argparse.ArgumentParser(prog="lease_client")
    parser.add_argument("url")
    parser.add_argument("--fencing", choices=("counter", "epoch", "clock"), default=None)
    args = parser.parse_args(argv)
    faulthandler.register(signal.SIGUSR1)  # a client that hangs shows where, on stderr
    lock = threading.Lock()

    def say(line: dict[str, Any]) -> None:
        _say(sys.stdout, lock, line)

    def on_event(event: LeaseEvent) -> None:
        say({
            "kind": event.kind, "status": event.status, "key": event.key,
            "token": event.fencing_token, "at": event.at_monotonic,
            "deadline": event.deadline_monotonic, "reason": event.reason,
        })  # fmt: skip

    with LeaseManager.from_url(args.url, fencing=args.fencing, on_event=on_event) as manager:
        say({"kind": "ready", "at": time.monotonic()})
        for line in sys.stdin:
            command = json.loads(line)
            threading.Thread(target=_hold, args=(manager, command, say), daemon=True).start()


class LeaseClient:
    """The driver of one [`lease_client`][fencedlease_lab.servers.lease_client] process: start it
    with ``popen`` (e.g. [`Partitions.popen`][fencedlease_lab.servers.partitions.Partitions.popen]
    and the member it runs as), [`send`][fencedlease_lab.servers.lease_client.LeaseClient.send]
    commands, [`wait`][fencedlease_lab.servers.lease_client.LeaseClient.wait] for the lines it
    writes; [`close`][fencedlease_lab.servers.lease_client.LeaseClient.close] ends it."""

    def __init__(
        self,
        popen: Callable[..., subprocess.Popen[str]],
        url: str,
        *,
        fencing: str | None = None,
    ) -> None:
        argv = [sys.executable, "-m", "fencedlease_lab.servers.lease_client", url]
        if fencing is not None:
            argv += ["--fencing", fencing]
        # Its stderr in a file, read when a wait fails (with every thread's stack: SIGUSR1).
        self._stderr = tempfile.TemporaryFile("w+")  # noqa: SIM115 (closed by close())
        self.process = popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr, text=True
        )
        self.lines: list[dict[str, Any]] = []  # every line it wrote, in order
        self._queue: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._queue.put(json.loads(line))
        self._queue.put(None)

    def send(self, command: dict[str, Any]) -> None:
        """Write one command (module docstring)."""
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(command) + "\n")
        self.process.stdin.flush()

    def wait(self, matches: Callable[[dict[str, Any]], bool], timeout_s: float) -> dict[str, Any]:
        """The first line from now on for which ``matches`` is true (every line read meanwhile is
        kept in [`lines`][fencedlease_lab.servers.lease_client.LeaseClient.lines]).

        Raises:
            TimeoutError: none within ``timeout_s`` (a bound; the line ends the wait), or the
                process ended first (its stderr in the message).
        """
        give_up = time.monotonic() + timeout_s
        while True:
            try:
                line = self._queue.get(timeout=max(0.0, give_up - time.monotonic()))
            except queue.Empty:
                raise TimeoutError(
                    f"no such line within {timeout_s} s; read {self.lines}; {self._stacks()}"
                ) from None
            if line is None:
                self._queue.put(None)
                raise TimeoutError(f"the client ended; read {self.lines}; {self._stacks()}")
            self.lines.append(line)
            if matches(line):
                return line

    def _stacks(self) -> str:
        """Its stderr so far, with every thread's stack when it still runs."""
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGUSR1)
            time.sleep(0.5)  # faulthandler writes at once; this is only its bound
        self._stderr.seek(0)
        return f"stderr: {self._stderr.read()[-20_000:]}"

    def close(self) -> None:
        """Close its stdin (it ends), then kill it if it has not ended within 10 s."""
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()
        self._stderr.close()

    def __enter__(self) -> LeaseClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


if __name__ == "__main__":
    main()
