"""The Lua scripts the library sends, and running one (sync; the asyncio twin is in
:mod:`fencedlease._redis.aio`).

One NOSCRIPT policy for every script: EVALSHA; after ``SCRIPT FLUSH``, a restart or a failover to a
fresh replica the ``NOSCRIPT`` reply is answered by one EVAL of the same source, which also puts it
back in Redis's script cache. There is no per-call ``SCRIPT LOAD`` or ``SCRIPT EXISTS``: each
operation is one command. Errors are left to the caller's
:func:`~fencedlease._redis.errors.backend_errors`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from importlib import resources
from typing import Any, Final

import attrs
import redis
from redis.exceptions import NoScriptError

from .errors import SCRIPT_REFUSAL, register_script

__all__ = [
    "ACQUIRE",
    "ENQUEUE",
    "INSPECT",
    "RELEASE",
    "RENEW",
    "RENEW_MANY",
    "SCRIPT_REFUSAL",
    "Script",
    "run_script",
]


@attrs.frozen
class Script:
    """A Lua script shipped in ``fencedlease/scripts/``, with its SHA-1 for EVALSHA."""

    name: str
    source: str
    sha: str

    def __attrs_post_init__(self) -> None:
        register_script(self.name, self.source, self.sha)  # an ACL refusal inside names its command

    @classmethod
    def load(cls, name: str, *parts: str) -> Script:
        """``scripts/<name>.lua``; or, given ``parts``, the files ``scripts/<part>.lua`` joined by
        newlines, in order, under ``name``."""
        folder = resources.files("fencedlease").joinpath("scripts")
        source = "\n".join(
            folder.joinpath(f"{part}.lua").read_text("utf-8") for part in (parts or (name,))
        )
        return cls(name, source, hashlib.sha1(source.encode()).hexdigest())  # noqa: S324 (Redis's id)


ACQUIRE: Final = Script.load("acquire")
RENEW: Final = Script.load("renew")
RENEW_MANY: Final = Script.load("renew_many")
RELEASE: Final = Script.load("release")
INSPECT: Final = Script.load("inspect")
ENQUEUE: Final = Script.load("enqueue")


def run_script(
    client: redis.Redis | redis.cluster.RedisCluster,
    script: Script,
    keys: Sequence[str],
    args: Sequence[Any],
) -> Any:
    """Run ``script`` with ``keys`` and ``args`` on ``client``: EVALSHA, and on ``NOSCRIPT`` one
    EVAL of the source (see the module doc); the reply as redis-py gives it.

    Raises:
        redis.RedisError: whatever the command raised (map it with
            :func:`~fencedlease._redis.errors.backend_errors`).
    """
    try:
        return client.evalsha(script.sha, len(keys), *keys, *args)
    except NoScriptError:
        return client.eval(script.source, len(keys), *keys, *args)
