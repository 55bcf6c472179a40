"""Taking a connection from a redis-py pool, in every redis-py the library supports.

older redis-py (5.0.1, the oldest allowed, among them) requires ``get_connection(command_name,
*keys, **options)`` (a plain pool ignores the name); newer ones make it optional and deprecate
passing it (from 5.3). The library asks a pool's class
once which form it has. No I/O here.
"""

from __future__ import annotations

import inspect
from typing import Final

__all__ = ["connection_args"]

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
