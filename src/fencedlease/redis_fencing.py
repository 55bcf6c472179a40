"""A fenced resource whose data lives in Redis: the token check and the access in one Lua call.

::

    import redis
    from fencedlease.redis_fencing import RedisFencedResource

    profile = RedisFencedResource(redis.Redis(), "profile:42")
    profile.hset({"plan": "pro"}, lease)          # raises StaleTokenError if lease is stale
    fields = profile.hgetall(lease)               # a fenced read: moves the fence too

Layout: the data is at ``<prefix>:{<name>}:resource`` (a string or a hash, as you use it) and the
fence state at ``<prefix>:{<name>}:resource:fence`` (a hash ``{token, fp}``: the largest accepted
token and the fingerprint of the lease that presented it; no TTL, never deleted by the library).
Both share a Redis Cluster hash slot, and neither can be a lease's key (see
:mod:`fencedlease._protocol` for the whole layout and how names are escaped).

The rule is the one of :func:`fencedlease._fencing.decide`, transcribed once in
``scripts/fenced_check.lua``; each ``scripts/fenced_<op>.lua`` adds one access to it. A script that
finds its SHA missing (``NOSCRIPT``, after ``SCRIPT FLUSH`` or a failover to a fresh replica) is
loaded again and retried once. Every ``redis.RedisError`` reaches the caller as
:class:`BackendError` with the original in ``__cause__``.

If the fence state lives on a Redis that loses writes (a failover, a restart without persistence),
it is rolled back with them; fence data in the store that holds it, and see ``docs/fencing.md``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from importlib import resources
from typing import Any, Final

import attrs
import redis

from ._acl import acl_denial, register_script
from ._errors import BackendError, ValidationError
from ._fencing import (
    RefusalReason,
    TokenOrLease,
    coerce_access,
    stale_token_error,
)
from ._protocol import resource_keys
from ._validate import check_prefix

__all__ = ["DEFAULT_PREFIX", "RedisFencedResource"]

DEFAULT_PREFIX: Final = "fencedlease:fenced"

_REASONS: Final[dict[str, RefusalReason]] = {
    "older": "older",
    "strict": "strict",
    "duplicate": "duplicate",
}


@attrs.frozen
class _FencedScript:
    """``fenced_check.lua`` followed by ``fenced_<op>.lua``, with its SHA-1 for EVALSHA."""

    name: str
    source: str
    sha: str

    def __attrs_post_init__(self) -> None:
        register_script(self.name, self.source, self.sha)  # an ACL refusal inside names its command

    @classmethod
    def load(cls, op: str) -> _FencedScript:
        scripts = resources.files("fencedlease").joinpath("scripts")
        source = (
            scripts.joinpath("fenced_check.lua").read_text("utf-8")
            + "\n"
            + scripts.joinpath(f"fenced_{op}.lua").read_text("utf-8")
        )
        sha = hashlib.sha1(source.encode("utf-8")).hexdigest()  # noqa: S324 (Redis's script id)
        return cls(f"fenced_{op}", source, sha)


_ACCEPT: Final = _FencedScript.load("accept")
_SET: Final = _FencedScript.load("set")
_HSET: Final = _FencedScript.load("hset")
_GET: Final = _FencedScript.load("get")
_HGETALL: Final = _FencedScript.load("hgetall")


def _text(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if isinstance(value, str):
        return value
    return str(value)


class RedisFencedResource:
    """A named resource in Redis, fenced: every access checks the token in the same Lua call.

    ``RedisFencedResource(client, name, *, strict=False, prefix="fencedlease:fenced")``; ``client``
    is a sync ``redis.Redis`` (``decode_responses`` either way: values come back as your client
    returns them). ``name`` is any non-empty ``str``. The rule is
    :class:`fencedlease.FencedResource`'s: accepted only if the token is at least the largest
    accepted (``strict``: greater) and not the last token presented by a different lease. Reads move
    the fence too (Kleppmann 2016; ``docs/fencing.md``).

    Every method raises :class:`StaleTokenError` when refused (nothing written, nothing read),
    :class:`ValidationError` for bad arguments (nothing sent), :class:`BackendError` when Redis
    fails.

    Raises:
        ValidationError: ``name`` is not a non-empty str, or ``prefix`` is not a non-empty str
            without ``{`` or ``}``.
    """

    def __init__(
        self,
        client: redis.Redis,
        name: str,
        *,
        strict: bool = False,
        prefix: str = DEFAULT_PREFIX,
    ) -> None:
        if not isinstance(name, str) or not name:
            raise ValidationError("name", "name must be a non-empty str")
        check_prefix(prefix)
        self._client = client
        self._name = name
        self._strict = bool(strict)
        self._fence_key, self._data_key = resource_keys(prefix, name)

    @property
    def name(self) -> str:
        """The resource's name, as given."""
        return self._name

    @property
    def strict(self) -> bool:
        """``True``: a token is accepted only if greater than every accepted one (not equal)."""
        return self._strict

    @property
    def data_key(self) -> str:
        """The Redis key holding the data: ``<prefix>:{<name>}``."""
        return self._data_key

    @property
    def fence_key(self) -> str:
        """The Redis key holding the fence state: ``<prefix>:{<name>}:fence``."""
        return self._fence_key

    @property
    def last_token(self) -> int | None:
        """The largest accepted token (one round trip), or ``None`` before the first access.

        Raises :class:`BackendError` when Redis fails.
        """
        try:
            raw = self._client.hget(self._fence_key, "token")
        except redis.RedisError as exc:
            denied = acl_denial(exc)
            detail = f"{denied}: {exc}" if denied else str(exc)
            raise BackendError(f"reading the fence of {self._name!r} failed: {detail}") from exc
        return None if raw is None else int(_text(raw))

    def accept(self, token_or_lease: TokenOrLease) -> int:
        """Check ``token_or_lease`` and move the fence, touching no data; return the token.

        Raises :class:`StaleTokenError`, :class:`ValidationError`, :class:`BackendError`.
        """
        token, _ = self._run(_ACCEPT, token_or_lease, ())
        return token

    def set(self, value: str | bytes | int | float, token_or_lease: TokenOrLease) -> None:
        """Fenced ``SET <data_key> value``: written only if the token is accepted, in the same step.

        Raises :class:`StaleTokenError`, :class:`ValidationError`, :class:`BackendError`.
        """
        if isinstance(value, bool) or not isinstance(value, str | bytes | int | float):
            raise ValidationError("value", "value must be str, bytes, int or float")
        self._run(_SET, token_or_lease, (value,))

    def hset(
        self, mapping: Mapping[str, str | bytes | int | float], token_or_lease: TokenOrLease
    ) -> int:
        """Fenced ``HSET <data_key> field value ...``; return how many fields were new.

        ``mapping`` must hold at least one field. Raises :class:`StaleTokenError`,
        :class:`ValidationError`, :class:`BackendError`.
        """
        if not isinstance(mapping, Mapping) or not mapping:
            raise ValidationError(
                "mapping", "mapping must be a non-empty mapping of field to value"
            )
        args: list[str | bytes | int | float] = []
        for field, value in mapping.items():
            if not isinstance(field, str | bytes):
                raise ValidationError("mapping", "mapping fields must be str or bytes")
            if isinstance(value, bool) or not isinstance(value, str | bytes | int | float):
                raise ValidationError(
                    "mapping", f"value of {field!r} must be str, bytes, int or float"
                )
            args.extend((field, value))
        _, reply = self._run(_HSET, token_or_lease, args)
        return int(reply[1])

    def get(self, token_or_lease: TokenOrLease) -> Any:
        """Fenced read: check the token, move the fence, ``GET <data_key>``; return the value or
        ``None``.

        The value is ``str`` or ``bytes`` as the client's ``decode_responses`` says. Raises
        :class:`StaleTokenError` (nothing read), :class:`ValidationError`, :class:`BackendError`.
        """
        _, reply = self._run(_GET, token_or_lease, ())
        return reply[1] if len(reply) > 1 else None

    def hgetall(self, token_or_lease: TokenOrLease) -> dict[Any, Any]:
        """Fenced read: check the token, move the fence, ``HGETALL <data_key>``; return a ``dict``.

        Empty when the key is missing. Keys and values are ``str`` or ``bytes`` as the client's
        ``decode_responses`` says. Raises :class:`StaleTokenError` (nothing read),
        :class:`ValidationError`, :class:`BackendError`.
        """
        _, reply = self._run(_HGETALL, token_or_lease, ())
        flat = reply[1] if len(reply) > 1 else []
        return dict(zip(flat[0::2], flat[1::2], strict=True))

    def _run(
        self,
        script: _FencedScript,
        token_or_lease: TokenOrLease,
        payload: Sequence[str | bytes | int | float],
    ) -> tuple[int, list[Any]]:
        access = coerce_access(token_or_lease)
        args = (
            str(access.token),
            access.fingerprint or "",
            "1" if self._strict else "0",
            *payload,
        )
        keys = (self._fence_key, self._data_key)
        try:
            try:
                reply = self._client.evalsha(script.sha, 2, *keys, *args)
            except redis.exceptions.NoScriptError:
                self._client.script_load(script.source)
                reply = self._client.evalsha(script.sha, 2, *keys, *args)
        except redis.RedisError as exc:
            denied = acl_denial(exc)
            detail = f"{denied}: {exc}" if denied else str(exc)
            raise BackendError(f"{script.name} on {self._name!r} failed: {detail}") from exc
        if not isinstance(reply, list) or not reply:
            raise BackendError(f"{script.name} on {self._name!r} replied {reply!r}")
        if int(reply[0]) == 1:
            return access.token, reply
        last_token = int(_text(reply[1]))
        reason = _REASONS.get(_text(reply[2]), "older")
        raise stale_token_error(self._name, access.token, last_token, reason)

    def __repr__(self) -> str:
        return f"RedisFencedResource({self._name!r}, strict={self._strict})"
