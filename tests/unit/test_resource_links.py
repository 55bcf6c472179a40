"""Each worker's resource spec through its own proxies: which targets are rewritten, and how."""

from __future__ import annotations

from typing import Any

import attrs

from fencedlease_lab.harness.resource_links import proxied_spec, resource_timeout_ms
from fencedlease_lab.harness.resource_spec import ResourceSpec


@attrs.define
class _Proxy:
    listen: str

    def destroy(self) -> None:
        pass


class _Proxies:
    """Makes a proxy per upstream asked for, listening on consecutive ports."""

    def __init__(self) -> None:
        self.upstreams: list[str] = []

    def __call__(self, upstream: str) -> Any:
        self.upstreams.append(upstream)
        return _Proxy(f"127.0.0.1:{7000 + len(self.upstreams)}")


def test_mixed_parts_sharing_a_server_share_one_proxy_and_local_ones_stay() -> None:
    """The two Redis parts of ``mixed`` (one server) go through one proxy with the short
    timeout; SQLite and the memory resource keep their targets and timeout."""
    parts = (
        ResourceSpec("sqlite", "/tmp/r.sqlite3"),
        ResourceSpec("memory", "127.0.0.1:5000"),
        ResourceSpec("redis", "redis://127.0.0.1:6390/0"),
        ResourceSpec("redis-strict", "redis://127.0.0.1:6390/0"),
    )
    proxies = _Proxies()
    spec, made = proxied_spec(ResourceSpec("mixed", "", parts=parts), proxies, 500)
    assert proxies.upstreams == ["127.0.0.1:6390"]
    assert made == [_Proxy("127.0.0.1:7001")]
    assert [(p.target, p.timeout_ms) for p in spec.parts] == [
        ("/tmp/r.sqlite3", 5000),
        ("127.0.0.1:5000", 5000),
        ("redis://127.0.0.1:7001/0", 500),
        ("redis://127.0.0.1:7001/0", 500),
    ]


def test_credentials_path_and_query_are_kept_through_the_proxy() -> None:
    """A PostgreSQL DSN and a Redis URL keep their user, password, database and options; only
    host and port become the proxy's (the default port when the URL names none)."""
    proxies = _Proxies()
    pg, _ = proxied_spec(
        ResourceSpec("postgres", "postgresql://u:pw@db.local/app?sslmode=disable"), proxies, 400
    )
    rd, _ = proxied_spec(ResourceSpec("redis", "redis://:pw@cache:6380/2"), proxies, 400)
    assert proxies.upstreams == ["db.local:5432", "cache:6380"]
    assert pg.target == "postgresql://u:pw@127.0.0.1:7001/app?sslmode=disable"
    assert rd.target == "redis://:pw@127.0.0.1:7002/2"


def test_a_target_that_is_no_url_is_reached_directly() -> None:
    """A ``unix://`` Redis cannot be proxied: the spec comes back as it was, no proxy made."""
    spec = ResourceSpec("redis", "unix:///run/redis.sock")
    proxies = _Proxies()
    assert proxied_spec(spec, proxies, 400) == (spec, [])
    assert proxies.upstreams == []


def test_the_resource_timeout_is_half_a_ttl_and_at_least_100_ms() -> None:
    """The client's timeout behind a proxy is ttl/2, never under 100 ms."""
    assert [resource_timeout_ms(t) for t in (1000, 150, 3001)] == [500, 100, 1500]


class _Endpoint:
    """A Toxiproxy endpoint whose client makes recording proxies on consecutive ports."""

    kind, api_url = "fake", "http://127.0.0.1:1"

    def __init__(self) -> None:
        self.made: list[tuple[str, str]] = []

    def client(self) -> Any:
        return self

    def create(self, *, upstream: str, name: str, listen: str) -> Any:
        self.made.append((upstream, name))
        return _Proxy(f"127.0.0.1:{7000 + len(self.made)}")


def _network(monkeypatch: Any, resource: ResourceSpec | None) -> tuple[Any, _Endpoint]:
    import contextlib

    from fencedlease_lab.harness.environment import start_proxies
    from fencedlease_lab.harness.model import CheckConfig

    endpoint = _Endpoint()
    monkeypatch.setattr(
        "fencedlease_lab.servers.toxiproxy.toxiproxy_endpoint",
        lambda: contextlib.nullcontext(endpoint),
    )
    with contextlib.ExitStack() as stack:
        network = start_proxies(
            CheckConfig(workers=2), ["w0", "w1"], "r1", "redis://127.0.0.1:6379/0", stack, [],
            resource=resource, resource_timeout_ms=500,
        )  # fmt: skip
    return network, endpoint


def test_a_run_faulting_resource_links_shares_one_proxy_per_resource_server(
    monkeypatch: Any,
) -> None:
    """Given the resource, the workers share one proxy to its Redis server (after their own two
    to the lease Redis) and are handed the spec through it; without it, none."""
    resource = ResourceSpec("redis", "redis://127.0.0.1:6390/0")
    network, endpoint = _network(monkeypatch, resource)
    assert endpoint.made == [
        ("127.0.0.1:6379", "fencedlease-check-r1-w0"),
        ("127.0.0.1:6379", "fencedlease-check-r1-w1"),
        ("127.0.0.1:6390", "fencedlease-check-r1-data-127.0.0.1-6390"),
    ]
    assert network.resource_spec == attrs.evolve(
        resource, target="redis://127.0.0.1:7003/0", timeout_ms=500
    )
    assert network.resource_proxies == [_Proxy("127.0.0.1:7003")]
    network, endpoint = _network(monkeypatch, None)
    assert (network.resource_spec, network.resource_proxies, len(endpoint.made)) == (None, [], 2)
