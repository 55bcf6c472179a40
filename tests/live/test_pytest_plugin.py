"""The pytest plugin for users (``fencedlease.pytest_plugin``): the example suite of
docs/testing.md runs on it, its Redis fixture skips with the reason when there is no Redis, and
loading it starts nothing."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import redis

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "testing" / "test_example.py"
PLUGIN = "fencedlease.pytest_plugin"


def _plugin_args(pytestconfig: pytest.Config) -> list[str]:
    """``-p`` the plugin unless its entry point is installed (pytest loads it then)."""
    loaded = any(
        getattr(plugin, "__name__", None) == PLUGIN
        for plugin in pytestconfig.pluginmanager.get_plugins()
    )
    return [] if loaded else ["-p", PLUGIN]


def test_the_entry_point_names_the_plugin() -> None:
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    data = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))
    assert data["project"]["entry-points"]["pytest11"] == {"fencedlease": PLUGIN}


def test_the_testing_page_shows_the_example_suite_as_it_is() -> None:
    """docs/testing.md's block is examples/testing/test_example.py after its docstring and its
    ``from __future__`` line, so the page shows what the project runs."""
    page = (ROOT / "docs" / "testing.md").read_text("utf-8")
    (block,) = re.findall(r"```python\n(.*?)```", page, flags=re.DOTALL)
    example = EXAMPLE.read_text("utf-8")
    body = example.split("from __future__ import annotations\n\n", 1)[1]
    assert block == body


def test_loading_the_plugin_imports_no_server_module() -> None:
    """Loading the plugin imports nothing of the lab (where the servers are)."""
    code = (
        f"import sys, {PLUGIN}; "
        "print(sorted(m for m in sys.modules if m.startswith('fencedlease_lab')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == repr([])


_NO_LAB_CONFTEST = """
import sys

sys.modules["fencedlease_lab"] = None  # the lab is not installed: importing it fails
"""


def test_without_the_lab_the_redis_tests_skip_naming_it(
    pytester: pytest.Pytester, pytestconfig: pytest.Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the lab and FENCEDLEASE_URL, the example suite's memory and SQLite tests pass and
    its Redis tests skip, saying how to install the lab."""
    monkeypatch.delenv("FENCEDLEASE_URL", raising=False)
    monkeypatch.delenv("FENCEDLEASE_REDIS_URL", raising=False)
    monkeypatch.delenv("FENCEDLEASE_REQUIRE_SERVERS", raising=False)
    pytester.makeconftest(_NO_LAB_CONFTEST)
    pytester.makepyfile(test_example=EXAMPLE.read_text("utf-8"))
    result = pytester.runpytest_subprocess(*_plugin_args(pytestconfig), "-rs")
    result.assert_outcomes(passed=6, skipped=2)
    skip = (
        "SKIPPED ?1? test_example.py:*: no Redis for fencedlease_redis_url: FENCEDLEASE_URL is"
        " unset; starting a redis-server needs the lab (fencedlease-lab is not installed:"
        ' pip install -e ".?lab?" in a clone of fencedlease)'
    )
    result.stdout.fnmatch_lines([skip, skip])


def test_without_the_lab_fencedlease_url_is_the_redis(
    pytester: pytest.Pytester, pytestconfig: pytest.Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the lab, ``fencedlease_redis_url`` is the Redis ``FENCEDLEASE_URL`` names."""
    monkeypatch.setenv("FENCEDLEASE_URL", "redis://127.0.0.1:6390/3")
    monkeypatch.delenv("FENCEDLEASE_REDIS_URL", raising=False)
    pytester.makeconftest(_NO_LAB_CONFTEST)
    pytester.makepyfile(
        """
        def test_the_url(fencedlease_redis_url):
            assert fencedlease_redis_url == "redis://127.0.0.1:6390/3"
        """
    )
    result = pytester.runpytest_subprocess(*_plugin_args(pytestconfig))
    result.assert_outcomes(passed=1)


@pytest.mark.live
def test_the_example_suite_passes_on_every_store(
    pytester: pytest.Pytester,
    pytestconfig: pytest.Config,
    redis_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """8 tests: memory by default, the fake clock on memory and SQLite, the marker over
    memory/SQLite/Redis, the asyncio face on memory and Redis; the Redis tests leave no key
    behind."""
    monkeypatch.setenv("FENCEDLEASE_URL", redis_url)
    monkeypatch.delenv("FENCEDLEASE_REDIS_URL", raising=False)
    client = redis.Redis.from_url(redis_url)
    before = set(client.scan_iter(match="fencedlease-test:*"))
    pytester.makepyfile(test_example=EXAMPLE.read_text("utf-8"))
    result = pytester.runpytest(*_plugin_args(pytestconfig), "-v")
    result.assert_outcomes(passed=8)
    result.stdout.fnmatch_lines(
        [
            "*test_a_held_key_is_refused PASSED*",
            "*test_expiry_is_a_step_of_the_test?memory? PASSED*",
            "*test_expiry_is_a_step_of_the_test?sqlite? PASSED*",
            "*test_every_run_gets_a_larger_token?memory? PASSED*",
            "*test_every_run_gets_a_larger_token?sqlite? PASSED*",
            "*test_every_run_gets_a_larger_token?redis? PASSED*",
            "*test_the_asyncio_face?redis? PASSED*",
        ]
    )
    assert set(client.scan_iter(match="fencedlease-test:*")) == before
    client.close()


def test_without_a_redis_the_redis_tests_skip_with_the_reason(
    pytester: pytest.Pytester, pytestconfig: pytest.Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("FENCEDLEASE_URL", raising=False)
    monkeypatch.delenv("FENCEDLEASE_REDIS_URL", raising=False)
    monkeypatch.delenv("FENCEDLEASE_REQUIRE_SERVERS", raising=False)
    monkeypatch.setenv("FENCEDLEASE_REDIS_SERVER", str(pytester.path / "no-such-redis-server"))
    pytester.makepyfile(test_example=EXAMPLE.read_text("utf-8"))
    result = pytester.runpytest(*_plugin_args(pytestconfig), "-rs")
    result.assert_outcomes(passed=6, skipped=2)
    skip = (
        "SKIPPED ?1? test_example.py:*: no Redis for fencedlease_redis_url: *no-such-redis-server*"
    )
    result.stdout.fnmatch_lines([skip, skip])


def test_require_servers_turns_the_skip_into_a_failure(
    pytester: pytest.Pytester, pytestconfig: pytest.Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("FENCEDLEASE_URL", raising=False)
    monkeypatch.delenv("FENCEDLEASE_REDIS_URL", raising=False)
    monkeypatch.setenv("FENCEDLEASE_REQUIRE_SERVERS", "1")
    monkeypatch.setenv("FENCEDLEASE_REDIS_SERVER", str(pytester.path / "no-such-redis-server"))
    pytester.makepyfile(
        """
        def test_needs_redis(fencedlease_redis_url):
            pass
        """
    )
    result = pytester.runpytest(*_plugin_args(pytestconfig))
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*required server unavailable: no Redis*"])


def test_an_unknown_store_is_a_usage_error(
    pytester: pytest.Pytester, pytestconfig: pytest.Config
) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.fencedlease_backends("memory", "etcd")
        def test_x(lease_manager):
            pass
        """
    )
    result = pytester.runpytest(*_plugin_args(pytestconfig))
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        ["fencedlease_backends: unknown store ?'etcd'?; the stores are memory, sqlite, redis"]
    )


def test_a_conftest_fixture_of_the_same_name_wins(
    pytester: pytest.Pytester, pytestconfig: pytest.Config
) -> None:
    """A user's own ``fake_clock`` and ``fencedlease_backend`` replace the plugin's, and
    ``lease_manager`` is built on them: SQLite, dated by the user's clock."""
    pytester.makeconftest(
        """
        import pytest
        from fencedlease.testing import FakeClock

        @pytest.fixture
        def fake_clock():
            return FakeClock(start_time=0)

        @pytest.fixture
        def fencedlease_backend():
            return "sqlite"
        """
    )
    pytester.makepyfile(
        """
        from fencedlease.backends import SqliteBackend

        def test_mine(lease_manager, fake_clock):
            assert fake_clock.time() == 0.0
            assert isinstance(lease_manager.backend, SqliteBackend)
            first = lease_manager.acquire("k", ttl_ms=1_000).lease
            fake_clock.advance(1_000)
            assert lease_manager.acquire("k", ttl_ms=1_000).lease.fencing_token == 2
            assert first.fencing_token == 1
        """
    )
    result = pytester.runpytest(*_plugin_args(pytestconfig))
    result.assert_outcomes(passed=1)


def test_an_async_manager_left_open_on_memory_or_sqlite_is_closed_at_teardown(
    pytester: pytest.Pytester, pytestconfig: pytest.Config
) -> None:
    """Closed in the test's loop: passes. Left open in a loop that has ended, on memory and SQLite
    alike: its tasks ended with that loop and nothing of the loop is left, so the teardown closes
    it from another loop and the test passes (a Redis client's connections belong to the test's
    loop: that one fails at teardown with the advice)."""
    pytester.makepyfile(
        """
        import asyncio
        import pytest

        @pytest.mark.fencedlease_backends("memory", "sqlite")
        def test_closed(async_lease_manager):
            async def main():
                async with async_lease_manager as leases:
                    return (await leases.acquire("k", ttl_ms=10_000)).lease.fencing_token
            assert asyncio.run(main()) == 1

        @pytest.mark.fencedlease_backends("memory", "sqlite")
        def test_left_open(async_lease_manager):
            async def main():
                async with async_lease_manager.hold("k", ttl_ms=10_000) as lease:
                    return lease.fencing_token
            assert asyncio.run(main()) == 1
        """
    )
    result = pytester.runpytest(*_plugin_args(pytestconfig))
    result.assert_outcomes(passed=4, errors=0)
    result.stdout.no_fnmatch_line("*async_lease_manager was left open*")


def test_an_async_manager_left_open_on_redis_fails_at_teardown_saying_so(
    pytester: pytest.Pytester, pytestconfig: pytest.Config, redis_url: str
) -> None:
    """Left open on Redis in a loop that has ended: its client's connections belong to that loop,
    so the teardown cannot close it; the test passes its call and errors at teardown with the
    advice."""
    pytester.makepyfile(
        """
        import asyncio
        import pytest

        @pytest.mark.fencedlease_backends("redis")
        def test_left_open(async_lease_manager):
            async def main():
                async with async_lease_manager.hold("k", ttl_ms=10_000) as lease:
                    return lease.fencing_token
            assert asyncio.run(main()) == 1
        """
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("FENCEDLEASE_URL", redis_url)
        result = pytester.runpytest(*_plugin_args(pytestconfig))
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(
        ["*async_lease_manager was left open in the test's event loop: close it there*"]
    )
