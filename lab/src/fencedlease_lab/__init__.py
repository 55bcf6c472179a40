"""The lab (the ``fencedlease-lab`` distribution): what proves the library, not part of it.

- [`fencedlease_lab.harness`][]: ``fencedlease check``, the correctness harness (workers doing a
  fenced read-modify-write under real faults, a checker of the merged history, the report);
- [`fencedlease_lab.cli`][]: the ``check`` command, which joins the library's ``fencedlease``
  script through the entry-point group ``fencedlease.commands``;
- [`fencedlease_lab.servers`][]: real servers for the harness, the tests and the benchmarks (an
  embedded redis-server, Sentinel and Cluster deployments, a throwaway PostgreSQL, Toxiproxy found
  or started);
- [`fencedlease_lab.toxiproxy`][]: an embedded Toxiproxy-compatible fault-injecting TCP proxy.

The library keeps its pytest plugin (`fencedlease.pytest_plugin`, which starts a Redis with
[`fencedlease_lab.servers.redis`][] when the lab is installed) and the operator's commands
(`fencedlease.cli`). Install the lab from a clone with the root project's ``lab`` extra
(``pip install -e ".[lab]"``; ``pip install -e ./lab`` makes it editable). The layers are checked
by ``lint-imports`` (contracts in the root ``pyproject.toml``): the library imports nothing of the
lab (its pytest plugin excepted, lazily), and the lab uses the library only through its public
modules, as any user would. See ``docs/harness.md``.
"""
