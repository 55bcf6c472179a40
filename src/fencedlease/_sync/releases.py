# GENERATED from src/fencedlease/_async/releases.py by `python scripts/unasync.py`:
# do not edit. Edit that source, then run it again (CI runs it with --check, failing while
# stale).
"""The manager's releases (see `fencedlease._sync.manager`): the bounded release that ends a
hold (its waiting is the face's own: `FinalReleases` in ``.primitives``), the release of an
abandoned acquire, off the caller's path, and the report of what
[`close`][fencedlease.LeaseManager.close] could not release."""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import suppress
from typing import Any, TypeVar

from fencedlease._core.backend import LeaseBackend
from fencedlease._core.clock import Clock
from fencedlease._core.errors import BackendError

from .lease import Lease
from .primitives import LOG_NAME, Call, FinalReleases, Slots, Spawns

__all__ = ["_Releasing", "release_abandoned", "report_unreleased"]

T = TypeVar("T")

log = logging.getLogger(LOG_NAME)


def release_abandoned(backend: LeaseBackend, key: str, owner_token: str, slots: Slots) -> None:
    """Release what an abandoned acquire may hold, holding one of the manager's ``slots`` (at most
    `fencedlease._core.decisions.CLEANUP_WORKERS` such releases at once: a burst of give-ups that
    took a connection each emptied the caller's pool, and a release refused for want of one left
    a lease handed to a gone waiter held for its ttl); a store error is logged (the grant lapses
    at its TTL)."""
    try:
        with slots:
            backend.release(key, owner_token)
    except BackendError as exc:
        log.warning(
            "could not release the abandoned acquire of %r; it expires at its ttl: %s", key, exc
        )


def report_unreleased(
    releases: dict[Call[Any], str], late: set[Call[Any]], bound_ms: int
) -> tuple[str, ...]:
    """Log a warning for each of close()'s ``releases`` (call -> key) that failed or was ``late``
    (no reply after ``bound_ms`` milliseconds): that lease lapses at its TTL. Their keys."""
    unreleased = []
    for call, key in releases.items():
        error: BaseException | str | None = None
        if call in late:
            error = f"no reply within {bound_ms} ms"
        elif not call.cancelled():
            try:
                call.result()
            except Exception as exc:  # the release's own failure, reported here
                error = exc
        if error is not None:
            unreleased.append(key)
            log.warning(
                "fencedlease: close() could not release %r (it lapses at its ttl): %s",
                key, error,
            )  # fmt: skip
    return tuple(unreleased)


class _Releasing:
    """The manager's releases: a base of
    [`LeaseManager`][fencedlease.LeaseManager], which sets these attributes."""

    _backend: LeaseBackend
    _clock: Clock
    _closed: bool
    _chores: Spawns  # the calls off the caller's path, which close() waits for
    _cleanups: Slots  # release_abandoned's slots
    _releases: FinalReleases

    def _spawn(self, name: str, fn: Callable[..., T], *args: Any) -> Call[T]:
        """Run ``fn(*args)`` off the caller's path, as one of the manager's calls that
        [`close`][fencedlease.LeaseManager.close] waits for (``name`` says what it is)."""
        return self._chores.spawn(name, fn, *args)

    def _release_later(self, key: str, owner_token: str) -> None:
        # Off the caller's path: the call keeps its time bound; close() waits for it. Not after
        # close(): a call started then is one close() never waited for, on a closed client.
        if not self._closed:
            # close() may have stopped the sync face's workers meanwhile: the grant then lapses
            # at its TTL.
            with suppress(RuntimeError):
                self._clean_up(key, owner_token)

    def _clean_up(self, key: str, owner_token: str) -> Call[None]:
        """`release_abandoned` off the caller's path."""
        return self._spawn(
            "fencedlease-cleanup",
            release_abandoned,
            self._backend,
            key,
            owner_token,
            self._cleanups,
        )

    def _abandon(self, key: str, owner_token: str, exc: BaseException) -> None:
        """Release what a failed or interrupted acquire may hold under ``owner_token``. Not after
        close(): the client is closed, and such a grant lapses at its short TTL.

        A store error: in the background, so the failing call keeps its time bound (a stalled
        Redis would stall the clean-up too). An interrupt: before it goes on (the process may be
        on its way out), and a second cancellation does not stop it."""
        if self._closed:
            return
        # RuntimeError: no running loop (a coroutine closed by the garbage collector), or an
        # interpreter that exits (no thread can start); the grant lapses at its TTL.
        with suppress(RuntimeError):
            if isinstance(exc, (Exception, GeneratorExit)):
                self._clean_up(key, owner_token)
                return
            with suppress(BackendError):  # stopped by close(): the grant lapses at its TTL
                self._chores.shielded(
                    "fencedlease-cleanup",
                    f"release {key!r}",
                    release_abandoned,
                    self._backend,
                    key,
                    owner_token,
                    self._cleanups,
                )

    def _release_bounded(self, lease: Lease) -> bool:
        """The release that ends a hold, within its bound (`FinalReleases`); cancelling the caller
        does not stop it.

        Raises:
            BackendError: the store failed, did not answer in time, or close() stopped the
                release (the lease lapses at its TTL).
        """
        if lease._state.inherited():
            return False  # no I/O on the parent's lease (see _fork)
        return self._chores.shielded(
            "fencedlease-release",
            f"release {lease.key!r}",
            self._releases.release,
            lease,
            self._clock,
        )
