"""The ``fencedlease`` command line (the ``cli`` extra: click, rich; ``docs/operations.md``).

- [`fencedlease.cli.commands`][]: the command group and what its commands share (the store's
  URL option, the line that says which extra to install); commands of other distributions join
  it through the entry-point group ``fencedlease.commands`` (the lab's ``check``);
- [`fencedlease.cli.operator_cli`][]: the operator's ``doctor``, ``inspect``, ``list`` and
  ``release``, on the Redis a URL names ([`fencedlease.cli.redis_target`][]);
- [`fencedlease.cli.entry`][]: the ``fencedlease`` script's entry point.

``import fencedlease`` imports none of it: click and rich load only when the script runs.
"""
