"""Context managers that say which ``with`` they take.

Each face's context managers (the managers themselves, ``hold``, ``keep_alive``, a semaphore's
``hold``) answer the other face's statement with a ``TypeError`` that names the right one, where
Python's own says only that the object "does not support the context manager protocol". The
methods exist at run time only: a type checker still sees no ``__aenter__`` on a sync context
manager (nor ``__enter__`` on an asyncio one) and flags the mistake before it runs. No I/O.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from types import TracebackType
from typing import TYPE_CHECKING, NoReturn, TypeVar

__all__ = ["AsyncWithOnly", "WithOnly", "with_only"]

T = TypeVar("T")


class WithOnly:
    """Mixed into a sync context manager: ``async with`` on it raises a ``TypeError`` naming
    ``with`` and the asyncio face. ``_with_what`` names the object in the message
    (``"LeaseManager.hold()"``)."""

    _with_what: str = "this fencedlease context manager"

    if not TYPE_CHECKING:

        def __aenter__(self) -> NoReturn:
            raise TypeError(
                f"{self._with_what} is a sync context manager: use `with`, not `async with` "
                "(asyncio code uses fencedlease.aio.AsyncLeaseManager)"
            )

        def __aexit__(self, *exc_info: object) -> None:  # never reached: __aenter__ raised
            return None


class AsyncWithOnly:
    """Mixed into an asyncio context manager: ``with`` on it raises a ``TypeError`` naming
    ``async with`` and the sync face. ``_with_what`` names the object in the message
    (``"AsyncLeaseManager.hold()"``)."""

    _with_what: str = "this fencedlease.aio context manager"

    if not TYPE_CHECKING:

        def __enter__(self) -> NoReturn:
            raise TypeError(
                f"{self._with_what} is an asyncio context manager: use `async with`, not `with` "
                "(sync code uses fencedlease.LeaseManager)"
            )

        def __exit__(self, *exc_info: object) -> None:  # never reached: __enter__ raised
            return None


class _WithOnly(WithOnly, AbstractContextManager[T]):
    """``inner`` (a ``@contextmanager`` of the sync face) under `WithOnly`'s message."""

    def __init__(self, inner: AbstractContextManager[T], what: str) -> None:
        self._inner = inner
        self._with_what = what

    def __enter__(self) -> T:
        return self._inner.__enter__()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        return self._inner.__exit__(exc_type, exc, tb)


def with_only(inner: AbstractContextManager[T], what: str) -> AbstractContextManager[T]:
    """``inner`` as it is, except that ``async with`` on it raises a ``TypeError`` naming
    ``with`` (``what`` names the call, ``"LeaseManager.hold()"``)."""
    return _WithOnly(inner, what)
