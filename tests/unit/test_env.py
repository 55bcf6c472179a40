"""``from_env`` on both faces: the ``FENCEDLEASE_*`` variables, their bounds, their errors (naming
the variable, never echoing a password) and their mapping onto redis-py's options. No I/O: the
Redis clients are built, never connected."""

from __future__ import annotations

import asyncio
import warnings
from typing import Any

import pytest
import redis.asyncio.retry
import redis.retry
from redis.backoff import EqualJitterBackoff

from fencedlease import (
    BackendError,
    LeaseManager,
    MemoryBackend,
    ShutdownReport,
    ValidationError,
    url_from_env,
)
from fencedlease._core.env import read_env
from fencedlease._core.shutdown import close_bound_ms
from fencedlease.aio import AsyncLeaseManager
from fencedlease.backends import AsyncMemoryBackend

URL = "redis://user:s3cr3t-pw@127.0.0.1:6390"

NUMBERS = {
    "FENCEDLEASE_DB": (0, 2**31 - 1),
    "FENCEDLEASE_CONNECT_TIMEOUT_MS": (1, 2_147_483_647),
    "FENCEDLEASE_SOCKET_TIMEOUT_MS": (1, 2_147_483_647),
    "FENCEDLEASE_SHUTDOWN_TIMEOUT_MS": (0, 2_147_483_647),
    "FENCEDLEASE_MAX_RETRIES": (0, 1_000),
    "FENCEDLEASE_CONNECT_MAX_ATTEMPTS": (1, 1_000),
}
NOT_DIGITS = ["", "-1", "+1", " 1", "1 ", "1_0", "1.5", "2e3", "0x10", "\u0663", "one"]


def _sync(env: dict[str, str], **kwargs: Any) -> LeaseManager:
    return LeaseManager.from_env(env, **kwargs)


def _aio(env: dict[str, str], **kwargs: Any) -> AsyncLeaseManager:
    return asyncio.run(AsyncLeaseManager.from_env(env, **kwargs))


FACES = [_sync, _aio]


def test_url_is_required() -> None:
    for env in ({}, {"FENCEDLEASE_URL": ""}):
        with pytest.raises(ValidationError) as info:
            read_env(env)
        assert info.value.argument == "FENCEDLEASE_URL"
        assert "FENCEDLEASE_URL must be set" in str(info.value)


@pytest.mark.parametrize("variable", sorted(NUMBERS))
def test_each_number_is_a_digit_string_within_its_bounds(variable: str) -> None:
    least, most = NUMBERS[variable]
    for raw in [*NOT_DIGITS, str(most + 1), *([str(least - 1)] if least > 0 else [])]:
        with pytest.raises(ValidationError) as info:
            read_env({"FENCEDLEASE_URL": URL, variable: raw})
        assert info.value.argument == variable, raw
        assert f"{least} <= {variable} <= {most}" in str(info.value)
        assert "s3cr3t" not in str(info.value)
    for good in (least, most):
        config = read_env({"FENCEDLEASE_URL": URL, variable: str(good)})
        field = variable.removeprefix("FENCEDLEASE_").lower()
        assert getattr(config, field) == good


def test_defaults() -> None:
    config = read_env({"FENCEDLEASE_URL": URL})
    assert (config.prefix, config.db, config.connect_timeout_ms, config.socket_timeout_ms) == (
        "fencedlease", None, None, None,
    )  # fmt: skip
    assert (config.max_retries, config.shutdown_timeout_ms, config.connect_max_attempts) == (
        None, 5_000, 3,
    )  # fmt: skip


def test_environ_defaults_to_os_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FENCEDLEASE_URL", "memory://")
    monkeypatch.setenv("FENCEDLEASE_PREFIX", "from-os")
    assert read_env().prefix == "from-os"


@pytest.mark.parametrize("face", FACES, ids=["sync", "aio"])
def test_bad_prefix_and_bad_url_name_their_variable(face: Any) -> None:
    with pytest.raises(ValidationError) as info:
        face({"FENCEDLEASE_URL": URL, "FENCEDLEASE_PREFIX": "a{b"})
    assert info.value.argument == "FENCEDLEASE_PREFIX"
    for url in ("ftp://user:s3cr3t-pw@host", "redis://user:s3cr3t-pw@host:notaport/0"):
        with pytest.raises(ValidationError) as info:
            face({"FENCEDLEASE_URL": url})
        assert info.value.argument == "FENCEDLEASE_URL"
        assert "s3cr3t" not in str(info.value)
        assert "***" in str(info.value)


@pytest.mark.parametrize("face", FACES, ids=["sync", "aio"])
def test_redis_variables_are_refused_with_other_stores(face: Any) -> None:
    for variable in (
        "FENCEDLEASE_DB", "FENCEDLEASE_CONNECT_TIMEOUT_MS", "FENCEDLEASE_SOCKET_TIMEOUT_MS",
        "FENCEDLEASE_MAX_RETRIES",
    ):  # fmt: skip
        with pytest.raises(ValidationError) as info:
            face({"FENCEDLEASE_URL": "memory://", variable: "1"})
        assert info.value.argument == variable


def test_db_in_the_url_and_the_variable_is_refused() -> None:
    for url in ("redis://:s3cr3t-pw@h:6379/2", "unix:///tmp/r.sock?db=2"):
        with pytest.raises(ValidationError) as info:
            read_env({"FENCEDLEASE_URL": url, "FENCEDLEASE_DB": "3"})
        assert info.value.argument == "FENCEDLEASE_DB"
        assert "s3cr3t" not in str(info.value)
    assert read_env({"FENCEDLEASE_URL": "redis://h:6379/", "FENCEDLEASE_DB": "3"}).db == 3


FULL = {
    "FENCEDLEASE_URL": URL,
    "FENCEDLEASE_PREFIX": "svc",
    "FENCEDLEASE_DB": "3",
    "FENCEDLEASE_CONNECT_TIMEOUT_MS": "500",
    "FENCEDLEASE_SOCKET_TIMEOUT_MS": "250",
    "FENCEDLEASE_MAX_RETRIES": "2",
    "FENCEDLEASE_SHUTDOWN_TIMEOUT_MS": "750",
}


def _close(manager: LeaseManager | AsyncLeaseManager) -> ShutdownReport:
    if isinstance(manager, AsyncLeaseManager):
        return asyncio.run(manager.close())
    return manager.close()


@pytest.mark.parametrize(
    ("face", "retry_class"),
    [(_sync, redis.retry.Retry), (_aio, redis.asyncio.retry.Retry)],
    ids=["sync", "aio"],
)
def test_variables_become_redis_py_options(face: Any, retry_class: type) -> None:
    manager = face(FULL)
    client = manager.backend.client
    options = client.connection_pool.connection_kwargs
    assert (options["db"], options["socket_connect_timeout"], options["socket_timeout"]) == (
        3, 0.5, 0.25,
    )  # fmt: skip
    retry: Any = options["retry"]
    assert (retry._retries, type(retry._backoff)) == (2, EqualJitterBackoff)
    assert type(retry) is retry_class
    assert manager.backend.prefix == "svc"
    assert manager._shutdown_timeout_ms == 750
    assert _close(manager).timeout_ms == 750


@pytest.mark.parametrize("face", FACES, ids=["sync", "aio"])
def test_an_argument_a_variable_sets_too_is_refused(face: Any) -> None:
    with pytest.raises(ValidationError) as info:
        face(FULL, socket_timeout=1.0)
    assert info.value.argument == "socket_timeout"
    env = {"FENCEDLEASE_URL": URL}
    manager = face(env, socket_timeout=1.0, health_check_interval=5)
    options = manager.backend.client.connection_pool.connection_kwargs
    assert (options["socket_timeout"], options["health_check_interval"]) == (1.0, 5)


def test_memory_and_sqlite_urls(tmp_path: Any) -> None:
    env = {"FENCEDLEASE_URL": "memory://", "FENCEDLEASE_SHUTDOWN_TIMEOUT_MS": "0"}
    with LeaseManager.from_env(env, connect=True) as manager:
        report = manager.check_health()
        assert report.script_ms is None
        assert report.total_ms >= report.ping_ms >= 0
        assert manager.acquire("k").acquired
    assert manager._shutdown_timeout_ms == 0
    sqlite_env = {"FENCEDLEASE_URL": f"sqlite:///{tmp_path}/leases.db"}

    async def main() -> None:
        manager = await AsyncLeaseManager.from_env(sqlite_env, connect=True)
        report = await manager.check_health()
        assert report.script_ms is None
        assert (await manager.close()).complete

    asyncio.run(main())


def test_connect_failure_closes_the_manager_and_raises_backend_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A store that fails every check: BackendError after the attempts, the last failure in
    ``__cause__``, the waits between attempts on the clock (0.1 s, then 0.2 s)."""
    from fencedlease.backends import MemoryBackend
    from fencedlease.testing import FakeClock

    calls: list[str] = []

    class Broken(MemoryBackend):
        def inspect(self, key: str) -> Any:
            calls.append(key)
            raise BackendError(f"store down ({len(calls)})")

    clock = FakeClock()
    made: list[LeaseManager] = []

    def over_url(*args: Any) -> LeaseManager:
        manager = LeaseManager(Broken(clock=clock), clock=clock)
        made.append(manager)
        return manager

    monkeypatch.setattr(LeaseManager, "_over_url", classmethod(lambda cls, *a: over_url(*a)))
    env = {"FENCEDLEASE_URL": "memory://", "FENCEDLEASE_CONNECT_MAX_ATTEMPTS": "3"}
    with pytest.raises(BackendError) as info:
        LeaseManager.from_env(env, connect=True, clock=clock)
    assert len(calls) == 3
    assert clock.elapsed_ms == 300
    assert "3 attempt(s)" in str(info.value)
    assert str(info.value.__cause__) == "store down (3)"
    assert made[0]._closed


def test_close_bound_is_the_shutdown_timeout_unless_given() -> None:
    """Both faces' ``close(timeout_ms)`` bound: the manager's shutdown timeout for None, the
    argument when it is an int in 0..2,147,483,647, else a ValidationError naming it."""
    assert close_bound_ms(None, 5_000) == 5_000
    assert close_bound_ms(0, 5_000) == 0
    assert close_bound_ms(2_147_483_647, 5_000) == 2_147_483_647
    for bad in (-1, 2_147_483_648, 1.5, True):
        with pytest.raises(ValidationError, match="timeout_ms") as raised:
            close_bound_ms(bad, 5_000)  # type: ignore[arg-type]
        assert raised.value.argument == "timeout_ms"


@pytest.mark.parametrize("face", FACES, ids=["sync", "aio"])
def test_a_misspelt_variable_is_named_with_the_setting_it_resembles(face: Any) -> None:
    env = {
        "FENCEDLEASE_URL": "memory://",
        "FENCEDLEASE_SHUTDOWN_TIMEOUT": "100",  # no _MS: would be ignored silently
        "FENCEDLEASE_PREFX": "svc",
        # the project's test and CI variables share the prefix: not settings, not near one
        "FENCEDLEASE_REQUIRE_SERVERS": "1",
        "FENCEDLEASE_REDIS_SERVER": "/usr/bin/redis-server",
        "FENCEDLEASE_MUTATION": "1",
    }
    with pytest.warns(UserWarning, match="is not a fencedlease setting") as caught:
        manager = face(env)
    if isinstance(manager, LeaseManager):
        manager.close()
    else:
        asyncio.run(manager.close())
    assert [str(w.message) for w in caught] == [
        "FENCEDLEASE_PREFX is not a fencedlease setting and is ignored; did you mean"
        " FENCEDLEASE_PREFIX?",
        "FENCEDLEASE_SHUTDOWN_TIMEOUT is not a fencedlease setting and is ignored; did you"
        " mean FENCEDLEASE_SHUTDOWN_TIMEOUT_MS?",
    ]
    with pytest.warns(UserWarning, match="FENCEDLEASE_PREFX"):
        assert read_env(env).prefix == "fencedlease"  # the misspelt prefix was not taken


def test_the_settings_themselves_warn_of_nothing() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert read_env(FULL).prefix == "svc"


@pytest.mark.parametrize("face", FACES)
@pytest.mark.parametrize("variable", sorted(NUMBERS))
def test_a_5000_digit_number_is_refused_naming_its_variable(face: Any, variable: str) -> None:
    """5,000 digits (beyond int()'s digit limit), out of bounds or, with leading zeros, in them:
    ValidationError naming the variable, its bounds and the 20-digit limit, on both faces."""
    least, most = NUMBERS[variable]
    for raw in ("9" * 5000, "0" * (5000 - len(str(most))) + str(most)):
        with pytest.raises(ValidationError) as info:
            face({"FENCEDLEASE_URL": URL, variable: raw})
        assert info.value.argument == variable
        assert str(info.value) == (
            f"{variable} must be an integer string of at most 20 digits,"
            f" {least} <= {variable} <= {most}; got {raw[:40] + '... (5000 characters)'!r}"
        )


@pytest.mark.parametrize(
    ("raw", "value"),
    [("0250", 250), ("0" * 17 + "250", 250), ("00000000000000000000", 0)],
)
def test_leading_zeros_are_digits_up_to_twenty(raw: str, value: int) -> None:
    """Leading zeros are taken (up to 20 characters in all): ``"0250"`` is 250."""
    assert read_env({"FENCEDLEASE_URL": URL, "FENCEDLEASE_MAX_RETRIES": raw}).max_retries == value


@pytest.mark.parametrize(
    "raw", ["0" * 18 + "250", "+250", " 250", "250 ", "2_50", "\u0662\u0665\u0660", "250\n"]
)
def test_a_sign_space_underscore_or_21st_digit_is_refused(raw: str) -> None:
    """A sign, a space (either end), an underscore, a non-ASCII digit or a 21st character: the
    bounds and the limit in the message, the value shown."""
    with pytest.raises(ValidationError) as info:
        read_env({"FENCEDLEASE_URL": URL, "FENCEDLEASE_MAX_RETRIES": raw})
    assert info.value.argument == "FENCEDLEASE_MAX_RETRIES"
    assert str(info.value) == (
        "FENCEDLEASE_MAX_RETRIES must be an integer string of at most 20 digits,"
        f" 0 <= FENCEDLEASE_MAX_RETRIES <= 1000; got {raw!r}"
    )


NEW, OLD = "FENCEDLEASE_URL", "FENCEDLEASE_REDIS_URL"
SHOWN = "redis://user:***@127.0.0.1:6390"
DEPRECATED = (
    f"FENCEDLEASE_REDIS_URL is deprecated: set FENCEDLEASE_URL instead (the one variable naming"
    f" the store); {SHOWN!r} is used"
)


def _url_and_warnings(env: dict[str, str]) -> tuple[str | None, list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        url = url_from_env(env)
    assert all(w.category is DeprecationWarning for w in caught)
    assert all(w.filename == __file__ for w in caught)  # the caller's line, not the library's
    return url, [str(w.message) for w in caught]


def test_the_url_variable_wins_over_the_deprecated_name() -> None:
    """FENCEDLEASE_URL alone or with an equal old name: used, no warning; the old name alone:
    used with a DeprecationWarning; both, differing: FENCEDLEASE_URL used, the warning naming
    both stores (passwords as ***); neither, or empty values: None."""
    other = "redis://:other-s3cr3t@10.0.0.1:6379/0"
    assert _url_and_warnings({NEW: URL}) == (URL, [])
    assert _url_and_warnings({NEW: URL, OLD: URL}) == (URL, [])
    assert _url_and_warnings({OLD: URL}) == (URL, [DEPRECATED])
    assert _url_and_warnings({NEW: "", OLD: URL}) == (URL, [DEPRECATED])
    assert _url_and_warnings({NEW: URL, OLD: other}) == (
        URL,
        [
            "FENCEDLEASE_REDIS_URL is deprecated and ignored: FENCEDLEASE_URL is set too and wins"
            f" ({SHOWN!r} is used, not 'redis://:***@10.0.0.1:6379/0'); unset"
            " FENCEDLEASE_REDIS_URL"
        ],
    )
    assert _url_and_warnings({}) == (None, [])
    assert _url_and_warnings({NEW: "", OLD: ""}) == (None, [])
    assert _url_and_warnings({NEW: URL, OLD: ""}) == (URL, [])


@pytest.mark.parametrize("face", FACES, ids=["sync", "aio"])
def test_from_env_reads_the_deprecated_name_with_a_warning(face: Any) -> None:
    """from_env with only FENCEDLEASE_REDIS_URL makes the manager on that store and warns once,
    at the caller's line; the other store of a differing old name is not used."""
    with pytest.warns(DeprecationWarning, match="is deprecated") as caught:
        manager = face({OLD: "memory://"})
    assert [str(w.message) for w in caught] == [
        "FENCEDLEASE_REDIS_URL is deprecated: set FENCEDLEASE_URL instead (the one variable"
        " naming the store); 'memory://' is used"
    ]
    if face is _sync:
        assert caught[0].filename == __file__
    assert isinstance(manager.backend, (MemoryBackend, AsyncMemoryBackend))
    with pytest.warns(DeprecationWarning, match="is deprecated and ignored"):
        assert read_env({NEW: "memory://", OLD: URL}).url == "memory://"
    if isinstance(manager, LeaseManager):
        manager.close()
    else:
        asyncio.run(manager.close())
