# GENERATED from src/fencedlease/_async/from_env.py by `python scripts/unasync.py`:
# do not edit. Edit that source, then run it again (CI runs it with --check, failing while
# stale).
"""[`LeaseManager.from_env`][fencedlease.LeaseManager.from_env]: a manager
configured by the environment, and the default bound of its start-up check and of
``check_health``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from redis.retry import Retry

from fencedlease._core.backend import LeaseBackend
from fencedlease._core.clock import SYSTEM_CLOCK, Clock
from fencedlease._core.env import manager_from_env
from fencedlease._core.events import EventHook
from fencedlease._core.shutdown import ShutdownReport
from fencedlease._redis.options import jittered_retry

from .health import connect as _connect

__all__ = ["DEFAULT_HEALTH_TIMEOUT_MS", "FromEnv"]

DEFAULT_HEALTH_TIMEOUT_MS = 1_000
"""How long ``check_health`` waits by default, in milliseconds; also the bound of each start-up
check of ``from_env(connect=True)`` without ``FENCEDLEASE_CONNECT_TIMEOUT_MS``."""

_M = TypeVar("_M", bound="FromEnv")


class FromEnv:
    """``from_env``, mixed into the manager; the manager's parts it uses are stubs here."""

    _backend: LeaseBackend
    _shutdown_timeout_ms: int

    def close(self, timeout_ms: int | None = None) -> ShutdownReport:
        raise NotImplementedError

    @classmethod
    def _over_url(
        cls: type[_M], url: str, prefix: str, clock: Clock, on_event: EventHook | None,
        options: dict[str, Any],
    ) -> _M:  # fmt: skip
        raise NotImplementedError

    def _check_open(self) -> None:
        raise NotImplementedError

    @classmethod
    def from_env(
        cls: type[_M],
        environ: Mapping[str, str] | None = None,
        *,
        connect: bool = False,
        clock: Clock = SYSTEM_CLOCK,
        on_event: EventHook | None = None,
        **kwargs: Any,
    ) -> _M:
        """A manager configured by the ``FENCEDLEASE_*`` variables of ``environ`` (default
        ``os.environ``), made as [`from_url`][fencedlease.LeaseManager.from_url] makes
        one:

        | Variable (``FENCEDLEASE_``...) | Default | Meaning (bounds) |
        |---|---|---|
        | ``URL`` | (required) | the store's URL, as ``from_url`` takes it |
        | ``PREFIX`` | fencedlease | the key namespace |
        | ``DB`` | the URL's | Redis ``db`` (0..2,147,483,647) |
        | ``CONNECT_TIMEOUT_MS`` | none | ``socket_connect_timeout`` (1..MAX) |
        | ``SOCKET_TIMEOUT_MS`` | none | ``socket_timeout`` (1..MAX) |
        | ``MAX_RETRIES`` | redis-py's | ``retry=Retry(..., n)`` (0..1,000) |
        | ``SHUTDOWN_TIMEOUT_MS`` | 5000 | ``close()``'s bound (0..MAX) |
        | ``CONNECT_MAX_ATTEMPTS`` | 3 | checks made by ``connect=True`` (1..1,000) |

        MAX is 2,147,483,647 (milliseconds). Numbers are strings of at most 20 ASCII digits
        (``"0250"`` is 250; a sign, a space or an underscore is refused, and so is a longer
        string, in bounds or not). The Redis variables (``DB``, the connect and socket
        timeouts, ``MAX_RETRIES``) become redis-py's options: seconds for the timeouts, and
        ``Retry(EqualJitterBackoff(), n)`` of ``redis.retry``; they are
        refused with a ``memory://`` or ``sqlite://`` URL, and ``FENCEDLEASE_DB`` with a URL
        that names a database. ``kwargs`` go to the client as in ``from_url``.

        ``connect=True``: [`check_health`][fencedlease.LeaseManager.check_health] at
        once (bounded by the connect timeout, else 1,000 ms), up to
        ``FENCEDLEASE_CONNECT_MAX_ATTEMPTS`` times, waiting 0.1 s, 0.2 s, 0.4 s ... (at most 2 s,
        slept on ``clock``) between attempts; when all fail the manager is closed again.

        Raises:
            ValidationError: ``argument`` names the variable: ``FENCEDLEASE_URL`` missing or not
                a usable URL, a number out of bounds, not digits or longer than 20 digits (the
                bounds in the message), a bad prefix, a Redis variable with another store, the
                database given twice; or a keyword argument a variable sets too. A password in
                the URL shows as ``***``, no piece of it of 3 characters or more.
            BackendError: ``connect=True`` and no attempt reached the store (the last failure
                in ``__cause__``).
        """
        manager, config = manager_from_env(
            lambda url, prefix, options: cls._over_url(url, prefix, clock, on_event, options),
            environ, kwargs, jittered_retry(Retry),
        )  # fmt: skip
        manager._shutdown_timeout_ms = config.shutdown_timeout_ms
        if connect:
            timeout_ms = config.connect_timeout_ms or DEFAULT_HEALTH_TIMEOUT_MS
            try:
                _connect(manager._backend, config.connect_max_attempts, timeout_ms, clock)
            except BaseException:
                manager.close()
                raise
        return manager
