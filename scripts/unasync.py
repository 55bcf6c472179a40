# ruff: noqa: E501  (the phrase table holds docstring lines as they stand, indentation and all)
"""Generate the sync face's modules from their asyncio sources, as httpcore does.

Where a sync module is a mechanical translation of an asyncio one, only the asyncio one is
written by hand; this script writes the other. Each source is read by ``unasync``'s tokenizer
rules (``async``/``await`` dropped, ``__aenter__`` -> ``__enter__``, and the names in ``NAMES``
below), then the text rules (``SUBS``: imports one package up, ``redis.asyncio`` -> ``redis``,
the names again in docstrings and comments) and the file's own ``PHRASES`` (docstring sentences
that say something else on the sync face), and last ``ruff`` (import order, format). What the
faces do differently (threads against tasks) is behind same-named primitives: ``._primitives``
is :mod:`fencedlease.aio._primitives` in the source and :mod:`fencedlease._primitives` in the
generated module.

Usage:
    python scripts/unasync.py           write the generated modules
    python scripts/unasync.py --check   exit 1, naming each stale module, when one differs
"""

from __future__ import annotations

import argparse
import importlib
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import tokenize_rt

# This file's name is the package's: drop scripts/ from the path so that the import finds it.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
unasync: Any = importlib.import_module("unasync")

ROOT = Path(__file__).resolve().parent.parent
COMMAND = "python scripts/unasync.py"

# Token replacements (besides unasync's own: __aenter__, __aexit__, asynccontextmanager, ...).
# Every ``Async`` name of the sources is listed: unasync would make an unlisted one ``Sync...``.
NAMES: dict[str, str] = {
    "AsyncAcquireResult": "AcquireResult",
    "AsyncClusterHandoff": "ClusterHandoff",
    "AsyncHandoff": "Handoff",
    "AsyncLease": "Lease",
    "AsyncLeaseBackend": "LeaseBackend",
    "AsyncLeaseManager": "LeaseManager",
    "AsyncLeaseOutcome": "LeaseOutcome",
    "AsyncPrimaryCheck": "PrimaryCheck",
    "AsyncQueueingBackend": "QueueingBackend",
    "AsyncRedisBackend": "RedisBackend",
    "AsyncRedisClusterBackend": "RedisClusterBackend",
    "AsyncReleaseWaiter": "ReleaseWaiter",
    "AsyncReleases": "Releases",
    "AsyncRenewer": "Renewer",
    "AsyncSemaphore": "Semaphore",
    "AsyncSemaphoreLease": "SemaphoreLease",
    "_AsyncSlotManager": "_SlotManager",
    "async_slot_manager_for": "slot_manager_for",
    "async_slot_store_for": "slot_store_for",
    "AsyncSlotBackend": "SlotBackend",
    "AsyncSlotStore": "SlotStore",
    "AsyncSwitchWatcher": "SwitchWatcher",
    "_AsyncManagerBase": "_ManagerBase",
    "aclose": "close",
    "AbstractAsyncContextManager": "AbstractContextManager",
    "AsyncWithOnly": "WithOnly",
    "async_backend_from_url": "backend_from_url",
    "check_async_fn": "check_sync_fn",
}

# Text rules for the whole module, in order (regular expressions, multiline).
SUBS: list[tuple[str, str]] = [
    # Modules of fencedlease.aio whose sync twin has another name (before the general rule).
    (r"^from \._handoff import", "from ._handoff_sync import"),
    (
        r"^from \.\._redis\.aio import (.*)\brun_acked, run_script, ",
        r"from ._redis.scripts import run_acked, run_script\nfrom ._redis.clients import \1",
    ),
    (r"^from \.\._redis\.sentinel_aio import", "from .._redis.sentinel import"),
    (r"^from \.\._redis\.aio import run_script$", "from .._redis.scripts import run_script"),
    (r"^from \.\._redis\.wire_aio import", "from .._redis.wire import"),
    # One package up: fencedlease.aio.X -> fencedlease.X.
    (r"^(\s*)from \.\.(\w)", r"\1from .\2"),
    (r"^(\s*)from \.\. import", r"\1from . import"),
    (r"\bredis\.asyncio\.", "redis."),
    (r"^import redis\.asyncio$", "import redis"),
    # A cross-reference to the asyncio face's class is to the sync face's (fencedlease.X).
    (r"\bfencedlease\.aio\.(Async\w+)", r"fencedlease.\1"),
    # The names, also where the tokenizer does not look (docstrings, comments).
    *((rf"\b{name}\b", sync) for name, sync in NAMES.items()),
    (r"\bawait (:meth:)", r"call \1"),
]

# Per generated module: (text in the source after SUBS, text in the sync module). Each must be
# found: a rule that no longer matches is an error, not a silent difference.
PHRASES: dict[str, list[tuple[str, str]]] = {
    "_from_env.py": [
        (
            """configured by the environment. The sync face's `fencedlease._from_env` is generated from this
module (``scripts/unasync.py``).\"\"\"
""",
            """configured by the environment. Generated from `fencedlease.aio._from_env`
(``scripts/unasync.py``).\"\"\"
""",
        ),
    ],
    "_cluster_backend.py": [
        (
            '''"""The Redis Cluster backend (asyncio): the lease scripts over a ``redis.RedisCluster``.
''',
            '''"""The Redis Cluster backend (sync): the lease scripts over a ``redis.cluster.RedisCluster``.
''',
        ),
        (
            """The sync face's `fencedlease._cluster_backend` is generated from this module
(``scripts/unasync.py``); what the faces do differently per node (a task or a worker thread, a
node's pipeline) is the I/O of `fencedlease.aio._cluster_nodes` and its sync twin.
""",
            """Generated from `fencedlease.aio._cluster_backend` (``scripts/unasync.py``); what the faces
do differently per node (a worker thread or a task, a node's pipeline) is the I/O of
`fencedlease._cluster_nodes` and its asyncio twin.
""",
        ),
    ],
    "_semaphore.py": [
        (
            """The asyncio face's semaphore: [`Semaphore`][fencedlease.Semaphore], made by
[`LeaseManager.semaphore`][fencedlease.LeaseManager.semaphore], over the asyncio
stores' steps (`fencedlease.aio._semaphore_stores`: the same Lua scripts on Redis, the memory
store inline, the SQLite store on a worker thread). What a semaphore is, and what both faces
decide without I/O: `fencedlease._core.semaphore`. The sync face's `fencedlease._semaphore` is
generated from this module (``scripts/unasync.py``).
""",
            """The sync face's semaphore: [`Semaphore`][fencedlease.Semaphore], made by
[`LeaseManager.semaphore`][fencedlease.LeaseManager.semaphore], over the sync stores' steps
(`fencedlease._semaphore_stores`). What a semaphore is, and what both faces decide without I/O:
`fencedlease._core.semaphore`. Generated from `fencedlease.aio._semaphore`
(``scripts/unasync.py``).
""",
        ),
        (
            "from collections.abc import Awaitable, Callable\n",
            "from collections.abc import Callable\n",
        ),
        ("Callable[[SemaphoreLease], Awaitable[T]]", "Callable[[SemaphoreLease], T]"),
        ("Callable[[Lease], Awaitable[T]]", "Callable[[Lease], T]"),
    ],
    "_slot_backend.py": [
        (
            """`SlotBackend` over the asyncio face's slot store (`fencedlease.aio._semaphore_stores`). The
sync face's `fencedlease._slot_backend` is generated from `fencedlease.aio._slot_backend`
(``scripts/unasync.py``).
""",
            """`SlotBackend` over the sync face's slot store (`fencedlease._semaphore_stores`). Generated
from `fencedlease.aio._slot_backend` (``scripts/unasync.py``).
""",
        ),
    ],
    "_redis_backend.py": [
        (
            '"""The Redis backend (asyncio): the lease scripts over a ``redis.asyncio`` client.\n',
            '"""The Redis backend (sync): the lease scripts over a redis-py client.\n',
        ),
        (
            """The twin of `fencedlease._redis_backend`, sharing everything that is not I/O with it through
`fencedlease._redis`: key names, the scripts and their NOSCRIPT policy
(`fencedlease._redis.aio.run_script`), reply decoding and the error mapping.

Cancellation: a cancelled call leaves no half-read reply behind (redis-py drops a connection whose
read was interrupted), but the command may have run at Redis. The manager copes with that; this
class does not pretend otherwise.
""",
            """Everything Redis-specific that is not this class's own I/O lives in `fencedlease._redis`: key
names, the scripts and their one NOSCRIPT policy, reply decoding and the error mapping, shared
with the asyncio twin (`fencedlease.aio._redis_backend`), the hand-off and
[`RedisFencedResource`][fencedlease.RedisFencedResource].
""",
        ),
        (
            '    """Leases in Redis under ``prefix``, over a ``redis.Redis`` (layout in\n    `fencedlease._redis.keys`); an [`LeaseBackend`][fencedlease.LeaseBackend].\n',
            '    """Leases in Redis under ``prefix`` (layout in `fencedlease._redis.keys`).\n',
        ),
        (
            """    ``decode_responses`` may be on or off. ``owns_client``: close the client in
    [`close`][fencedlease.RedisBackend.close] (true when the manager built it from a URL).
    Every redis-py error is raised as [`BackendError`][fencedlease.BackendError] with the original
    in ``__cause__``. As in the sync twin,
    [`renew_many`][fencedlease.RedisBackend.renew_many] runs on a connection of its own
    when the client's pool is a ``BlockingConnectionPool``, so renewals never queue behind the
    caller's commands.
""",
            """    ``client`` is a ``redis.Redis``; ``decode_responses`` may be on or off. ``owns_client``: close
    the client in [`close`][fencedlease.RedisBackend.close] (true when the manager built it from a
    URL). Every redis-py error is raised as [`BackendError`][fencedlease.BackendError] with the
    original in ``__cause__``.

    [`renew_many`][fencedlease.RedisBackend.renew_many] (the background renewal) runs on a
    connection of its own when ``client``'s pool is a ``BlockingConnectionPool``: there it would
    wait behind every command already queued for a connection (a burst of acquires or releases),
    long enough for leases to lapse. The connection is made on the first renewal and closed by
    [`close`][fencedlease.RedisBackend.close].
""",
        ),
        (
            '        """The manager\'s release waiter: the hand-off queue and its listener task\n',
            '        """The manager\'s release waiter: the hand-off queue and its listener\n',
        ),
    ],
    "_lease.py": [
        (
            '"""The asyncio lease handle and the result types of the async manager."""\n',
            '"""The sync lease handle and the small result types of the manager."""\n',
        ),
        (
            '    """A held (or once held) lease on ``key``: the asyncio twin of [`Lease`][fencedlease.Lease].\n',
            '    """A held (or once held) lease on ``key``.\n',
        ),
        (
            """    hand it to the storage you write to. It is None only for a lease restored without one (the
    first successful [`renew`][fencedlease.Lease.renew] learns it from Redis). The
    read-only attributes and [`check`][fencedlease.Lease.check] are the same code as
    [`Lease`][fencedlease.Lease]'s (`LeaseView`).
""",
            """    hand it to the storage you write to (see [`FencedResource`][fencedlease.FencedResource]). It is
    None only for a lease restored without one (the first successful
    [`renew`][fencedlease.Lease.renew] learns it from Redis). The read-only attributes and
    [`check`][fencedlease.Lease.check] come from `LeaseView`, shared with
    [`AsyncLease`][fencedlease.aio.AsyncLease].
""",
        ),
        (
            """    Use it from the event loop it was acquired on. Nothing about it lives in a task or a
    ``threading.local``: any task may renew or release it.
""",
            """    Thread-safe: the body may call [`check`][fencedlease.Lease.check] while the manager's renewer
    updates the lease.
""",
        ),
        (
            '        """Wait until the lease is lost or ``timeout_ms`` passes; return whether it is lost.\n',
            '        """Block until the lease is lost or ``timeout_ms`` passes; return whether it is lost.\n',
        ),
        (
            """        A lease not renewed in the background learns of its loss only through
        [`renew`][fencedlease.Lease.renew], [`check`][fencedlease.Lease.check], or
        here at its deadline.
""",
            """        Useful in a watcher thread that stops work the moment the lease goes. A lease not renewed
        in the background learns of its loss only through [`renew`][fencedlease.Lease.renew],
        [`check`][fencedlease.Lease.check], or here at its deadline.
""",
        ),
        (
            """        lease is never renewed back to life. Returns False for a released lease. A cancelled
        ``renew()`` changes nothing here (the command may still have reset the TTL in Redis,
        which is harmless: the local deadline stays the earlier one).
""",
            """        lease is never renewed back to life. Returns False for a released lease.
""",
        ),
        (
            """        pool and runs, and stops with its reply; it never touches the key again. If the
        store cannot be reached ([`BackendError`][fencedlease.BackendError]) or the call is
        cancelled, the lease keeps its owner token, so ``release()`` can be awaited again.
""",
            """        pool and runs, and stops with its reply; it never touches the key again. If the store
        cannot be reached, [`BackendError`][fencedlease.BackendError] is raised and the lease keeps
        its owner token, so ``release()`` can be called again.
""",
        ),
        (
            """            self._stop_renewal()  # no answer (or cancelled): the deadline rule applies again
""",
            """            self._stop_renewal()  # no answer: the deadline rule applies again
""",
        ),
        (
            '    """What [`LeaseManager.acquire`][fencedlease.LeaseManager.acquire] got: the twin\n    of [`AcquireResult`][fencedlease.AcquireResult].\n\n    ``acquired`` and the ``lease`` (None when not acquired). ``bool(result)`` is\n    ``result.acquired``. ``holder_ttl_ms`` is the current holder\'s remaining TTL in milliseconds\n    when not acquired (None when acquired).\n    """\n',
            '    """What [`LeaseManager.acquire`][fencedlease.LeaseManager.acquire] got: ``acquired`` and the\n    ``lease`` (None when not acquired). ``bool(result)`` is ``result.acquired``. ``holder_ttl_ms``\n    is the current holder\'s remaining TTL in milliseconds when not acquired (None when acquired)."""\n',
        ),
        (
            '    """What [`LeaseManager.with_lease`][fencedlease.LeaseManager.with_lease] did: the\n    twin of [`LeaseOutcome`][fencedlease.LeaseOutcome]. Ran ``fn`` under the lease (``value`` is\n    what its coroutine returned), or skipped it because the lease was not acquired (``value`` is\n    None)."""\n',
            '    """What [`LeaseManager.with_lease`][fencedlease.LeaseManager.with_lease] did: ran ``fn`` under\n    the lease (``value`` is its return value), or skipped it because the lease was not acquired\n    (``value`` is None)."""\n',
        ),
    ],
    "_manager_store.py": [
        (
            """        [`Lease.renew`][fencedlease.Lease.renew]; without ``fencing_token`` its token
        is None until a renewal learns it from the store. The store still checks ``owner_token`` on
        every renew and release. The restored lease is not renewed in the background until
        [`keep_alive`][fencedlease.LeaseManager.keep_alive] puts it under the renewer.
""",
            """        [`Lease.renew`][fencedlease.Lease.renew]; without ``fencing_token`` its token is None until
        a renewal learns it from the store. The store still checks ``owner_token`` on every renew
        and release. The restored lease is not renewed in the background until
        [`keep_alive`][fencedlease.LeaseManager.keep_alive] puts it under the renewer.
""",
        ),
    ],
    "_manager_base.py": [
        (
            '"""What [`LeaseManager`][fencedlease.LeaseManager] does by the same steps as the sync\nface: the acquire call and its loop (``restore``, ``inspect`` and ``force_release`` are in\n`fencedlease.aio._manager_store`). The sync face\'s\n`fencedlease._manager_base` is generated from this module (``scripts/unasync.py``).\n',
            '"""What [`LeaseManager`][fencedlease.LeaseManager] does by the same steps as the asyncio face: the\nacquire call and its loop (``restore``, ``inspect`` and ``force_release`` are in\n`fencedlease._manager_store`). Generated from\n`fencedlease.aio._manager_base` (``scripts/unasync.py``).\n',
        ),
        (
            """The steps that differ by face are the manager's own: [`_ManagerBase._abandon`][] (what an
acquire that failed or was interrupted may hold) and [`_ManagerBase._release_later`][] (the
""",
            """The steps that differ by face are the manager's own: `_ManagerBase._abandon` (what an
acquire that failed or was interrupted may hold) and `_ManagerBase._release_later` (the
""",
        ),
        (
            """        await [`Lease.renew`][fencedlease.Lease.renew].
""",
            """        call [`Lease.renew`][fencedlease.Lease.renew].
""",
        ),
        (
            """        once more with the same owner token: Redis recognises it and returns the same fencing
        token. If the call is cancelled while an acquire of it may have landed, that owner token
        releases the key before the cancellation propagates (see the module docstring).
""",
            """        once more with the same owner token: Redis recognises it, returns the same fencing token
        and issues no new one, so the caller holds the lease instead of orphaning it.
""",
        ),
        (
            """            [`AcquireResult`][fencedlease.AcquireResult]; ``result.lease`` is None
            when not acquired.
""",
            """            [`AcquireResult`][fencedlease.AcquireResult]; ``result.lease`` is None when not
            acquired.
""",
        ),
        (
            '''"""A manager over the backend ``url`` names (see
        [`backend_from_url`][fencedlease.aio.backend_from_url]), closed with the
        manager: ``redis://``, ``rediss://`` and ``unix://``, a client made by
        ``redis.Redis.from_url(url, **kwargs)``. No I/O until the first command.

        Raises:
            ValidationError: an unknown scheme, a malformed URL or a bad ``prefix``.
        """
''',
            '''"""A manager over the backend ``url`` names, closed with the manager: ``redis://``,
        ``rediss://`` and ``unix://`` (a client made by ``redis.Redis.from_url(url, **kwargs)``),
        ``memory://``, and ``sqlite:///relative/path`` / ``sqlite:////absolute/path`` /
        ``sqlite:///:memory:`` (``busy_timeout_ms`` the only keyword). See
        `fencedlease._urls.backend_from_url`.

        Raises:
            ValidationError: an unknown scheme, a malformed URL or an option it does not take.
            BackendError: a SQLite database that cannot be opened.
        """
''',
        ),
        (
            '''"""Hold the lease on ``key`` for the ``async with`` block, renewed in the background.

        Acquires as [`acquire`][fencedlease.LeaseManager.acquire] does, renews every
        ``heartbeat_ms`` (default ``max(1, ttl_ms // 4)``; an explicit value must be at most
        ``ttl_ms // 2``; ``False``: no renewal) while the block runs, then releases.
        ``on_renew_error(exc)`` is called (in the renewal task, so it must not block) for each
        failed renewal round trip: telemetry, not a loss. An ``Exception`` the hook raises is logged
        and renewal goes on; anything else it raises (``KeyboardInterrupt``, ``SystemExit``) stops
        the renewal task: its leases are lost, so the block ends in
        [`LeaseLostError`][fencedlease.LeaseLostError] (see `call_renew_error_hooks`; the same on
        both faces).

        The lease is lost when a renewal finds the key gone or another owner's, or when ``ttl_ms``
        passes with no confirmed renewal; this is checked by the renewal task, again when the block
        ends, and by the release. On loss the task running the block is cancelled, and the
        ``CancelledError`` comes out of ``hold`` as [`LeaseLostError`][fencedlease.LeaseLostError].

        Raises:
            ValidationError: an argument out of bounds (when ``hold()`` is called).
            LeaseNotAcquiredError: the key is held by another owner; the block never runs.
            NestedHoldError: a [`LeaseNotAcquiredError`][fencedlease.LeaseNotAcquiredError]
                raised at once, before any round trip: this manager already holds ``key`` in
                an enclosing hold of the same thread (asyncio: task), which the nested one would
                wait for.
            LeaseLostError: the lease was lost while the block ran, even if the block returned
                normally or swallowed the cancellation. An exception raised by the block itself
                propagates unchanged, and so does a cancellation that did not come from the loss.
            BackendError: the store failed while acquiring or releasing.
            ManagerClosedError: the manager is closed, or was closed while the call waited.
        """
''',
            '''"""Hold the lease on ``key`` for the ``with`` block, renewed in the background.

        Acquires as [`acquire`][fencedlease.LeaseManager.acquire] does, renews every
        ``heartbeat_ms`` (default ``max(1, ttl_ms // 4)``; an explicit value must be at most
        ``ttl_ms // 2``; ``False``: no renewal) while the block runs, then releases.
        ``on_renew_error(exc)`` is called (on the renewer's thread) for each failed renewal round
        trip: telemetry, not a loss. An ``Exception`` the hook raises is logged and renewal goes on;
        anything else it raises (``KeyboardInterrupt``, ``SystemExit``) stops the renewer: its
        leases are lost, so the block ends in [`LeaseLostError`][fencedlease.LeaseLostError] (see
        `call_renew_error_hooks`; the same on both faces).

        The lease is lost when a renewal finds the key gone or another owner's, or when ``ttl_ms``
        passes with no confirmed renewal; this is checked by the renewer, again when the block ends,
        and by the release (a refused release means the lease had moved on). The block can watch
        ``lease.lost``, ``lease.check()`` or ``lease.wait_lost()``.

        The final release waits until the lease's deadline at most (at least 100 ms; see
        `release_bound_s`), so a hung store cannot hold the caller past
        it: a release with no reply in time leaves the lease to lapse at its TTL and counts as a
        failed release (below). After [`close`][fencedlease.LeaseManager.close] the block ends in
        [`LeaseLostError`][fencedlease.LeaseLostError] (close released the lease).

        Raises:
            ValidationError: an argument out of bounds (when ``hold()`` is called).
            LeaseNotAcquiredError: the key is held by another owner; the block never runs.
            NestedHoldError: a [`LeaseNotAcquiredError`][fencedlease.LeaseNotAcquiredError]
                raised at once, before any round trip: this manager already holds ``key`` in
                an enclosing hold of the same thread (asyncio: task), which the nested one would
                wait for.
            LeaseLostError: the lease was lost while the block ran, even if the block returned
                normally. An exception raised by the block itself propagates unchanged.
            BackendError: the store failed while acquiring or releasing, or the release got no
                reply in time (the lease lapses at its TTL).
            ManagerClosedError: the manager is closed.
        """
''',
        ),
        (
            '''"""Await ``fn(lease)`` under the lease on ``key``, as
        [`hold`][fencedlease.LeaseManager.hold] does (in the caller's task, which is the
        one cancelled on loss).

        Returns:
            [`LeaseOutcome`][fencedlease.LeaseOutcome]: ``value`` is what ``fn``
            returned; ``skipped`` is true (and ``fn`` never ran) when the lease was not acquired.

        Raises:
            ValidationError, LeaseLostError, BackendError, ManagerClosedError: as
                [`hold`][fencedlease.LeaseManager.hold]; an exception from ``fn``
                propagates unchanged (a ``LeaseNotAcquiredError`` from ``fn`` included: only this
                call's own acquire turns into a skipped outcome, and a
                ``NestedHoldError`` is raised, not skipped). ``fn`` not callable:
                ``ValidationError`` before anything is acquired; ``fn(lease)`` not an awaitable (a
                sync function, which ran blocking the event loop): ``ValidationError`` (also a
                ``TypeError``) once the lease is released.
        """
''',
            '''"""Run ``fn(lease)`` under the lease on ``key``, as [`hold`][fencedlease.LeaseManager.hold]
        does.

        Returns:
            [`LeaseOutcome`][fencedlease.LeaseOutcome]: ``value`` is what ``fn`` returned;
            ``skipped`` is true (and ``fn`` never ran) when the lease was not acquired.

        Raises:
            ValidationError, LeaseLostError, BackendError, ManagerClosedError: as
                [`hold`][fencedlease.LeaseManager.hold]; an exception from ``fn`` propagates
                unchanged. ``fn`` not callable, or an ``async def`` function (use
                [`fencedlease.aio.AsyncLeaseManager.with_lease`][]): ``ValidationError`` (a
                ``TypeError`` too for the latter) before anything is acquired; ``fn`` returned an
                awaitable (it is closed unawaited): ``ValidationError`` once the lease is released.
        """
''',
        ),
        (
            "from collections.abc import Awaitable, Callable\n",
            "from collections.abc import Callable\n",
        ),
        ("Callable[[Lease], Awaitable[T]]", "Callable[[Lease], T]"),
    ],
}

# The generated modules: the asyncio source -> the sync module, both under src/fencedlease.
FILES: dict[str, str] = {
    "aio/_from_env.py": "_from_env.py",
    "aio/_cluster_backend.py": "_cluster_backend.py",
    "aio/_semaphore.py": "_semaphore.py",
    "aio/_slot_backend.py": "_slot_backend.py",
    "aio/_lease.py": "_lease.py",
    "aio/_manager_base.py": "_manager_base.py",
    "aio/_manager_store.py": "_manager_store.py",
    "aio/_redis_backend.py": "_redis_backend.py",
}

HEADER = (
    "# GENERATED from src/fencedlease/{source} by `{command}`:\n"
    "# do not edit. Edit that source, then run it again (CI runs it with --check, failing while\n"
    "# stale).\n"
)

_RULE = unasync.Rule(fromdir="/aio/", todir="/", additional_replacements=NAMES)


def _tokens(source: str) -> str:
    """unasync's token pass: ``async``/``await`` dropped, the names replaced."""
    tokens = tokenize_rt.src_to_tokens(source)
    return str(tokenize_rt.tokens_to_src(list(_RULE._unasync_tokens(tokens))))


def _ruff(text: str, path: Path) -> str:
    """``text`` as ``ruff`` leaves it: imports sorted, then formatted (the project's config)."""
    name = str(path.relative_to(ROOT))
    for args in (["check", "--fix", "--select", "I", "--quiet"], ["format", "--quiet"]):
        text = subprocess.run(
            [sys.executable, "-m", "ruff", *args, "--stdin-filename", name, "-"],
            input=text,
            capture_output=True,
            text=True,
            check=True,
            cwd=ROOT,
        ).stdout
    return text


def generate(source: str, target: str) -> str:
    """The text of the sync module ``target`` made from the asyncio module ``source``."""
    src = ROOT / "src" / "fencedlease"
    text = _tokens((src / source).read_text(encoding="utf-8"))
    # unasync turns an ``Async`` name it is not told about into ``Sync...``: never what we mean.
    unknown = sorted(set(re.findall(r"\bSync[A-Z]\w*", text)))
    if unknown:
        raise SystemExit(
            f"scripts/unasync.py: {source} uses {', '.join(unknown)} (from an Async name"
            " missing from NAMES): add its sync name to NAMES"
        )
    for pattern, repl in SUBS:
        text = re.sub(pattern, repl, text, flags=re.MULTILINE)
    for old, new in PHRASES.get(target, []):
        if old not in text:
            raise SystemExit(
                f"scripts/unasync.py: a phrase rule for {target} no longer matches:\n{old}"
            )
        text = text.replace(old, new)
    text = HEADER.format(source=source, command=COMMAND) + text
    return _ruff(text, src / target)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 if a generated file is stale"
    )
    args = parser.parse_args(argv)
    stale = []
    for source, target in FILES.items():
        path = ROOT / "src" / "fencedlease" / target
        text = generate(source, target)
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if text == current:
            continue
        if args.check:
            stale.append(path.relative_to(ROOT))
        else:
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path.relative_to(ROOT)}")
    for path in stale:
        print(
            f"{path} is stale: not what `{COMMAND}` makes of its asyncio source; run it",
            file=sys.stderr,
        )
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
