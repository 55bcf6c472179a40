"""The operator's commands: ``fencedlease doctor``, ``inspect``, ``list`` and ``release``.

Each takes the Redis URL from ``--url``, else ``FENCEDLEASE_URL`` (``redis://``, ``rediss://``,
``unix://``, ``redis+sentinel://``, ``redis+cluster://``: `fencedlease.cli.redis_target`, every
primary of a cluster walked), and the key prefix from
``--prefix``, else ``FENCEDLEASE_PREFIX``, else ``fencedlease`` (the names
`LeaseManager.from_env` reads); ``--json`` prints one JSON document on stdout instead of a table.
A password in the URL is shown as ``***`` everywhere, with no piece of it of 3 characters or
more in any output (a host or port equal to it is hidden too: ``redact_text``); a URL the library
refuses (a raw ``/``, ``?`` or ``#`` in the password) is a usage error before any connection; and
an owner token is never shown at all (a lease's
holder is named by its fingerprint). ``docs/operations.md`` shows them at work.

Exit status: 0 done (``doctor``: every check passed; ``--strict``: and no warning), 1 ``doctor``
found a failing check (``--strict``: or a warning), a ``release`` was not confirmed or the lease
changed hands before it was released, 2 a usage error or a Redis that could not be used
(unreachable, wrong password, an error reply).
"""

from __future__ import annotations

from .checks import doctor
from .reading import (
    inspect_lease,
    list_leases,
    scan_lease_names,
    scan_semaphore_names,
    semaphore_slots,
)
from .releasing import WATCH_ATTEMPTS, release, release_holder, release_slot

__all__ = [
    "WATCH_ATTEMPTS",
    "doctor",
    "inspect_lease",
    "list_leases",
    "release",
    "release_holder",
    "release_slot",
    "scan_lease_names",
    "scan_semaphore_names",
    "semaphore_slots",
]
