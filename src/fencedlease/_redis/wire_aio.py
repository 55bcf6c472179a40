"""`fencedlease._redis.wire`'s send, awaited: a packed renewal batch on one of a
``redis.asyncio.Redis`` client's pooled connections."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import redis.asyncio

from fencedlease._core.clock import mark_send

from .errors import CommandRefused, ConnectionLost, ScriptNotLoaded, map_exceptions
from .pool import connection_args
from .wire import PrimaryReads, always, forget_primary

__all__ = ["packs_itself", "run_packed"]


def packs_itself(client: object) -> bool:
    """Whether a batch for ``client`` may go out packed (`run_packed`): a plain
    ``redis.asyncio.Redis`` on a pool (not one holding a connection of its own: its lock is
    redis-py's)."""
    return isinstance(client, redis.asyncio.Redis) and client.connection is None


async def run_packed(
    client: redis.asyncio.Redis,
    command: bytes | PrimaryReads,
    again: Callable[[], bool] = always,
) -> Any:
    """`fencedlease._redis.wire.run_packed`, awaited: send ``command`` (a packed renewal batch,
    or an acquire of `PrimaryReads`) on one of ``client``'s pooled connections and read its
    reply, the send marked once the connection is made; a connection that breaks is dropped and
    the command sent once more on a new one while ``again()`` is true (not once the manager is
    closed). A cancelled call drops its connection (a reply may still be on its way).

    Raises:
        RedisCallError: the reply's error, `CommandRefused` (`ScriptNotLoaded` for
            ``NOSCRIPT``), or the connection's, `ConnectionLost`; another redis-py error as
            redis-py raised it.
    """
    pool: Any = client.connection_pool  # redis-py's pool methods carry no annotations
    for attempt in (1, 2):
        conn = await pool.get_connection(*connection_args(pool))
        try:
            with map_exceptions(ScriptNotLoaded, CommandRefused, ConnectionLost):
                packed = command if isinstance(command, bytes) else command.command(conn)
                mark_send()
                await conn.send_packed_command([packed])
                reply = await conn.read_response()
                return reply if isinstance(command, bytes) else command.reply(conn, reply)
        except (ScriptNotLoaded, CommandRefused):
            forget_primary(conn)
            raise  # a reply: the connection is in step
        except ConnectionLost:
            await conn.disconnect(nowait=True)
            if attempt == 2 or not again():
                raise
        except BaseException:
            await conn.disconnect(nowait=True)  # a reply may still be on its way
            raise
        finally:
            await pool.release(conn)
    raise AssertionError("unreachable")  # pragma: no cover
