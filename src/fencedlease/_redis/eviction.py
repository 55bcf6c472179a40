"""Whether a Redis store may evict the library's keys, told once per backend, with no I/O here.

A Redis with ``maxmemory`` set evicts keys when it is full unless its ``maxmemory-policy`` is
``noeviction`` (then a full Redis refuses the write: the grant fails, nothing is lost):

- ``allkeys-*``: any key, a fencing counter included (it has no TTL); the next grant of its name
  starts again at token 1, so fencing tokens are reissued and a resource that has seen the old
  ones refuses or, worse, accepts the wrong holder;
- ``volatile-*``: only keys with a TTL, so the counters stay, but a held lease's key (it has one)
  can go before its TTL ends: the lease is granted again while its holder still works (tokens
  still increase, so a fenced resource refuses the older one; unfenced work overlaps).

The backends read the policy from ``INFO memory``'s ``maxmemory_policy`` (no ``CONFIG``
permission needed, so managed services answer it too) once: on their first acquire that the
store answers, or earlier through a health check (``check_health``, ``from_env(connect=True)``).
An evicting policy is warned about once per backend and server
([`UnsafeRedisWarning`][fencedlease.UnsafeRedisWarning] and a warning on the ``fencedlease``
logger); a refused ``INFO`` (an ACL) skips the check, logged at debug. The same rule, as a failed
check, is ``fencedlease doctor``'s ``maxmemory-policy``.
"""

from __future__ import annotations

import logging
import threading
import warnings
from collections.abc import Mapping
from typing import Any, Final

from fencedlease._core.errors import UnsafeRedisWarning

__all__ = ["SAFE_POLICY", "EvictionCheck", "policy_of", "unsafe_message"]

log = logging.getLogger("fencedlease")

SAFE_POLICY: Final = "noeviction"
FIX: Final = (
    "set maxmemory-policy noeviction (CONFIG SET maxmemory-policy noeviction, and in the"
    " server's configuration), or keep the library's keys on a Redis that evicts nothing"
)


def _text(value: object) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def policy_of(info: Mapping[Any, Any]) -> str | None:
    """The ``maxmemory_policy`` field of an ``INFO memory`` reply as redis-py parses it (keys and
    values ``str`` or ``bytes``), or None where the reply has no such field."""
    for key, value in info.items():
        if _text(key) == "maxmemory_policy":
            return _text(value)
    return None


def unsafe_message(policy: str, where: str) -> str | None:
    """What ``policy`` risks and the fix, one line naming the setting and ``where`` it was read
    (``""``: the backend's one primary; else a cluster primary's ``host:port``); None for
    ``noeviction``."""
    if policy == SAFE_POLICY:
        return None
    server = f"the Redis primary {where}" if where else "the Redis store"
    if policy.startswith("allkeys-"):
        risk = (
            "a full Redis may evict a fencing counter (it has no TTL), and the next grant of its"
            " name starts again at token 1: fencing tokens are reissued"
        )
    elif policy.startswith("volatile-"):
        risk = (
            "a full Redis may evict a held lease's key (it has a TTL) before its TTL ends, and"
            " the lease is granted again while its holder still works (the fencing counters"
            " have no TTL and stay)"
        )
    else:
        risk = "a full Redis may evict the library's keys, fencing counters included"
    return f"fencedlease: {server} has maxmemory-policy {policy}: {risk}; {FIX}"


class EvictionCheck:
    """One backend's read of its store's eviction policy: due until read (or refused), and each
    server's evicting policy warned about once. Thread-safe; no I/O.

    ``due`` is the one attribute the acquire path reads on every call (a plain bool)."""

    def __init__(self) -> None:
        self.due = True
        self._lock = threading.Lock()
        self._warned: set[str] = set()

    def claim(self) -> bool:
        """Whether the caller is the one to read the policy now (true once, until `again`)."""
        if not self.due:
            return False
        with self._lock:
            due, self.due = self.due, False
        return due

    def again(self, why: BaseException | None) -> None:
        """The read did not answer (``why``: the connection's error; None: cancelled): the next
        acquire reads."""
        if why is not None:
            log.debug(
                "fencedlease: maxmemory-policy not read (%s: %s); the next acquire reads it",
                type(why).__name__,
                why,
            )
        self.due = True

    def skipped(self, why: BaseException) -> None:
        """The server refused ``INFO memory`` (an ACL, a managed service): no check, no read
        again."""
        self.due = False
        log.debug(
            "fencedlease: maxmemory-policy not checked: INFO memory refused (%s: %s)",
            type(why).__name__,
            why,
        )

    def seen(self, policies: Mapping[str, str | None]) -> tuple[str | None, tuple[str, ...]]:
        """Note the policies read, by server (`unsafe_message`'s ``where``; None: the reply had
        no such field): each evicting one is warned about and logged the first time it is seen.

        Returns:
            The policy (of several servers, the first that evicts, else ``noeviction``; None
            when none was read) and the message of each server whose policy evicts.
        """
        self.due = False
        found: str | None = None
        findings: list[str] = []
        for where, policy in policies.items():
            if policy is None:
                continue
            message = unsafe_message(policy, where)
            if found is None or (message is not None and found == SAFE_POLICY):
                found = policy
            if message is None:
                continue
            findings.append(message)
            with self._lock:
                first = where not in self._warned
                self._warned.add(where)
            if first:
                log.warning("%s", message)
                warnings.warn(message, UnsafeRedisWarning, stacklevel=2)
        return found, tuple(findings)
