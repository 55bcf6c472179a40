"""``fencedlease check`` against a Redis that needs a password: the password appears nowhere in
what the run writes or prints, and a Redis resource key it did not create is never deleted."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from fencedlease.lab.harness.run import OUT_MARKER, RESOURCE_MARKER
from fencedlease.lab.servers.redis import RedisServer, RedisUnavailable, find_redis_binary
from fencedlease.redis_fencing import RedisFencedResource

pytestmark = pytest.mark.chaos

SECRET = "s3cret-9f2c"


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


def _check(url: str, out: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, FENCEDLEASE_REDIS_URL=url)
    return subprocess.run(
        [sys.executable, "-m", "fencedlease", "check", "--out", str(out), "--workers", "2",
         "--duration", "3", "--faults", "client-kill", "--seed", "5", *args],
        env=env, capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip


def _files(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in out.rglob("*") if p.is_file()}


@pytest.mark.parametrize("resource", ["sqlite", "redis"])
def test_the_password_is_nowhere_in_the_runs_output(
    acl_redis: RedisServer, tmp_path: Path, resource: str
) -> None:
    """With FENCEDLEASE_REDIS_URL=redis://user:<password>@...: the run works (grants made), and
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
