"""Find or start a Toxiproxy for the chaos tests and the correctness harness.

Order: ``TOXIPROXY_URL`` (a real server someone runs); a ``toxiproxy-server`` binary on PATH
(started on a free loopback port, stopped afterwards); Docker through testcontainers, image
``ghcr.io/shopify/toxiproxy`` with host networking so its proxies can reach a Redis on
127.0.0.1; otherwise the embedded [`ToxiproxyServer`][fencedlease_lab.toxiproxy.ToxiproxyServer].

Whatever is found is driven only through toxiproxy-python, exactly as the real server:

```
with toxiproxy_endpoint() as endpoint:
    client = endpoint.client()
    proxy = client.create(upstream="127.0.0.1:6379", name="worker-1")
```

toxiproxy-python keeps the API address in class attributes (``APIConsumer.host``/``.port``),
so there is one current server per process:
[`ToxiproxyEndpoint.client`][fencedlease_lab.servers.toxiproxy.ToxiproxyEndpoint.client] points it
at this endpoint each time it is called.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from typing import Any, Final, Literal
from urllib.parse import urlsplit

import attrs

from fencedlease import redact_url

from ..toxiproxy import ToxiproxyServer

__all__ = [
    "DOCKER_IMAGE",
    "SOURCES",
    "Source",
    "ToxiproxyEndpoint",
    "ToxiproxyUnavailable",
    "toxiproxy_endpoint",
]

Source = Literal["env", "binary", "docker", "embedded"]

#: Every source, in the order :func:`toxiproxy_endpoint` tries them.
SOURCES: Final[tuple[Source, ...]] = ("env", "binary", "docker", "embedded")
DOCKER_IMAGE: Final = "ghcr.io/shopify/toxiproxy"


class ToxiproxyUnavailable(RuntimeError):
    """No Toxiproxy could be found or started from the sources allowed; says what was tried."""


@attrs.frozen
class ToxiproxyEndpoint:
    """A Toxiproxy API at ``host:port``.

    ``kind`` is ``"real"`` (Shopify's server) or ``"embedded"`` (ours); ``source`` says where it
    came from: ``"env"``, ``"binary"``, ``"docker"`` or ``"embedded"``.
    """

    host: str
    port: int
    kind: Literal["real", "embedded"]
    source: Source

    @property
    def api_url(self) -> str:
        """``http://host:port``, the form ``TOXIPROXY_URL`` takes."""
        return f"http://{self.host}:{self.port}"

    def client(self) -> Any:
        """A ``toxiproxy.Toxiproxy()`` pointed at this endpoint (re-points the process-wide
        toxiproxy-python client; see the module docstring)."""
        import toxiproxy

        client = toxiproxy.Toxiproxy()
        client.update_api_consumer(self.host, self.port)
        return client


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _answers(api_url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{api_url}/version", timeout=1.0) as reply:  # noqa: S310
            return bool(reply.status == 200)
    except (OSError, urllib.error.URLError):
        return False


def _wait_until_answers(api_url: str, timeout_s: float, alive: Any = None) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if _answers(api_url):
            return
        if alive is not None and not alive():
            raise ToxiproxyUnavailable(f"Toxiproxy at {api_url} exited before answering")
        time.sleep(0.05)
    raise ToxiproxyUnavailable(f"Toxiproxy at {api_url} did not answer within {timeout_s} s")


def _from_env() -> ToxiproxyEndpoint | None:
    url = os.environ.get("TOXIPROXY_URL")
    if not url:
        return None
    parts = urlsplit(url if "://" in url else f"http://{url}")
    if parts.hostname is None:
        raise ToxiproxyUnavailable(f"TOXIPROXY_URL={redact_url(url)!r} names no host")
    endpoint = ToxiproxyEndpoint(parts.hostname, parts.port or 8474, "real", "env")
    if not _answers(endpoint.api_url):
        # The user pointed us at a server on purpose: say so rather than fall back silently.
        raise ToxiproxyUnavailable(
            f"TOXIPROXY_URL={redact_url(url)!r} does not answer GET /version"
        )
    return endpoint


@contextmanager
def _binary(path: str, timeout_s: float) -> Iterator[ToxiproxyEndpoint]:
    port = _free_port()
    process = subprocess.Popen(
        [path, "-host", "127.0.0.1", "-port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        endpoint = ToxiproxyEndpoint("127.0.0.1", port, "real", "binary")
        _wait_until_answers(endpoint.api_url, timeout_s, alive=lambda: process.poll() is None)
        yield endpoint
    finally:
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextmanager
def _docker(timeout_s: float) -> Iterator[ToxiproxyEndpoint]:
    from testcontainers.core.container import DockerContainer

    port = _free_port()
    # Host networking: proxies the harness creates must listen on, and reach Redis at, this
    # machine's 127.0.0.1, which a bridged container cannot.
    container = (
        DockerContainer(DOCKER_IMAGE)
        .with_kwargs(network_mode="host")
        .with_command(f"-host=127.0.0.1 -port={port}")
    )
    container.start()
    try:
        endpoint = ToxiproxyEndpoint("127.0.0.1", port, "real", "docker")
        _wait_until_answers(endpoint.api_url, timeout_s)
        yield endpoint
    finally:
        container.stop()


@contextmanager
def toxiproxy_endpoint(
    *, sources: Sequence[Source] = SOURCES, start_timeout_s: float = 15.0
) -> Iterator[ToxiproxyEndpoint]:
    """Yield the first Toxiproxy that ``sources`` allow, in
    [`SOURCES`][fencedlease_lab.servers.toxiproxy.SOURCES] order.

    A server this function starts (binary, container, embedded) is stopped when the block ends;
    one named by ``TOXIPROXY_URL`` is left alone. ``start_timeout_s`` (seconds) bounds the wait
    for a started server to answer. Raises
    [`ToxiproxyUnavailable`][fencedlease_lab.servers.toxiproxy.ToxiproxyUnavailable] when no allowed
    source works (only possible without ``"embedded"``), or when ``TOXIPROXY_URL`` is set but does
    not answer.
    """
    tried: list[str] = []
    if "env" in sources:
        endpoint = _from_env()
        if endpoint is not None:
            yield endpoint
            return
        tried.append("TOXIPROXY_URL: not set")
    if "binary" in sources:
        path = shutil.which("toxiproxy-server")
        if path is not None:
            with _binary(path, start_timeout_s) as endpoint:
                yield endpoint
            return
        tried.append("toxiproxy-server: not on PATH")
    if "docker" in sources:
        with ExitStack() as stack:
            try:
                docker_endpoint = stack.enter_context(_docker(start_timeout_s))
            except Exception as exc:  # testcontainers raises at construction when no engine runs
                tried.append(f"Docker via testcontainers: {type(exc).__name__}: {exc}")
            else:
                yield docker_endpoint
                return
    if "embedded" in sources:
        with ToxiproxyServer() as server:
            yield ToxiproxyEndpoint(server.host, server.port, "embedded", "embedded")
        return
    raise ToxiproxyUnavailable("no Toxiproxy: " + "; ".join(tried))
