"""``fencedlease doctor``'s per-node checks of a replicated Redis without a server: a primary's
replicas and their lag, a replica's link, ``cluster-require-full-coverage``, and how many
sentinels name which primary. The live runs are in tests/live/test_doctor.py."""

from __future__ import annotations

from typing import Any

import redis

from fencedlease.cli.doctor import Check
from fencedlease.cli.doctor_nodes import check_full_coverage, check_role, sentinel_agreement


class _Node:
    """A stand-in for ``redis.Redis``: ``INFO replication``, ``CONFIG GET`` and the sentinel's
    ``GET-MASTER-ADDR-BY-NAME`` answered from fixed values (an exception is raised)."""

    def __init__(
        self,
        replication: dict[str, Any] | None = None,
        config: dict[str, str] | None = None,
        named: object = None,
        port: int = 0,
    ) -> None:
        self.replication = replication or {}
        self.config = config or {}
        self.named = named
        self.connection_pool = redis.ConnectionPool(host="10.0.0.9", port=port)

    def info(self, section: str) -> dict[str, Any]:
        assert section == "replication"
        return self.replication

    def config_get(self, name: str) -> dict[str, str]:
        if name not in self.config:
            raise redis.exceptions.ResponseError("unknown command 'CONFIG'")
        return {name: self.config[name]}

    def execute_command(self, *args: object) -> object:
        assert args == ("SENTINEL GET-MASTER-ADDR-BY-NAME", "svc")
        if isinstance(self.named, BaseException):
            raise self.named
        return self.named


def _node(**fields: Any) -> Any:
    return _Node(**fields)


def _primary(*replicas: dict[str, Any]) -> Any:
    fields = {f"slave{i}": replica for i, replica in enumerate(replicas)}
    return _Node({"role": "master", "master_repl_offset": 5000, **fields})


def test_a_primary_names_each_replica_with_its_lag() -> None:
    """A primary's role check lists each replica with its state, the bytes of the stream it has
    not acknowledged and the seconds since its last acknowledgement; all in time passes."""
    node = _primary(
        {"ip": "10.0.0.2", "port": 7001, "state": "online", "offset": 5000, "lag": 0},
        {"ip": "10.0.0.3", "port": 7002, "state": "online", "offset": 4880, "lag": 1},
    )
    assert check_role(node) == Check(
        "role",
        "pass",
        "primary, 2 replica(s): 10.0.0.2:7001 online, 0 bytes and 0 s behind;"
        " 10.0.0.3:7002 online, 120 bytes and 1 s behind",
    )


def test_a_replica_acknowledging_late_or_not_online_warns() -> None:
    """A replica whose last acknowledgement is older than a second, or one still syncing, is
    a warning naming what a promotion of it would lose."""
    late = _primary({"ip": "10.0.0.2", "port": 7001, "state": "online", "offset": 10, "lag": 4})
    syncing = _primary({"ip": "10.0.0.3", "port": 7002, "state": "wait_bgsave", "offset": 0})
    for node, shown in [
        (late, "10.0.0.2:7001 online, 4990 bytes and 4 s behind"),
        (syncing, "10.0.0.3:7002 wait_bgsave, 5000 bytes and ? s behind"),
    ]:
        check = check_role(node)
        assert (check.status, check.detail) == ("warn", f"primary, 1 replica(s): {shown}")
        assert check.remedy.startswith("a replica not online, or acknowledging later than 1 s")


def test_a_replica_names_its_primary_and_warns_when_its_link_is_down() -> None:
    """A replica's role check names its primary and link; a link down is a warning."""
    fields = {"role": "slave", "master_host": "10.0.0.1", "master_port": 7000}
    up = _node(replication={**fields, "master_link_status": "up", "master_last_io_seconds_ago": 2})
    down = _node(
        replication={**fields, "master_link_status": "down", "master_last_io_seconds_ago": -1}
    )
    assert check_role(up) == Check(
        "role", "pass", "replica of 10.0.0.1:7000, link up, last heard from it 2 s ago"
    )
    assert (check_role(down).status, check_role(down).detail) == (
        "warn",
        "replica of 10.0.0.1:7000, link down, last heard from it -1 s ago",
    )


def test_a_primary_without_replicas_passes() -> None:
    """A primary with no replica says so."""
    assert check_role(_primary()) == Check("role", "pass", "primary, no replicas")


def test_full_coverage_yes_warns_no_passes_unreadable_warns() -> None:
    """``cluster-require-full-coverage yes`` (Redis's default) warns that one shard without a
    primary loses the leases of the others; ``no`` passes; a refused ``CONFIG`` warns."""
    yes = check_full_coverage(_node(config={"cluster-require-full-coverage": "yes"}))
    no = check_full_coverage(_node(config={"cluster-require-full-coverage": "no"}))
    refused = check_full_coverage(_node())
    assert (yes.status, yes.detail) == (
        "warn",
        "cluster-require-full-coverage yes: once a shard has no primary (failed, no replica took"
        " over), every node answers CLUSTERDOWN: the leases on the shards still served are not"
        " renewed and are lost",
    )
    assert yes.remedy.startswith("CONFIG SET cluster-require-full-coverage no on every node")
    assert (no.status, no.detail) == (
        "pass",
        "cluster-require-full-coverage no: a shard without a primary stops only its own leases",
    )
    assert (refused.status, refused.detail) == (
        "warn",
        "CONFIG GET refused: cluster-require-full-coverage not read",
    )


def _sentinels(*named: object) -> list[Any]:
    return [_node(named=answer, port=26379 + i) for i, answer in enumerate(named)]


def test_every_sentinel_naming_one_primary_passes() -> None:
    """Three sentinels naming the same primary: a pass counting them."""
    check = sentinel_agreement(_sentinels(*[[b"10.0.0.1", 6379]] * 3), "svc")
    assert check == Check(
        "sentinel",
        "pass",
        "primary of 'svc': 3 of 3 name 10.0.0.1:6379"
        " (10.0.0.9:26379, 10.0.0.9:26380, 10.0.0.9:26381)",
    )


def test_a_minority_naming_another_primary_or_silent_warns() -> None:
    """Two of three sentinels name one primary, the third another (or does not answer): a
    warning counting each answer and naming who gave it."""
    other = sentinel_agreement(
        _sentinels([b"10.0.0.1", 6379], [b"10.0.0.2", 6379], [b"10.0.0.1", 6379]), "svc"
    )
    silent = sentinel_agreement(
        _sentinels([b"10.0.0.1", 6379], redis.exceptions.ConnectionError(), [b"10.0.0.1", 6379]),
        "svc",
    )
    assert (other.status, other.detail) == (
        "warn",
        "primary of 'svc': 2 of 3 name 10.0.0.1:6379 (10.0.0.9:26379, 10.0.0.9:26381);"
        " 1 of 3 name 10.0.0.2:6379 (10.0.0.9:26380)",
    )
    assert (silent.status, silent.detail) == (
        "warn",
        "primary of 'svc': 2 of 3 name 10.0.0.1:6379 (10.0.0.9:26379, 10.0.0.9:26381);"
        " 1 of 3 name <ConnectionError> (10.0.0.9:26380)",
    )


def test_no_primary_named_by_a_majority_fails() -> None:
    """One of three names a primary, the others none or do not answer: no majority, a fail."""
    check = sentinel_agreement(
        _sentinels([b"10.0.0.1", 6379], None, redis.exceptions.TimeoutError()), "svc"
    )
    assert (check.status, check.detail) == (
        "fail",
        "primary of 'svc': 1 of 3 name 10.0.0.1:6379 (10.0.0.9:26379); 1 of 3 name none"
        " (10.0.0.9:26380); 1 of 3 name <TimeoutError> (10.0.0.9:26381)",
    )
    assert check.remedy.startswith("no primary is named by a majority of the sentinels")
    two_of_four = sentinel_agreement(
        _sentinels(*[[b"10.0.0.1", 6379]] * 2, *[[b"10.0.0.2", 6379]] * 2), "svc"
    )
    assert two_of_four.status == "fail"
