"""Every ```python block of README.md and docs/*.md runs as written, twice in a row.

A reader copies a block into a file and runs it, then runs it again: the second run finds the
first one's leases, counters, SQLite files and tables (fencing tokens only grow), so a block
asserts what is true on every run. Here each block runs twice in a row, in one temporary working
directory per page and against one set of servers per page (state persists between the runs and
between the blocks), each run in a namespace of its own: a block brings its own imports. A block
that goes on from the one before it (the page says so in its text) is marked
``<!-- continues: ... -->``: it and the blocks it goes on from run as one script, twice. Top-level
``await`` is a syntax error, as in a script: a block shows ``asyncio.run(main())``.

The servers are the lab's, named in a block as a fresh local install names them:
``redis://localhost:6379/0`` is a Redis of the page's own (started for the page),
``postgresql://postgres@localhost:5432/postgres`` (and its SQLAlchemy form
``postgresql+psycopg://...``) a throwaway PostgreSQL, ``localhost:7000`` and ``localhost:7001``
two nodes of the lab's Redis Cluster, and
``redis+sentinel://localhost:26379,localhost:26380,localhost:26381/mymaster`` a Sentinel
deployment's (a primary, a replica, three sentinels); a page that names any of them is a live
test. A run block names no placeholder host (``db``, ``redis.internal``, ``10.0.0.1``...). A
failure names the page, the line and the run.

Just before a block's opening fence, HTML comments (invisible on the rendered page) may say:

- ``<!-- not-run: reason -->``: the block is not run (counted in ``NOT_RUN`` below);
- ``<!-- continues: reason -->``: the block goes on from the one before it (see above);
- ``<!-- raises: Name -->``: the block must end in an exception of that class name (a page that
  shows a refusal);
- ``<!-- pytest: 8 passed -->``: the block is a test module; it is written to a file and run by
  pytest in a process of its own with the library's pytest plugin (and the page's Redis as
  ``FENCEDLEASE_URL``), and its summary must be exactly that, on both runs.

Shell blocks (```bash, ```console) are not run by this test: the README's first block (the
install, ``fencedlease check`` and the test suite) is what CI runs; the others start the harness
(a minute and more each, some as root) or are transcripts; each one is marked not-run with its
reason and counted in ``NOT_RUN``, so a new shell block is a decision.
"""

from __future__ import annotations

import asyncio
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
from pg_fixtures import postgres_dsn  # noqa: F401 (the fixture)

from fencedlease import LeaseManager
from fencedlease.aio import AsyncLeaseManager
from fencedlease_lab.servers.cluster import RedisClusterServers
from fencedlease_lab.servers.redis import RedisServer, RedisUnavailable
from fencedlease_lab.servers.sentinel import SentinelDeployment

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
REDIS_PLACEHOLDER = "redis://localhost:6379/0"
POSTGRES_PLACEHOLDER = "postgresql://postgres@localhost:5432/postgres"
PSYCOPG_PLACEHOLDER = "postgresql+psycopg://postgres@localhost:5432/postgres"  # SQLAlchemy's
CLUSTER_NODES = ("localhost:7000", "localhost:7001")  # also as host="localhost", port=7000
SENTINEL_PLACEHOLDER = "redis+sentinel://localhost:26379,localhost:26380,localhost:26381/mymaster"
SERVERS = {
    "redis": REDIS_PLACEHOLDER,
    "postgres": POSTGRES_PLACEHOLDER,
    "cluster": CLUSTER_NODES[0],
    "sentinel": SENTINEL_PLACEHOLDER,
}
"""Each server a page may need, by the placeholder that names it."""
PLACEHOLDER_HOSTS = re.compile(r"@db[/:]|redis\.internal|10\.0\.0\.\d|\bs1:26379|<password>")
"""Hosts (and secrets) that only stand for the reader's own: no block that runs names one."""
SHELL = ("bash", "console", "sh", "shell")
RUNS = 2

_FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>[\w-]*)\s*$")
_MARKER = re.compile(
    r"^\s*<!--\s*(?P<kind>not-run|continues|raises|pytest):\s*(?P<value>.*?)\s*-->\s*$"
)
PLUGIN = "fencedlease.pytest_plugin"


@attrs.frozen
class Block:
    page: Path
    line: int  # 1-based line of the first line of code (the one after the opening fence)
    source: str
    lang: str = "python"
    not_run: str | None = None
    continues: str | None = None  # goes on from the block before it (why, or from what)
    raises: str | None = None
    pytest_outcome: str | None = None  # a test module: pytest's summary, e.g. "8 passed"

    @property
    def where(self) -> str:
        shown = self.page.relative_to(ROOT) if self.page.is_relative_to(ROOT) else self.page
        return f"{shown}:{self.line}"


def blocks(page: Path, langs: tuple[str, ...] = ("python",)) -> list[Block]:
    """The page's blocks in ``langs``, dedented by their fence's indent, with the markers on the
    lines just before their fence."""
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
        if opening["lang"] in langs:
            said: dict[str, str] = {}
            above = i - 1
            while above >= 0 and (marker := _MARKER.match(lines[above])) is not None:
                said[marker["kind"]] = marker["value"]
                above -= 1
            body = "\n".join(line[indent:] for line in lines[i + 1 : end]) + "\n"
            found.append(
                Block(
                    page,
                    i + 2,
                    body,
                    lang=opening["lang"],
                    not_run=said.get("not-run"),
                    continues=said.get("continues"),
                    raises=said.get("raises"),
                    pytest_outcome=said.get("pytest"),
                )
            )
        i = end + 1
    return found


def markers(page: Path) -> int:
    """How many markers the page has (each must stand just before a python or shell block)."""
    return sum(1 for line in page.read_text("utf-8").splitlines() if _MARKER.match(line))


def scripts(page: Path) -> list[list[Block]]:
    """The page's python blocks that run, as scripts: a block and the ones that continue it."""
    found: list[list[Block]] = []
    for block in blocks(page):
        if block.not_run is not None:
            continue
        if block.continues is not None and found:
            found[-1].append(block)
        else:
            found.append([block])
    return found


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


def _run(block: Block, namespace: dict[str, Any]) -> None:
    """Run one block as a script runs it (no top-level ``await``); its line numbers in
    tracebacks are the page's."""
    padded = "\n" * (block.line - 1) + block.source
    exec(compile(padded, str(block.page), "exec"), namespace)


def _run_module(block: Block, substitutions: dict[str, str], run: int) -> None:
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
        f"{block.where}: {_run_name(run)}pytest's summary is {summary!r}, not "
        f"{block.pytest_outcome!r}\n" + ran.stdout[-3000:] + ran.stderr[-2000:],
        pytrace=False,
    )


def _run_name(run: int) -> str:
    return "" if run == 1 else f"on run {run} of {RUNS}, "


def _close_managers(namespace: dict[str, Any]) -> None:
    """Close the managers a run left open, as its process's end would end them: a lease taken
    with ``acquire`` stays held (``close`` leaves it alone), so a second run finds it."""
    for value in list(namespace.values()):
        if isinstance(value, LeaseManager):
            value.close()
        elif isinstance(value, AsyncLeaseManager):
            asyncio.run(value.close())


@pytest.fixture
def substitutions(request: pytest.FixtureRequest) -> Iterator[dict[str, str]]:
    """The page's servers, by the placeholders that name them: a Redis of the page's own (fresh:
    the second run of a block finds only what the first left)."""
    page: Path = request.node.callspec.params["page"]
    needs = _needs(page)
    found: dict[str, str] = {}
    server = None
    if "redis" in needs:
        try:
            server = RedisServer()
            server.start()
        except RedisUnavailable as exc:
            pytest.skip(f"no Redis: {exc}")
        found[REDIS_PLACEHOLDER] = server.url
    if "postgres" in needs:
        dsn = str(request.getfixturevalue("postgres_dsn"))
        found[PSYCOPG_PLACEHOLDER] = dsn.replace("postgresql://", "postgresql+psycopg://", 1)
        found[POSTGRES_PLACEHOLDER] = dsn
    if "cluster" in needs:
        cluster: RedisClusterServers = request.getfixturevalue("redis_cluster")
        (host, port), (host2, port2) = cluster.startup_nodes[:2]
        found['host="localhost", port=7000'] = f'host="{host}", port={port}'
        found[CLUSTER_NODES[0]] = f"{host}:{port}"
        found[CLUSTER_NODES[1]] = f"{host2}:{port2}"
    if "sentinel" in needs:
        deployment: SentinelDeployment = request.getfixturevalue("sentinel_deployment")
        found[SENTINEL_PLACEHOLDER] = deployment.url
    try:
        yield found
    finally:
        if server is not None:
            server.close()


def run_page(page: Path, substitutions: dict[str, str]) -> None:
    """Run each script of the page twice in a row, each run in a namespace of its own; fail
    naming the page, the line and the run."""
    for script in scripts(page):
        for run in range(1, RUNS + 1):
            namespace: dict[str, Any] = {"__name__": "__main__"}
            try:
                for block in script:
                    _run_block(block, namespace, substitutions, run)
            finally:
                _close_managers(namespace)


def _run_block(
    block: Block, namespace: dict[str, Any], substitutions: dict[str, str], run: int
) -> None:
    source = block.source
    for placeholder, value in substitutions.items():
        source = source.replace(placeholder, value)
    block = attrs.evolve(block, source=source)
    if block.pytest_outcome is not None:
        _run_module(block, substitutions, run)
        return
    try:
        _run(block, namespace)
    except Exception as exc:
        if block.raises is not None and type(exc).__name__ == block.raises:
            return
        pytest.fail(
            f"{block.where}: {_run_name(run)}the block raised {type(exc).__name__}: {exc}\n"
            + "".join(traceback.format_exception(exc)[-4:]),
            pytrace=False,
        )
    if block.raises is not None:
        pytest.fail(
            f"{block.where}: {_run_name(run)}the block did not raise {block.raises}",
            pytrace=False,
        )


@pytest.mark.parametrize("page", _params())
def test_every_python_block_runs_twice(
    page: Path,
    substitutions: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each script of the page runs, then runs again in the same directory against the same
    servers."""
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

Text: the block below goes on from the one above.

<!-- continues: the manager above -->
```python
result = leases.acquire("k", ttl_ms=1_000)
charge(result.lease.fencing_token)
```
"""


def test_a_failing_block_is_named_by_page_and_line(tmp_path: Path) -> None:
    """The continuing block's undefined name fails the page at that block's line (13), after
    the first block ran in the same namespace."""
    page = tmp_path / "page.md"
    page.write_text(BROKEN, "utf-8")
    with pytest.raises(pytest.fail.Exception) as info:
        run_page(page, {})
    assert str(info.value).startswith(
        f"{page}:12: the block raised NameError: name 'charge' is not defined\n"
    )
    assert f'File "{page}", line 13' in str(info.value)


def test_each_block_runs_twice_in_a_row_in_the_same_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A block runs twice and its second run sees the first one's files; a block that holds
    only on a first run fails naming the second run."""
    monkeypatch.chdir(tmp_path)
    page = tmp_path / "page.md"
    page.write_text(
        '```python\nfrom pathlib import Path\nruns = Path("runs.txt")\n'
        'runs.write_text(runs.read_text() + "x" if runs.exists() else "x")\n```\n',
        "utf-8",
    )
    run_page(page, {})
    assert (tmp_path / "runs.txt").read_text() == "xx"
    page.write_text(
        '```python\nimport os\nassert not os.path.exists("made")\nopen("made", "w").close()\n```\n',
        "utf-8",
    )
    with pytest.raises(pytest.fail.Exception) as info:
        run_page(page, {})
    assert str(info.value).startswith(f"{page}:2: on run 2 of 2, the block raised AssertionError")


def test_a_block_brings_its_own_names_unless_it_continues(tmp_path: Path) -> None:
    """A block does not see an earlier block's names (each run starts a namespace of its own)
    unless it is marked as continuing it; a continuing block runs after its script's first
    block on each run."""
    page = tmp_path / "page.md"
    page.write_text("```python\nx = [1]\n```\n\n```python\nx.append(2)\n```\n", "utf-8")
    with pytest.raises(pytest.fail.Exception, match=r"page.md:6: the block raised NameError"):
        run_page(page, {})
    page.write_text(
        "```python\nx = [1]\n```\n\n<!-- continues: x above -->\n```python\nx.append(2)\n"
        "assert x == [1, 2]\n```\n",
        "utf-8",
    )
    run_page(page, {})
    assert [[b.line for b in script] for script in scripts(page)] == [[2, 7]]


def test_top_level_await_is_refused(tmp_path: Path) -> None:
    """A block with a top-level ``await`` fails as a script would (a reader runs
    ``asyncio.run(main())``)."""
    page = tmp_path / "page.md"
    page.write_text("```python\nimport asyncio\nawait asyncio.sleep(0)\n```\n", "utf-8")
    with pytest.raises(pytest.fail.Exception) as info:
        run_page(page, {})
    assert str(info.value).startswith(
        f"{page}:2: the block raised SyntaxError: 'await' outside function"
    )


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
    (so their pages are not live tests), nothing of them is left unrun, and only the restore
    block goes on from another (the fenced one, whose lease it saves)."""
    for page in (ROOT / "README.md", ROOT / "docs" / "index.md"):
        found = blocks(page)
        assert len(found) == 4  # quickstart, semaphore, fencing, restore
        assert _needs(page) == set()
        assert all(b.not_run is None and b.raises is None for b in found)
        assert [b.continues is not None for b in found] == [False, False, False, True]
        assert "localhost:6379" not in "".join(b.source for b in found)


def test_no_block_that_runs_names_a_placeholder_host() -> None:
    """A block that runs names local servers only (the test's substitutions), never a host or
    secret that stands for the reader's own."""
    named = [
        f"{b.where}: {match[0]}"
        for page in PAGES
        for b in blocks(page)
        if b.not_run is None and (match := PLACEHOLDER_HOSTS.search(b.source))
    ]
    assert named == []


NOT_RUN: list[tuple[str, str, str]] = [
    (
        "harness.md",
        "console",
        "each command is a harness run of a minute or more; --faults all needs root",
    ),
    ("harness.md", "console", "three harness runs on a Sentinel deployment, with a failover each"),
    ("harness.md", "console", "mutation runs of minutes each, from a clone of the repository"),
    ("harness.md", "console", "two harness runs of 15 s and more each"),
    ("semantics.md", "python", "names your TLS Redis, its user's password and certificate files"),
]
"""The blocks not run, in page order, as (page, language, reason): a new one is added here on
purpose. The README's first block (installs, ``fencedlease check``, the test suite) is left out:
CI runs it."""


def test_every_marker_stands_before_a_block_and_the_skipped_are_these() -> None:
    """A marker anywhere else would skip nothing; a continuing block has a block to go on
    from; every shell block but the README's first is marked not-run; the blocks not run are
    exactly those of ``NOT_RUN``, each with its reason."""
    not_run: list[tuple[str, str, str]] = []
    langs = ("python", *SHELL)
    for page in PAGES:
        found = blocks(page, langs)
        marked = [
            b for b in found if (b.not_run, b.continues, b.raises, b.pytest_outcome) != (None,) * 4
        ]
        assert len(marked) == markers(page), f"{page.name}: a marker not before a block"
        python = [b for b in found if b.lang == "python"]
        for before, block in zip([None, *python][: len(python)], python, strict=True):
            if block.continues is not None:
                assert before is not None and before.not_run is None, block.where
        shell = [b for b in found if b.lang in SHELL]
        if page.name == "README.md":
            assert shell[0].line == 4 and shell[0].not_run is None  # CI runs it
            shell = shell[1:]
        assert all(b.not_run is not None for b in shell), f"{page.name}: a shell block is run?"
        not_run += [(page.name, b.lang, b.not_run) for b in found if b.not_run is not None]
    assert all(reason for (_, _, reason) in not_run)
    assert not_run == NOT_RUN


def test_the_db_extra_installs_what_the_sqlalchemy_asyncio_block_needs() -> None:
    """docs/fencing.md shows ``create_async_engine``, which needs greenlet: the ``db`` extra
    asks for SQLAlchemy's ``asyncio`` extra, which installs it."""
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["project"][
        "optional-dependencies"
    ]
    assert any("create_async_engine" in b.source for b in blocks(ROOT / "docs" / "fencing.md"))
    assert "sqlalchemy[asyncio]>=2.0" in extras["db"]
