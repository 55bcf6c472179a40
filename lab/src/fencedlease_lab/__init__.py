"""The lab: what proves the library, not part of it.

- [`fencedlease_lab.harness`][]: ``fencedlease check``, the correctness harness (workers doing a
  fenced read-modify-write under real faults, a checker of the merged history, the report);
- [`fencedlease.pytest_plugin`][]: pytest fixtures for users' tests (a lease manager on memory,
  SQLite or a throwaway Redis, a fake clock), loaded by the ``pytest11`` entry point;
- [`fencedlease_lab.servers`][]: real servers for the harness, the tests and the benchmarks (an
  embedded redis-server, a throwaway PostgreSQL, Toxiproxy found or started);
- [`fencedlease_lab.toxiproxy`][]: an embedded Toxiproxy-compatible fault-injecting TCP proxy;
- [`fencedlease.cli.commands`][]: the ``fencedlease`` command line: ``check``
  ([`fencedlease_lab.cli`][]), and the operator's ``doctor``, ``inspect``, ``list`` and
  ``release`` ([`fencedlease.cli.operator_cli`][], ``docs/operations.md``).

It needs the ``lab`` extra (``pip install -e ".[lab]"`` in a clone: click, rich, matplotlib,
toxiproxy-python, psycopg); the operator's commands need only the ``cli`` extra (click, rich).
The layers are checked by ``lint-imports`` (contracts in ``pyproject.toml``): nothing outside
[`fencedlease_lab`][] imports it, and it uses the library only through its public modules, as any
user would. See ``docs/harness.md``.
"""
