"""Taking a connection from a redis-py pool, in every redis-py the library supports.

older redis-py (5.0.1, the oldest allowed, among them) requires ``get_connection(command_name,
*keys, **options)`` (a plain pool ignores the name); newer ones make it optional and deprecate
passing it (from 5.3). The library asks a pool's class
once which form it has; and whether the connection a pool hands out next is already made
(`next_is_made`). No I/O here.
"""

from __future__ import annotations

import inspect
from typing import Final

__all__ = ["connection_args", "next_is_made"]

_NAMED: Final = ("EVALSHA",)
_ARGS: dict[type, tuple[str, ...]] = {}


def connection_args(pool: object) -> tuple[str, ...]:
    """The positional arguments for ``pool.get_connection`` (sync or asyncio pool): a command's
    name where the pool's redis-py requires one, else none (no deprecation warning)."""
    kind = type(pool)
    args = _ARGS.get(kind)
    if args is None:
        name = inspect.signature(kind.get_connection).parameters.get("command_name")  # type: ignore[attr-defined]
        required = name is not None and name.default is inspect.Parameter.empty
        args = _ARGS[kind] = _NAMED if required else ()
    return args


def next_is_made(pool: object) -> bool:
    """Whether the connection ``pool`` (sync or asyncio) hands out next, the last one given back,
    is already made. False for a pool of another shape: the caller then takes the general path.

    redis-py names no public way to ask for the pool's idle list, hence its private
    ``_available_connections``. A connection says whether it is made by its ``is_connected``
    property on the asyncio face and on newer sync faces; the sync connection of redis-py 5.0.1
    has no such property, only its socket, ``_sock`` (None until made).
    """
    idle = getattr(pool, "_available_connections", None)
    if not idle:
        return False
    connection = idle[-1]
    made = getattr(connection, "is_connected", None)
    if isinstance(made, bool):
        return made
    return getattr(connection, "_sock", None) is not None
