"""Every ```python block of README.md and docs/*.md runs as written.

The blocks of one page run in order in one namespace (a page reads top to bottom: a later block
uses the names of an earlier one), in a temporary working directory, with top-level ``await`` run
on one event loop per page. ``redis://localhost:6379/0`` in a block is replaced by a throwaway
Redis's URL (flushed before and after the page) and ``postgresql://app@db/shop`` by a throwaway
PostgreSQL's; the cluster nodes ``10.0.0.1:7000`` and ``10.0.0.2:7000`` by two nodes of the lab's
Redis Cluster, and the Sentinel URL ``redis+sentinel://s1:26379,s2:26379,s3:26379/mymaster`` by a
Sentinel deployment's (a primary, a replica, three sentinels); a page that names any of them is a
live test. A failure names the page and the line.

Just before a block's opening fence, an HTML comment (invisible on the rendered page) may say:

- ``<!-- not-run: reason -->``: the block is deliberately partial and is not run (counted below);
- ``<!-- raises: Name -->``: the block must end in an exception of that class name (a page that
  shows a refusal);
- ``<!-- pytest: 8 passed -->``: the block is a test module; it is written to a file and run by
  pytest in a process of its own with the library's pytest plugin (and the page's Redis as
  ``FENCEDLEASE_URL``), and its summary must be exactly that.
"""

from __future__ import annotations

import ast
import asyncio
import inspect
import os
import re
import subprocess
import sys
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
import redis
from pg_fixtures import postgres_dsn  # noqa: F401 (the fixture)

from fencedlease import LeaseManager
from fencedlease.aio import AsyncLeaseManager
from fencedlease.lab.servers.cluster import RedisClusterServers
from fencedlease.lab.servers.sentinel import SentinelDeployment

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
REDIS_PLACEHOLDER = "redis://localhost:6379/0"
POSTGRES_PLACEHOLDER = "postgresql://app@db/shop"
PSYCOPG_PLACEHOLDER = "postgresql+psycopg://app@db/shop"  # SQLAlchemy's URL of the same
CLUSTER_NODES = ("10.0.0.1:7000", "10.0.0.2:7000")  # also as host="10.0.0.1", port=7000
SENTINEL_PLACEHOLDER = "redis+sentinel://s1:26379,s2:26379,s3:26379/mymaster"
SERVERS = {
    "redis": REDIS_PLACEHOLDER,
    "postgres": POSTGRES_PLACEHOLDER,
    "cluster": CLUSTER_NODES[0],
    "sentinel": SENTINEL_PLACEHOLDER,
}
"""Each server a page may need, by the placeholder that names it."""

_FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>[\w-]*)\s*$")
_MARKER = re.compile(r"^\s*<!--\s*(?P<kind>not-run|raises|pytest):\s*(?P<value>.*?)\s*-->\s*$")
PLUGIN = "fencedlease.lab.pytest_plugin"


@attrs.frozen
class Block:
    page: Path
    line: int  # 1-based line of the first line of code (the one after the opening fence)
    source: str
    not_run: str | None = None
    raises: str | None = None
    pytest_outcome: str | None = None  # a test module: pytest's summary, e.g. "8 passed"

    @property
    def where(self) -> str:
        shown = self.page.relative_to(ROOT) if self.page.is_relative_to(ROOT) else self.page
        return f"{shown}:{self.line}"


def blocks(page: Path) -> list[Block]:
    """The ```python blocks of ``page``, dedented by their fence's indent, with their markers."""
    lines = page.read_text("utf-8").splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if opening is None:
            i += 1
            continue
        indent = len(opening["indent"])
        end = i + 1
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        if opening["lang"] == "python":
            marker = _MARKER.match(lines[i - 1]) if i > 0 else None
            body = "\n".join(line[indent:] for line in lines[i + 1 : end]) + "\n"
            kind, value = (marker["kind"], marker["value"]) if marker else (None, None)
            found.append(
                Block(
                    page,
                    i + 2,
                    body,
                    not_run=value if kind == "not-run" else None,
                    raises=value if kind == "raises" else None,
                    pytest_outcome=value if kind == "pytest" else None,
                )
            )
        i = end + 1
    return found


def markers(page: Path) -> int:
    """How many run markers the page has (each must stand just before a python block)."""
    return sum(1 for line in page.read_text("utf-8").splitlines() if _MARKER.match(line))


def _needs(page: Path) -> set[str]:
    """The servers a page's blocks name; a test module needs Redis (the plugin's "redis" store)."""
    found = blocks(page)
    text = "".join(b.source for b in found if b.not_run is None)
    needs = {name for name, placeholder in SERVERS.items() if placeholder in text}
    return needs | ({"redis"} if any(b.pytest_outcome for b in found) else set())


def _marks(page: Path) -> list[pytest.MarkDecorator]:
    needs = _needs(page)
    marks = [pytest.mark.live] * bool(needs)
    return marks + [getattr(pytest.mark, name) for name in ("cluster", "sentinel") if name in needs]


def _params() -> list[Any]:
    return [
        pytest.param(page, id=str(page.relative_to(ROOT)), marks=_marks(page)) for page in PAGES
    ]


def _run(block: Block, namespace: dict[str, Any], loop: asyncio.AbstractEventLoop) -> None:
    """Run one block; its line numbers in tracebacks are the page's."""
    padded = "\n" * (block.line - 1) + block.source
    code = compile(padded, str(block.page), "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    result = eval(code, namespace)
    if inspect.iscoroutine(result):
        loop.run_until_complete(result)


def _run_module(block: Block, substitutions: dict[str, str]) -> None:
    """Run a test-module block with pytest in a process of its own, in the working directory
    (no conftest, no ini file of the project), with the plugin loaded by hand and nothing else;
    fail unless pytest's summary is ``block.pytest_outcome`` exactly."""
    module = Path.cwd() / f"test_{block.page.stem}_{block.line}.py"
    module.write_text(block.source, "utf-8")
    env = {
        **os.environ,
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
        "PYTHONPATH": os.pathsep.join(
            filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")])
        ),
    }
    env.pop("FENCEDLEASE_REDIS_URL", None)  # the old name: a warning in the summary
    if REDIS_PLACEHOLDER in substitutions:
        env["FENCEDLEASE_URL"] = substitutions[REDIS_PLACEHOLDER]
    ran = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", PLUGIN, "-p", "no:cacheprovider", module.name],
        cwd=module.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    summary = ran.stdout.strip().splitlines()[-1] if ran.stdout.strip() else ""
    if re.fullmatch(
        rf"=* *{re.escape(str(block.pytest_outcome))} in [\d.]+s( \([^)]*\))? *=*", summary
    ):
        return
    pytest.fail(
        f"{block.where}: pytest's summary is {summary!r}, not {block.pytest_outcome!r}\n"
        + ran.stdout[-3000:]
        + ran.stderr[-2000:],
        pytrace=False,
    )


def _close_managers(namespace: dict[str, Any], loop: asyncio.AbstractEventLoop) -> None:
    for value in list(namespace.values()):
        if isinstance(value, LeaseManager):
            value.close()
        elif isinstance(value, AsyncLeaseManager):
            loop.run_until_complete(value.close())


@pytest.fixture
def substitutions(request: pytest.FixtureRequest) -> Iterator[dict[str, str]]:
    page: Path = request.node.callspec.params["page"]
    needs = _needs(page)
    found: dict[str, str] = {}
    client = None
    if "redis" in needs:
        found[REDIS_PLACEHOLDER] = request.getfixturevalue("redis_url")
        client = redis.Redis.from_url(found[REDIS_PLACEHOLDER])
        client.flushdb()
    if "postgres" in needs:
        found[POSTGRES_PLACEHOLDER] = request.getfixturevalue("postgres_dsn")
        found[PSYCOPG_PLACEHOLDER] = found[POSTGRES_PLACEHOLDER].replace(
            "postgresql://", "postgresql+psycopg://", 1
        )
    if "cluster" in needs:
        cluster: RedisClusterServers = request.getfixturevalue("redis_cluster")
        (host, port), (host2, port2) = cluster.startup_nodes[:2]
        found['host="10.0.0.1", port=7000'] = f'host="{host}", port={port}'
        found[CLUSTER_NODES[0]] = f"{host}:{port}"
        found[CLUSTER_NODES[1]] = f"{host2}:{port2}"
    if "sentinel" in needs:
        deployment: SentinelDeployment = request.getfixturevalue("sentinel_deployment")
        found[SENTINEL_PLACEHOLDER] = deployment.url
    yield found
    if client is not None:
        client.flushdb()
        client.close()


def run_page(page: Path, substitutions: dict[str, str]) -> None:
    """Run the page's blocks in order in one namespace; fail naming the page and line."""
    namespace: dict[str, Any] = {"__name__": "__main__"}
    loop = asyncio.new_event_loop()
    try:
        for block in blocks(page):
            if block.not_run is not None:
                continue
            source = block.source
            for placeholder, value in substitutions.items():
                source = source.replace(placeholder, value)
            block = attrs.evolve(block, source=source)
            if block.pytest_outcome is not None:
                _run_module(block, substitutions)
                continue
            try:
                _run(block, namespace, loop)
            except Exception as exc:
                if block.raises is not None and type(exc).__name__ == block.raises:
                    continue
                pytest.fail(
                    f"{block.where}: the block raised {type(exc).__name__}: {exc}\n"
                    + "".join(traceback.format_exception(exc)[-4:]),
                    pytrace=False,
                )
            if block.raises is not None:
                pytest.fail(f"{block.where}: the block did not raise {block.raises}", pytrace=False)
    finally:
        _close_managers(namespace, loop)
        loop.close()


@pytest.mark.parametrize("page", _params())
def test_every_python_block_runs(
    page: Path,
    substitutions: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    # A page may set variables (docs/service.md sets FENCEDLEASE_URL): they end with the test.
    before = dict(os.environ)
    try:
        run_page(page, substitutions)
    finally:
        os.environ.clear()
        os.environ.update(before)


BROKEN = """# A page

```python
from fencedlease import LeaseManager
leases = LeaseManager.from_url("memory://")
```

Text.

```python
result = leases.acquire("k", ttl_ms=1_000)
charge(result.lease.fencing_token)
```
"""


def test_a_failing_block_is_named_by_page_and_line(tmp_path: Path) -> None:
    """The second block's undefined name fails the page at that block's line (12), after the
    first block ran (its manager is closed)."""
    page = tmp_path / "page.md"
    page.write_text(BROKEN, "utf-8")
    with pytest.raises(pytest.fail.Exception) as info:
        run_page(page, {})
    assert str(info.value).startswith(
        f"{page}:11: the block raised NameError: name 'charge' is not defined\n"
    )
    assert f'File "{page}", line 12' in str(info.value)


def test_the_markers_skip_and_expect(tmp_path: Path) -> None:
    """not-run skips its block; raises passes on that exception and fails without it."""
    page = tmp_path / "page.md"
    page.write_text(
        "<!-- not-run: a fragment -->\n```python\nundefined_name\n```\n"
        "<!-- raises: KeyError -->\n```python\n{}['k']\n```\n",
        "utf-8",
    )
    run_page(page, {})
    page.write_text("<!-- raises: KeyError -->\n```python\nx = 1\n```\n", "utf-8")
    with pytest.raises(pytest.fail.Exception, match=r"page.md:3: the block did not raise KeyError"):
        run_page(page, {})


def test_a_test_module_block_runs_under_pytest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ``pytest:`` block runs as a test module with the plugin's fixtures: the page passes on
    the summary it names and fails on another, naming the page, the line and both summaries."""
    monkeypatch.chdir(tmp_path)
    module = (
        "from fencedlease.testing import FakeClock\n\n"
        "def test_one(fake_clock: FakeClock) -> None:\n"
        "    fake_clock.advance(1_000)\n    assert fake_clock.monotonic() == 1.0\n\n"
        "def test_two() -> None:\n    assert False\n"
    )
    page = tmp_path / "page.md"
    page.write_text(f"<!-- pytest: 1 failed, 1 passed -->\n```python\n{module}```\n", "utf-8")
    run_page(page, {})
    page.write_text(f"<!-- pytest: 2 passed -->\n```python\n{module}```\n", "utf-8")
    with pytest.raises(pytest.fail.Exception) as info:
        run_page(page, {})
    first = str(info.value).splitlines()[0]
    assert first.startswith(f"{page}:3: pytest's summary is '1 failed, 1 passed in ")
    assert first.endswith("', not '2 passed'")


def test_the_blocks_are_found_where_they_are() -> None:
    """The extractor finds the Quickstart's first block on the line after its fence, dedents a
    block in a list item, and reads the markers."""
    (readme_first, *_) = blocks(ROOT / "README.md")
    lines = (ROOT / "README.md").read_text("utf-8").splitlines()
    assert lines[readme_first.line - 2] == "```python"
    assert readme_first.source.splitlines()[0] == lines[readme_first.line - 1]
    indented = [b for b in blocks(ROOT / "docs" / "backends.md") if "FakeClock()" in b.source]
    assert len(indented) == 1 and indented[0].source.startswith("from fencedlease import")


def test_the_quickstart_needs_no_server() -> None:
    """The README's and the home page's blocks run on a fresh machine: no Redis, no PostgreSQL
    (so their pages are not live tests), and nothing of them is left unrun."""
    for page in (ROOT / "README.md", ROOT / "docs" / "index.md"):
        found = blocks(page)
        assert len(found) == 4  # quickstart, fencing, semaphore, restore
        assert _needs(page) == set()
        assert all(b.not_run is None and b.raises is None for b in found)
        assert "localhost:6379" not in "".join(b.source for b in found)


NOT_RUN: dict[str, int] = {}
"""The deliberately partial blocks per page: a new one is counted here on purpose."""


def test_every_marker_stands_before_a_python_block_and_gives_its_reason() -> None:
    """A marker anywhere else would skip nothing; a not-run block says why; the partial blocks
    are the ones counted in NOT_RUN."""
    not_run: dict[str, int] = {}
    for page in PAGES:
        found = blocks(page)
        marked = [b for b in found if (b.not_run, b.raises, b.pytest_outcome) != (None,) * 3]
        assert len(marked) == markers(page), f"{page.name}: a marker not before a python block"
        assert all(b.not_run != "" for b in found), f"{page.name}: not-run without a reason"
        if any(b.not_run is not None for b in found):
            not_run[page.name] = sum(1 for b in found if b.not_run is not None)
    assert not_run == NOT_RUN
