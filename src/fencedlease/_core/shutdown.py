"""What a manager's ``close()`` returns: [`ShutdownReport`][fencedlease.ShutdownReport]. No I/O.

An incomplete shutdown is reported, never swallowed: ``close()`` returns the report (each lease it
could not release is logged as a warning, the summary at ``INFO``), so a process's entry point can
say so and exit non-zero. ``close()`` itself raises only for a bad argument or a failure to close
the client; a lease whose release failed is not an error of the caller's (it lapses at its TTL), so
it is a line of the report rather than an exception.
"""

from __future__ import annotations

import logging

import attrs

from fencedlease._core.validate import check_ms

__all__ = ["ShutdownReport", "close_bound_ms", "later_close_report", "log_incomplete"]

log = logging.getLogger("fencedlease")


@attrs.frozen
class ShutdownReport:
    """The outcome of a manager's ``close()``.

    ``unreleased``: the keys of the leases held in ``hold``/``with_lease``/``keep_alive`` whose
    release by ``close()`` failed or got no reply within the bound (each lapses at its TTL).
    ``unfinished``: background threads (sync face) or clean-up tasks (asyncio face: cancelled at
    the bound) that had not ended when ``close()`` returned; a thread blocked on a hung store
    ends at the client's socket timeout. ``elapsed_ms``: how long ``close()`` took
    (milliseconds). ``timeout_ms``: the bound it had.
    """

    unreleased: tuple[str, ...] = ()
    unfinished: int = 0
    elapsed_ms: float = 0.0
    timeout_ms: int = 0

    @property
    def complete(self) -> bool:
        """Whether everything was released and every background thread or task ended in time."""
        return not self.unreleased and self.unfinished == 0


def log_incomplete(report: ShutdownReport) -> None:
    """An ``INFO`` line for an incomplete ``report`` (each lease not released has had its own
    warning already; keys are shown, owner tokens never)."""
    if not report.complete:
        log.info(
            "fencedlease: close() did not finish within %d ms: %d lease(s) not released %r"
            " (they lapse at their ttl), %d background thread(s) or task(s) unfinished",
            report.timeout_ms, len(report.unreleased), list(report.unreleased),
            report.unfinished,
        )  # fmt: skip


def close_bound_ms(timeout_ms: int | None, default_ms: int) -> int:
    """The bound of a manager's ``close(timeout_ms)``, in milliseconds: ``default_ms`` (the
    manager's shutdown timeout) when ``timeout_ms`` is None.

    Raises:
        ValidationError: ``timeout_ms`` is not an int in 0..2,147,483,647.
    """
    return default_ms if timeout_ms is None else check_ms("timeout_ms", timeout_ms, 0)


def later_close_report(first: ShutdownReport | None, bound_ms: int) -> ShutdownReport:
    """What a later ``close()`` returns (either face), having waited ``bound_ms`` at most for the
    first call to finish: that call's report, or, when there is none (still under way, or it
    failed before making one), a report of one unfinished shutdown with that bound."""
    return first or ShutdownReport(unfinished=1, timeout_ms=bound_ms)
