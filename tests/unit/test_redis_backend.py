"""The Redis backend's commands and error mapping, against a recording stand-in for redis-py."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from redis.exceptions import NoScriptError, ResponseError

from fencedlease import BackendError
from fencedlease._core.protocol import AcquireReply
from fencedlease._redis.scripts import ACQUIRE, FORCE_RELEASE, RELEASE, RENEW
from fencedlease._sync.redis_backend import RedisBackend


class _Recorder:
    """Answers like redis-py's client, records every call, and can refuse EVALSHA once."""

    def __init__(self, reply: Any, *, noscript: bool = False, error: Exception | None = None):
        self.calls: list[tuple[Any, ...]] = []
        self.infos: list[str] = []
        self.reply = reply
        self.noscript = noscript
        self.error = error

    def evalsha(self, *args: Any) -> Any:
        self.calls.append(("evalsha", *args))
        if self.error is not None:
            raise self.error
        if self.noscript:
            self.noscript = False
            raise NoScriptError("NOSCRIPT No matching script.")
        return self.reply

    def eval(self, *args: Any) -> Any:
        self.calls.append(("eval", *args))
        return self.reply

    def delete(self, *args: Any) -> int:
        self.calls.append(("delete", *args))
        return 1

    def info(self, section: str) -> dict[str, str]:
        """The eviction check's one read after the first acquire (counted apart from calls)."""
        self.infos.append(section)
        return {"maxmemory_policy": "noeviction"}


_RELEASE_KEYS = (  # acquire and release declare the same four keys
    "app:locks:{k}",
    "app:locks:{k}:fence",
    "app:locks:{k}:waiters",
    "app:locks:{k}:waiters:meta",
)


def _backend(recorder: _Recorder) -> RedisBackend:
    return RedisBackend(recorder, "app:locks")  # type: ignore[arg-type]


def test_acquire_sends_one_evalsha_with_its_four_keys() -> None:
    """acquire is EVALSHA <sha> 4 <lease key> <counter> <waiter queue> <waiter details> <owner>
    <ttl> <fencing mode> primary: one command, every key it may touch declared; a client that is
    not a pooled ``redis.Redis`` (here a recorder) asks for the primary's id on every acquire."""
    recorder = _Recorder([1, 5, 1000])
    assert _backend(recorder).acquire("k", "o" * 32, 1000) == AcquireReply(True, 5, 1000)
    assert recorder.calls == [
        ("evalsha", ACQUIRE.sha, 4, *_RELEASE_KEYS, "o" * 32, 1000, "counter", "primary")
    ]


def test_noscript_falls_back_to_one_eval() -> None:
    """After SCRIPT FLUSH, NOSCRIPT is answered by EVAL of the same source (no SCRIPT LOAD);
    release declares all four keys it may touch (lease, counter, waiter queue and its details)."""
    recorder = _Recorder(1, noscript=True)
    assert _backend(recorder).release("k", "owner") is True
    assert recorder.calls == [
        ("evalsha", RELEASE.sha, 4, *_RELEASE_KEYS, "owner"),
        ("eval", RELEASE.source, 4, *_RELEASE_KEYS, "owner"),
    ]


def test_renew_and_force_release_arguments() -> None:
    """renew is EVALSHA <sha> 1 <lease key> <owner> <ttl>; force_release one script deleting the
    lease key and its grant details."""
    recorder = _Recorder(9)
    backend = _backend(recorder)
    assert backend.renew("k", "owner", 250) == 9
    assert backend.force_release("k") is True
    assert recorder.calls == [
        ("evalsha", RENEW.sha, 1, "app:locks:{k}", "owner", 250),
        ("evalsha", FORCE_RELEASE.sha, 2, "app:locks:{k}", "app:locks:{k}:grant"),
    ]


@pytest.mark.parametrize(
    "error",
    [redis.ConnectionError("down"), redis.TimeoutError("slow"), ResponseError("OOM")],
)
def test_redis_errors_become_backend_errors_with_the_cause(error: Exception) -> None:
    """Every redis-py error reaches the caller as BackendError, the original in __cause__."""
    with pytest.raises(BackendError, match="acquire 'k'") as info:
        _backend(_Recorder(None, error=error)).acquire("k", "owner", 100)
    assert info.value.__cause__ is error


def test_an_unexpected_reply_is_never_acquired() -> None:
    """A reply of the wrong shape raises the library's error instead of being read as a grant."""
    with pytest.raises(BackendError, match="unexpected reply"):
        _backend(_Recorder("OK")).acquire("k", "owner", 100)
