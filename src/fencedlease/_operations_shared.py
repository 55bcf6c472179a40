"""What both faces' ``Operations`` mixins share (`fencedlease._sync.operations`,
`fencedlease._async.operations`): the stubs of the manager they are mixed into, and ``from_env`` up
to its start-up check, which each face makes in its own way (a call, an await). No I/O."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from fencedlease._core.clock import Clock
from fencedlease._core.env import manager_from_env
from fencedlease._core.events import EventHook
from fencedlease._redis.options import jittered_retry

__all__ = ["DEFAULT_HEALTH_TIMEOUT_MS", "OperationsBase"]

DEFAULT_HEALTH_TIMEOUT_MS = 1_000
"""How long ``check_health`` waits by default, in milliseconds (both faces)."""

_M = TypeVar("_M", bound="OperationsBase")


class OperationsBase:
    """The manager's parts that ``from_env``, ``check_health`` and ``keep_alive`` use."""

    _shutdown_timeout_ms: int

    @classmethod
    def _over_url(
        cls: type[_M], url: str, prefix: str, clock: Clock, on_event: EventHook | None,
        options: dict[str, Any],
    ) -> _M:  # fmt: skip
        raise NotImplementedError

    def _check_open(self) -> None:
        raise NotImplementedError

    @classmethod
    def _from_env_config(
        cls: type[_M], environ: Mapping[str, str] | None, connect: bool, clock: Clock,
        on_event: EventHook | None, kwargs: dict[str, Any], retry_class: Callable[..., Any],
    ) -> tuple[_M, tuple[int, int] | None]:  # fmt: skip
        """The manager ``from_env`` makes (its shutdown timeout set), and its start-up check:
        ``(attempts, timeout_ms)`` (the connect timeout, else the health check's default), or
        None without ``connect``. ``retry_class``: the face's redis-py ``Retry``.

        Raises:
            ValidationError: as ``from_env``, naming the variable.
        """
        manager, config = manager_from_env(
            lambda url, prefix, options: cls._over_url(url, prefix, clock, on_event, options),
            environ, kwargs, jittered_retry(retry_class),
        )  # fmt: skip
        manager._shutdown_timeout_ms = config.shutdown_timeout_ms
        if not connect:
            return manager, None
        timeout_ms = config.connect_timeout_ms or DEFAULT_HEALTH_TIMEOUT_MS
        return manager, (config.connect_max_attempts, timeout_ms)
