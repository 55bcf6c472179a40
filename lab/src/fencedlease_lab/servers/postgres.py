"""Find or start a real PostgreSQL for the database-fencing tests.

Order: ``FENCEDLEASE_POSTGRES_URL`` (use that server, start nothing); else ``initdb`` in a temporary
directory and ``postgres`` on a free loopback port, stopped and removed afterwards. The binaries are
looked up on PATH, then in ``/usr/lib/postgresql/<version>/bin`` (Debian's ``postgresql`` package),
newest version first.

PostgreSQL refuses to run as root. When we are root, the server runs as the system user
``fencedlease`` (created with ``useradd --system`` when missing; ``postgres`` or ``nobody`` when
that fails), which owns the temporary directory. Authentication is ``trust`` on 127.0.0.1 only: a
throwaway server for tests, not a deployment.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = [
    "PostgresServer",
    "PostgresUnavailable",
    "find_postgres_bin_dir",
    "postgres_dsn",
]

SERVER_USER = "fencedlease"


class PostgresUnavailable(RuntimeError):
    """No PostgreSQL could be found or started; the message says what was tried."""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _version_key(path: str) -> tuple[int, ...]:
    version = Path(path).parent.parent.name  # /usr/lib/postgresql/<version>/bin/initdb
    return tuple(int(part) for part in version.split(".") if part.isdigit())


def find_postgres_bin_dir() -> Path | None:
    """The directory of ``initdb`` and ``postgres``: PATH first, then Debian's, newest first."""
    on_path = shutil.which("initdb")
    if on_path:
        real = Path(on_path).resolve().parent
        if (real / "postgres").exists():
            return real
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=_version_key)
    for initdb in reversed(candidates):
        bin_dir = Path(initdb).parent
        if (bin_dir / "postgres").exists():
            return bin_dir
    return None


def _server_user() -> pwd.struct_passwd | None:
    """The user to run as: ``None`` when we are not root, else an unprivileged system user."""
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam(SERVER_USER)
    except KeyError:
        pass
    created = subprocess.run(
        [
            "useradd",
            "--system",
            "--user-group",
            "--no-create-home",
            "--home-dir",
            "/nonexistent",
            "--shell",
            "/usr/sbin/nologin",
            SERVER_USER,
        ],
        capture_output=True,
        check=False,
    )
    for name in ([SERVER_USER] if created.returncode == 0 else []) + ["postgres", "nobody"]:
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    raise PostgresUnavailable("running as root and no unprivileged user to run postgres as")


class PostgresServer:
    """A ``postgres`` process of our own on 127.0.0.1, in a temporary directory.

    ``with PostgresServer() as server: server.dsn`` ->
    ``postgresql://<user>@127.0.0.1:<port>/postgres``. Raises
    [`PostgresUnavailable`][fencedlease_lab.servers.postgres.PostgresUnavailable] when the binaries
    are missing or the server will not start.
    """

    def __init__(self, bin_dir: Path | None = None) -> None:
        found = bin_dir or find_postgres_bin_dir()
        if found is None:
            raise PostgresUnavailable(
                "no initdb/postgres on PATH or in /usr/lib/postgresql/*/bin "
                "(Debian: apt-get install postgresql; .ci/postgres.sh does it)"
            )
        self.bin_dir = found
        self.user = _server_user()
        self.db_user = self.user.pw_name if self.user else pwd.getpwuid(os.geteuid()).pw_name
        self.port = 0
        self.base_dir = Path(tempfile.mkdtemp(prefix="fencedlease-pg-"))
        self.data_dir = self.base_dir / "data"
        self.socket_dir = self.base_dir / "sock"
        self.log_path = self.base_dir / "postgres.log"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def dsn(self) -> str:
        """``postgresql://<user>@127.0.0.1:<port>/postgres`` (trust authentication)."""
        return f"postgresql://{self.db_user}@127.0.0.1:{self.port}/postgres"

    @property
    def _uid(self) -> int | None:
        return None if self.user is None else self.user.pw_uid

    @property
    def _gid(self) -> int | None:
        return None if self.user is None else self.user.pw_gid

    @property
    def _groups(self) -> list[int] | None:
        return None if self.user is None else []

    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env.update(LC_ALL="C", LANG="C")
        if self.user is not None:
            env.update(HOME=str(self.base_dir), USER=self.user.pw_name, LOGNAME=self.user.pw_name)
        return env

    def _initdb(self) -> None:
        self.socket_dir.mkdir()
        if self.user is not None:
            for path in (self.base_dir, self.socket_dir):
                os.chown(path, self.user.pw_uid, self.user.pw_gid)
        done = subprocess.run(
            [
                str(self.bin_dir / "initdb"),
                "--pgdata",
                str(self.data_dir),
                "--username",
                self.db_user,
                "--auth",
                "trust",
                "--encoding",
                "UTF8",
                "--locale",
                "C",
                "--no-sync",
            ],
            capture_output=True,
            env=self._env(),
            cwd=self.base_dir,
            check=False,
            user=self._uid,
            group=self._gid,
            extra_groups=self._groups,
        )
        if done.returncode != 0:
            raise PostgresUnavailable(
                f"initdb exited with {done.returncode}: {done.stderr.decode(errors='replace')}"
            )

    def _ready(self) -> bool:
        # The server accepts TCP connections only once it is ready; psycopg is an optional extra,
        # so readiness is judged by the log line and an open port.
        try:
            log = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return False
        if "ready to accept connections" not in log:
            return False
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                return True
        except OSError:
            return False

    def start(self, timeout_s: float = 60.0) -> PostgresServer:
        """initdb (once) and start the server; wait until it accepts connections.

        ``timeout_s`` is in seconds. Raises
        [`PostgresUnavailable`][fencedlease_lab.servers.postgres.PostgresUnavailable] when it exits
        or does not become ready in time (the log's tail is in the message).
        """
        if not self.data_dir.exists():
            self._initdb()
        self.port = _free_port()
        log = open(self.log_path, "ab")  # noqa: SIM115 (closed once the server is started)
        if self.user is not None:
            os.chown(self.log_path, self.user.pw_uid, self.user.pw_gid)
        try:
            self.process = subprocess.Popen(
                [
                    str(self.bin_dir / "postgres"),
                    "-D",
                    str(self.data_dir),
                    "-p",
                    str(self.port),
                    "-k",
                    str(self.socket_dir),
                    "-c",
                    "listen_addresses=127.0.0.1",
                    "-c",
                    "fsync=off",
                    "-c",
                    "synchronous_commit=off",
                    "-c",
                    "full_page_writes=off",
                    "-c",
                    "max_connections=50",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self._env(),
                cwd=self.base_dir,
                user=self._uid,
                group=self._gid,
                extra_groups=self._groups,
            )
        finally:
            log.close()
        give_up = time.monotonic() + timeout_s
        while not self._ready():
            if self.process.poll() is not None:
                raise PostgresUnavailable(
                    f"postgres exited with {self.process.returncode}: {self._log_tail()}"
                )
            if time.monotonic() > give_up:
                self.stop()
                raise PostgresUnavailable(
                    f"postgres not ready in {timeout_s} s: {self._log_tail()}"
                )
            time.sleep(0.05)
        return self

    def _log_tail(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-2000:]
        except FileNotFoundError:
            return "(no log)"

    def stop(self) -> None:
        """Fast shutdown (SIGINT: roll back open transactions), SIGKILL after 30 s; wait for it."""
        process = self.process
        if process is None:
            return
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self.process = None

    def close(self) -> None:
        """Stop the server and remove its directory."""
        self.stop()
        shutil.rmtree(self.base_dir, ignore_errors=True)

    def __enter__(self) -> PostgresServer:
        if self.process is None:
            try:
                self.start()
            except BaseException:
                self.close()
                raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


@contextmanager
def postgres_dsn() -> Iterator[str]:
    """Yield the DSN of a running PostgreSQL: ``FENCEDLEASE_POSTGRES_URL``, else one we start.

    Raises [`PostgresUnavailable`][fencedlease_lab.servers.postgres.PostgresUnavailable] when none
    can be had (the message says why).
    """
    url = os.environ.get("FENCEDLEASE_POSTGRES_URL")
    if url:
        yield url
        return
    with PostgresServer() as server:
        yield server.dsn
