"""``fencedlease check`` against a Redis that needs a password: the password appears nowhere in
what the run writes or prints, and a Redis resource key it did not create is never deleted.

On a user's Redis it never deletes what it did not create: no fault acting on the whole server
without ``--allow-server-faults``, its own keys deleted at the end (and no other). A run that
could not be done or proved nothing exits 2 with a one-line, redacted message."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from fencedlease.redis_fencing import RedisFencedResource
from fencedlease_lab.harness.run import OUT_MARKER, RESOURCE_MARKER
from fencedlease_lab.servers.redis import RedisServer, RedisUnavailable, find_redis_binary

pytestmark = pytest.mark.chaos

SECRET = "s3kr1t-9f2c"  # no 3-character piece of it in a message of the check's own


@pytest.fixture
def acl_redis() -> Iterator[RedisServer]:
    """A redis-server with an ACL user ``user`` whose password is :data:`SECRET`."""
    if find_redis_binary() is None:
        pytest.skip("no redis-server binary for the harness")
    try:
        server = RedisServer()
    except RedisUnavailable as exc:
        pytest.skip(str(exc))
    with server:
        admin = redis.Redis(port=server.port)
        admin.execute_command(  # type: ignore[no-untyped-call]
            "ACL", "SETUSER", "user", "on", f">{SECRET}", "~*", "&*", "+@all"
        )
        admin.close()
        yield server


def _check(
    url: str, out: Path, *args: str, faults: str = "client-kill", duration_s: int = 3
) -> subprocess.CompletedProcess[str]:
    """``python -m fencedlease check`` on ``url`` (wide console: one message, one line)."""
    env = dict(os.environ, FENCEDLEASE_URL=url, COLUMNS="400")
    return subprocess.run(
        [sys.executable, "-m", "fencedlease", "check", "--out", str(out), "--workers", "2",
         "--duration", str(duration_s), "--faults", faults, "--seed", "5", *args],
        env=env, capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip


def _state(client: redis.Redis) -> dict[object, tuple[object, object]]:
    """Every key of ``client``'s database with its type and value."""
    state: dict[object, tuple[object, object]] = {}
    for key in client.scan_iter(count=1000):
        kind = client.type(key)
        value: object = client.hgetall(key) if kind == b"hash" else client.get(key)
        state[key] = (kind, value)
    return state


def _report(out: Path) -> dict[str, object]:
    data: dict[str, object] = json.loads((out / "report.json").read_text("utf-8"))
    return data


def _files(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in out.rglob("*") if p.is_file()}


@pytest.mark.parametrize("resource", ["sqlite", "redis"])
def test_the_password_is_nowhere_in_the_runs_output(
    acl_redis: RedisServer, tmp_path: Path, resource: str
) -> None:
    """With FENCEDLEASE_URL=redis://user:<password>@...: the run works (grants made), and
    report.json, history.jsonl, timeline.png and stdout/stderr hold no trace of the password;
    report.json shows the URL with ***."""
    url = f"redis://user:{SECRET}@127.0.0.1:{acl_redis.port}/0"
    out = tmp_path / "out"
    done = _check(url, out, "--resource", resource)
    assert done.returncode == 0, done.stdout + done.stderr
    files = _files(out)
    assert {"report.json", "history.jsonl", OUT_MARKER} <= set(files)
    for name, data in files.items():
        assert SECRET.encode() not in data, name
    assert SECRET not in done.stdout + done.stderr
    report = files["report.json"].decode()
    assert f'"redis_url": "redis://user:***@127.0.0.1:{acl_redis.port}/0"' in report
    assert '"grants": ' in report
    assert '"grants": 0' not in report


def test_a_redis_resource_key_it_did_not_create_survives(
    acl_redis: RedisServer, tmp_path: Path
) -> None:
    """--resource redis on a Redis whose counter key already holds the user's data: exit 2, the
    key keeps its value, no marker is written."""
    client = redis.Redis(port=acl_redis.port)
    resource = RedisFencedResource(client, "check-counter")
    client.set(resource.data_key, "users-data")
    url = f"redis://user:{SECRET}@127.0.0.1:{acl_redis.port}/0"
    done = _check(url, tmp_path / "out", "--resource", "redis")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "did not create" in done.stderr
    assert SECRET not in done.stdout + done.stderr
    assert client.get(resource.data_key) == b"users-data"
    assert client.exists(f"{resource.data_key}:{RESOURCE_MARKER}") == 0
    client.close()


def _user_data(server: RedisServer) -> tuple[redis.Redis, str, list[int]]:
    """Another application's data on ``server``: keys (one of them looks like the check's
    resource name but is not under a run's prefix), a cached Lua script, and two connections
    named like the check's workers used to be. Returns the admin client, the script's sha and
    the connections' client ids."""
    admin = redis.Redis(port=server.port)
    admin.set("app:config", "v1")
    admin.hset("app:user:1", mapping={"name": "ada"})
    admin.set("fencedlease-check:not-a-run-key", "mine")
    sha = str(admin.script_load("return 'app script'"))
    ids = []
    for name in ("fencedlease-check-w0", "app-worker"):
        other = redis.Redis(port=server.port, client_name=name)
        ids.append(int(other.client_id()))
        _KEEP.append(other)
    return admin, sha, ids


_KEEP: list[redis.Redis] = []


@pytest.fixture(autouse=True)
def _close_kept() -> Iterator[None]:
    yield
    while _KEEP:
        _KEEP.pop().close()


@pytest.mark.parametrize("resource", ["sqlite", "redis"])
def test_on_a_users_redis_it_leaves_everything_else_as_it_was(
    acl_redis: RedisServer, tmp_path: Path, resource: str
) -> None:
    """--faults script-flush,client-kill on a user's Redis: script-flush is left out (said on
    the console and in report.json), client-kill runs on the run's own connections only; after
    the run the Redis holds exactly the keys and values it held before (the run's own keys,
    resource keys included, are deleted), the other application's script is still cached and its
    connections are still open."""
    admin, sha, ids = _user_data(acl_redis)
    before = _state(admin)
    url = f"redis://user:{SECRET}@127.0.0.1:{acl_redis.port}/0"
    out = tmp_path / "out"
    done = _check(url, out, "--no-toxiproxy", "--resource", resource,
                  faults="script-flush,client-kill", duration_s=6)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    left_out = (
        "left out: script-flush (the Redis at "
        f"redis://user:***@127.0.0.1:{acl_redis.port}/0 is not the check's own;"
        " --allow-server-faults runs them anyway)"
    )
    assert left_out in done.stdout
    report = _report(out)
    assert report["left_out"] == ["script-flush"]
    assert left_out in report["notes"]  # type: ignore[operator]
    assert (report["verdict"], report["exit_code"]) == ("pass", 0)
    assert report["stats"]["faults"] == ["client-kill"]  # type: ignore[index]
    assert report["stats"]["grants"] > 0  # type: ignore[index]
    assert _state(admin) == before
    assert admin.script_exists(sha) == [True]
    alive = {int(c["id"]) for c in admin.client_list()}
    assert set(ids) <= alive
    admin.close()


def test_allow_server_faults_runs_them_on_a_users_redis(
    acl_redis: RedisServer, tmp_path: Path
) -> None:
    """With --allow-server-faults the user asked for it: SCRIPT FLUSH runs (the cached script is
    gone), nothing is left out; the run's keys are still deleted at the end."""
    admin, sha, _ids = _user_data(acl_redis)
    before = _state(admin)
    url = f"redis://user:{SECRET}@127.0.0.1:{acl_redis.port}/0"
    out = tmp_path / "out"
    done = _check(url, out, "--no-toxiproxy", "--allow-server-faults", faults="script-flush")
    assert done.returncode == 0, done.stdout + done.stderr
    report = _report(out)
    assert report["left_out"] == []
    assert report["stats"]["faults"] == ["script-flush"]  # type: ignore[index]
    assert admin.script_exists(sha) == [False]
    assert _state(admin) == before
    admin.close()


def test_only_server_faults_on_a_users_redis_proves_nothing(
    acl_redis: RedisServer, tmp_path: Path
) -> None:
    """--faults script-flush on a user's Redis without the opt-in: no fault can run, so the run
    proved nothing under faults: exit 2, the reason on the console and in report.json; the
    script is still cached."""
    admin, sha, _ids = _user_data(acl_redis)
    url = f"redis://user:{SECRET}@127.0.0.1:{acl_redis.port}/0"
    out = tmp_path / "out"
    done = _check(url, out, "--no-toxiproxy", faults="script-flush")
    assert done.returncode == 2, done.stdout + done.stderr
    reason = "no fault was injected though faults were asked for (script-flush left out)"
    assert f"proved nothing: {reason}" in done.stdout
    assert "inconclusive: the run proved nothing" in done.stdout
    report = _report(out)
    assert (report["verdict"], report["exit_code"]) == ("inconclusive", 2)
    assert report["inconclusive"] == [reason]
    assert admin.script_exists(sha) == [True]
    admin.close()


def test_a_wrong_password_is_a_run_that_could_not_be_done(
    acl_redis: RedisServer, tmp_path: Path
) -> None:
    """A wrong password in FENCEDLEASE_URL: exit 2 with one line naming the Redis (***
    for the password) and the authentication error; no traceback, no password, no history."""
    url = f"redis://user:wrong-{SECRET}@127.0.0.1:{acl_redis.port}/0"
    out = tmp_path / "out"
    done = _check(url, out, "--no-toxiproxy")
    assert done.returncode == 2, done.stdout + done.stderr
    errors = [line for line in done.stdout.splitlines() if line.startswith("error:")]
    assert errors == [
        f"error: ResourceUnavailable: cannot use the Redis at redis://user:***@127.0.0.1:"
        f"{acl_redis.port}/0: AuthenticationError: invalid username-password pair or user is"
        " disabled."
    ]
    assert SECRET not in done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    assert not (out / "report.json").exists()


def test_a_run_without_a_grant_fails(acl_redis: RedisServer, tmp_path: Path) -> None:
    """A user that may connect but not run scripts: every acquire fails, no lease is granted;
    the run says it proved nothing and exits 2 (it used to print "no violation", exit 0)."""
    admin = redis.Redis(port=acl_redis.port)
    admin.execute_command(  # type: ignore[no-untyped-call]
        "ACL", "SETUSER", "noscript", "on", f">{SECRET}", "~*", "&*", "+@all", "-@scripting"
    )
    url = f"redis://noscript:{SECRET}@127.0.0.1:{acl_redis.port}/0"
    out = tmp_path / "out"
    done = _check(url, out, "--no-toxiproxy")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "proved nothing: no lease was granted" in done.stdout
    assert "no violation" not in done.stdout
    report = _report(out)
    assert (report["verdict"], report["exit_code"], report["valid"]) == ("inconclusive", 2, True)
    assert report["stats"]["grants"] == 0  # type: ignore[index]
    assert str(report["inconclusive"][0]).startswith("no lease was granted")  # type: ignore[index]
    assert admin.keys("fencedlease-check:*") == []
    admin.close()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_an_unreachable_postgresql_is_one_redacted_line(
    acl_redis: RedisServer, tmp_path: Path
) -> None:
    """--resource postgres with a DSN nothing listens on: exit 2, one line naming the DSN with
    *** for the password and psycopg's error; no traceback, no password."""
    port = _free_port()
    dsn = f"postgresql://app:pg-{SECRET}@127.0.0.1:{port}/app"
    url = f"redis://user:{SECRET}@127.0.0.1:{acl_redis.port}/0"
    out = tmp_path / "out"
    done = _check(url, out, "--no-toxiproxy", "--resource", "postgres", "--resource-url", dsn)
    assert done.returncode == 2, done.stdout + done.stderr
    errors = [line for line in done.stdout.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, done.stdout
    assert errors[0].startswith(
        "error: ResourceUnavailable: cannot use the postgres resource "
        f"postgresql://app:***@127.0.0.1:{port}/app: OperationalError: connection"
    )
    assert "Connection refused" in errors[0]
    assert SECRET not in done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr
