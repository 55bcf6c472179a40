# GENERATED from src/fencedlease/_async/cluster_views.py by `python scripts/unasync.py`:
# do not edit. Edit that source, then run it again (CI runs it with --check, failing while
# stale).
"""The cluster majority's view, read once for every grant and renewal batch that needs one at the
same time: `SharedViews`. The view itself (every primary's ``CLUSTER NODES``, parsed once per
read, decided per slot) is `fencedlease._redis.cluster_majority.ClusterView`; what a read must
follow to confirm a call is argued in `fencedlease._core.epochs`.
"""

from __future__ import annotations

from collections.abc import Callable

from fencedlease._redis.cluster_majority import ClusterView

from .primitives import Event, Lock

__all__ = ["SharedViews"]


class _Flight:
    """One read of the view: its number (reads are numbered as they start) and, once done, its
    view (None: it failed or was cancelled)."""

    def __init__(self, number: int) -> None:
        self.number = number
        self.view: ClusterView | None = None
        self.done = Event()


class SharedViews:
    """The cluster majority's view, shared: a caller that needs a view read after some moment
    takes a `mark` at that moment, then `after(mark)` gives the view of a read that started
    after it, joining a read in flight that did (every grant and renewal batch waiting at once
    shares one read) or starting one. ``read()`` is the read (every primary asked at once, each
    bounded: it returns, a failed primary counting against); `latest` the newest view read, if
    any. A call waits ``join_bound_s`` seconds at most for a read it joined (one whose reader is
    gone, as in a forked child, never ends), then makes one of its own."""

    def __init__(self, read: Callable[[], ClusterView], join_bound_s: float) -> None:
        self._read = read
        self._join_bound_s = join_bound_s
        self._lock = Lock()
        self._started = 0  # reads started so far: the next one's number is this plus one
        self._flight: _Flight | None = None  # the newest read in flight
        self.latest: ClusterView | None = None
        self._latest_number = 0

    @property
    def reads(self) -> int:
        """How many reads were started (each asks every primary once)."""
        return self._started

    def mark(self) -> int:
        """A mark of now: a read numbered above it started after this call. No I/O."""
        with self._lock:
            return self._started

    def after(self, mark: int) -> ClusterView:
        """The view of a read that started after ``mark`` was taken: the newest one done if it
        did, else the read in flight if it did, else a new one.

        Raises:
            Exception: what ``read()`` raised, when this caller made the read.
        """
        while True:
            with self._lock:
                if self.latest is not None and self._latest_number > mark:
                    return self.latest
                joined = self._flight
                if joined is None or joined.number <= mark:  # none, or it started too early
                    self._started += 1
                    joined = None
                    flight = self._flight = _Flight(self._started)
            if joined is None:
                return self._make(flight)
            if not joined.done.wait(self._join_bound_s):
                with self._lock:
                    if self._flight is joined:
                        self._flight = None  # never ending: the next turn reads anew
            if joined.view is not None:
                return joined.view
            # its reader failed, was cancelled or is gone: the next turn makes a read of its own

    def _make(self, flight: _Flight) -> ClusterView:
        try:
            view = self._read()
            flight.view = view
            with self._lock:
                if flight.number > self._latest_number:
                    self.latest, self._latest_number = view, flight.number
            return view
        finally:
            with self._lock:
                if self._flight is flight:
                    self._flight = None
            flight.done.set()
