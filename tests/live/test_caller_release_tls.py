"""The release on the caller's thread over TLS and as the ACL user, with a hand-off to a waiter."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from test_acl_tls import PREFIX, Acl, acl, acl_server, pki, tls  # noqa: F401

from conftest import needs_caller_releases, wait_until
from fencedlease import BackendError, LeaseManager

pytestmark = [pytest.mark.live, needs_caller_releases]


def test_acl(acl: Acl) -> None:  # noqa: F811
    _run(acl)


def test_tls(tls: Acl) -> None:  # noqa: F811
    _run(tls)


def _run(server: Acl) -> None:
    server.reset()
    with (
        LeaseManager.from_url(server.url(), prefix=PREFIX, **server.client_kwargs) as leases,
        LeaseManager.from_url(server.url(), prefix=PREFIX, **server.client_kwargs) as other,
    ):
        with leases.hold("warm", ttl_ms=10_000):
            pass
        caller = leases._releases.caller
        assert caller is not None
        wait_until(lambda: caller.ready() == 1, "a connection for releases")
        got: list[Any] = []
        with leases.hold("h", ttl_ms=10_000) as lease:
            t = threading.Thread(
                target=lambda: got.append(
                    other.acquire("h", ttl_ms=10_000, wait_ms=10_000, retry_delay_ms=5_000)
                )
            )
            t.start()
            wait_until(lambda: server.admin.zcard("acl:{h}:waiters") == 1, "a waiter")
        t.join(10)
        assert not lease.lost and got[0].lease is not None and got[0].lease.fencing_token == 2
        assert got[0].lease.release() is True
        assert caller.ready() == 1
        deadline = 0.0
        try:
            with (
                pytest.raises(BackendError, match="no reply"),
                leases.hold("p", ttl_ms=1_000, heartbeat_ms=200) as held,
            ):
                server.server.pause()
                deadline = held._state.deadline or 0.0
            assert time.monotonic() < deadline + 0.3
        finally:
            server.server.resume()
