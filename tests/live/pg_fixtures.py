"""The ``postgres_dsn`` fixture: a real PostgreSQL for the live database tests.

Imported by the live tests (and by ``tests/live/conftest.py``). ``FENCEDLEASE_POSTGRES_URL`` names a
server to use; otherwise one is started for the session
(:mod:`fencedlease_lab.servers.postgres`). When none can be had the tests are skipped, or fail when
``FENCEDLEASE_REQUIRE_SERVERS=1`` (CI).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import ExitStack

import pytest

from fencedlease_lab.servers.postgres import PostgresUnavailable
from fencedlease_lab.servers.postgres import postgres_dsn as _postgres_dsn


@pytest.fixture(scope="session")
def postgres_dsn() -> Iterator[str]:
    """The DSN of a running PostgreSQL (``postgresql://user@127.0.0.1:port/postgres``)."""
    with ExitStack() as stack:
        try:
            dsn = stack.enter_context(_postgres_dsn())
        except PostgresUnavailable as exc:
            reason = f"no PostgreSQL: {exc}"
            if os.environ.get("FENCEDLEASE_REQUIRE_SERVERS") == "1":
                pytest.fail(reason)
            pytest.skip(reason)
        yield dsn
