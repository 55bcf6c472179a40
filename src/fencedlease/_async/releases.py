"""The asyncio manager's releases that run in its own tasks (see `fencedlease._async.manager`):
the bounded release at the end of a hold, the release of an abandoned acquire, and the report of
what [`close`][fencedlease.aio.AsyncLeaseManager.close] could not release."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from fencedlease._core.backend import AsyncLeaseBackend
from fencedlease._core.clock import Clock
from fencedlease._core.errors import BackendError
from fencedlease._core.state import release_bound_s, release_wait_more_s

from .lease import AsyncLease

__all__ = ["release_abandoned", "release_within", "report_unreleased"]

log = logging.getLogger("fencedlease.aio")


async def release_within(lease: AsyncLease, clock: Clock) -> bool:
    """Release ``lease``, waiting `release_bound_s`, and on while
    renewals still move its deadline (`release_wait_more_s`); on
    timeout the release is cancelled and the lease lapses at its TTL.

    Raises:
        BackendError: the store failed or did not answer in time.
    """
    state = lease._state
    release = asyncio.ensure_future(lease.release())
    waited, wait = 0.0, release_bound_s(state, clock.monotonic())
    try:
        while True:
            done, _ = await asyncio.wait((release,), timeout=wait)
            if done:
                return release.result()
            waited += wait
            more = release_wait_more_s(state, clock.monotonic())
            if more is None:
                break
            wait = more
    finally:
        if not release.done():
            release.cancel()
            with contextlib.suppress(asyncio.CancelledError, BackendError):
                await release
    ms = round(waited * 1000)
    raise BackendError(
        f"release {state.key!r}: no reply within {ms} ms; the lease lapses at its ttl"
    ) from TimeoutError(f"no reply within {ms} ms")


async def release_abandoned(
    backend: AsyncLeaseBackend, key: str, owner_token: str, slots: asyncio.Semaphore
) -> None:
    """Release what an abandoned acquire may hold, holding one of the manager's ``slots`` (at most
    `fencedlease._core.decisions.CLEANUP_WORKERS` such releases at once, as on the sync face: a
    burst of give-ups that took a connection each emptied the caller's pool, and a release refused
    for want of one left a lease handed to a gone waiter held for its ttl); a store error is logged
    (the grant lapses at its TTL)."""
    try:
        async with slots:
            await backend.release(key, owner_token)
    except BackendError as exc:
        log.warning(
            "could not release the abandoned acquire of %r; it expires at its ttl: %s", key, exc
        )


def report_unreleased(
    releases: dict[asyncio.Task[Any], str], late: set[asyncio.Task[Any]], bound_ms: int
) -> tuple[str, ...]:
    """Log a warning for each of close()'s ``releases`` (task -> key) that failed or was ``late``
    (cancelled after ``bound_ms`` milliseconds): that lease lapses at its TTL. Their keys."""
    unreleased = []
    for task, key in releases.items():
        late_error = f"no reply within {bound_ms} ms"
        error: BaseException | str | None = late_error if task in late else None
        if error is None and not task.cancelled():
            error = task.exception()
        if error is not None:
            unreleased.append(key)
            log.warning(
                "fencedlease: close() could not release %r (it lapses at its ttl): %s",
                key, error,
            )  # fmt: skip
    return tuple(unreleased)
