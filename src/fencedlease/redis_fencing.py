"""A fenced resource whose data lives in Redis: the token check and the access in one Lua call.

```
import redis
from fencedlease.redis_fencing import RedisFencedResource

profile = RedisFencedResource(redis.Redis(), "profile:42")
profile.hset({"plan": "pro"}, lease)          # raises StaleTokenError if lease is stale
fields = profile.hgetall(lease)               # a fenced read: moves the fence too
```

Layout: the data is at ``<prefix>:{<name>}:resource`` (a string or a hash, as you use it) and the
fence state at ``<prefix>:{<name>}:resource:fence`` (a hash ``{token, fp, key}``: the largest
accepted token as a decimal string, the fingerprint of the lease that presented it, and the key of
the leases that fence the resource; no TTL, never deleted by the library).
Both share a Redis Cluster hash slot, and neither can be a lease's key (see
`fencedlease._core.protocol` for the whole layout and how names are escaped).

The rule is the one of `fencedlease._core.fencing.decide`, transcribed once in
``scripts/fenced_check.lua``, which compares tokens exactly as decimal strings (Lua's numbers are
doubles); each ``scripts/fenced_<op>.lua`` adds one access to it. Scripts run as the lease
scripts do (`fencedlease._redis.scripts.run_script`: EVALSHA, one EVAL after ``NOSCRIPT``),
and every ``redis.RedisError`` reaches the caller as [`BackendError`][fencedlease.BackendError] with
the original in ``__cause__``, classified and with an ACL refusal named
(`fencedlease._redis.errors`).

If the fence state lives on a Redis that loses writes (a failover, a restart without persistence),
it is rolled back with them; fence data in the store that holds it, and see ``docs/fencing.md``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final, TypeVar

import redis

from fencedlease._core.errors import BackendError, ValidationError
from fencedlease._core.fenced_resource import NamedFence
from fencedlease._core.fencing import RefusalReason, stale_token_error
from fencedlease._core.fencing_access import TokenOrLease, coerce_access
from fencedlease._core.validate import check_prefix

from ._redis.errors import backend_errors
from ._redis.keys import resource_keys
from ._redis.replies import text
from ._redis.scripts import Script
from ._sync.scripts import run_script

__all__ = ["DEFAULT_PREFIX", "RedisFencedResource"]

DEFAULT_PREFIX: Final = "fencedlease:fenced"

_T = TypeVar("_T", int, str)

_REASONS: Final[dict[str, RefusalReason]] = {
    "older": "older",
    "strict": "strict",
    "duplicate": "duplicate",
    "key": "key",
}


_ACCEPT: Final = Script.load("fenced_accept", "fenced_check", "fenced_accept")
_SET: Final = Script.load("fenced_set", "fenced_check", "fenced_set")
_HSET: Final = Script.load("fenced_hset", "fenced_check", "fenced_hset")
_GET: Final = Script.load("fenced_get", "fenced_check", "fenced_get")
_HGETALL: Final = Script.load("fenced_hgetall", "fenced_check", "fenced_hgetall")


def _payload(value: object, argument: str, what: str) -> str | bytes | int | float:
    """``value`` if Redis can take it as sent: ``str`` (encodable as UTF-8), ``bytes``, ``int``
    (not ``bool``) or ``float``; [`ValidationError`][fencedlease.ValidationError] naming
    ``argument`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, str | bytes | int | float):
        raise ValidationError(
            argument, f"{what} must be str, bytes, int or float, not {type(value).__name__}"
        )
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise ValidationError(argument, f"{what} must be encodable as UTF-8") from None
    return value


class RedisFencedResource(NamedFence):
    """A named resource in Redis, fenced: every access checks the token in the same Lua call.

    ``RedisFencedResource(client, name, *, strict=False, prefix="fencedlease:fenced")``; ``client``
    is a sync ``redis.Redis`` or ``redis.cluster.RedisCluster`` (``decode_responses`` either way:
    values come back as your client returns them; an asyncio client is refused). ``name`` is any
    non-empty ``str``. The rule is [`fencedlease.FencedResource`][]'s: accepted only if the token
    (1..2**63 - 1, compared exactly) is at least the largest accepted (``strict``: greater), not the
    last token presented by a different lease, and, for a lease, only if its counter (its
    ``fencing_scope``, ``"<prefix>:{<escaped key>}:fence"``) is the one the fence state records
    (the first accepted lease's; the migration of a record holding a bare key is
    `fencedlease._core.fencing`'s). Reads move the fence too (Kleppmann 2016;
    ``docs/fencing.md``).

    Every method raises [`StaleTokenError`][fencedlease.StaleTokenError] when refused (nothing
    written, nothing read), its subclass
    [`LeaseKeyMismatchError`][fencedlease.LeaseKeyMismatchError] for a lease of another counter,
    [`ValidationError`][fencedlease.ValidationError] for bad arguments (nothing sent),
    [`BackendError`][fencedlease.BackendError] when Redis fails.

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
        if not isinstance(client, redis.Redis | redis.cluster.RedisCluster):
            raise ValidationError(
                "client",
                "client must be a sync redis.Redis or redis.cluster.RedisCluster, not "
                f"{type(client).__module__}.{type(client).__qualname__}",
            )
        super().__init__(name, strict=strict)
        self._client = client
        self._fence_key, self._data_key = resource_keys(check_prefix(prefix), name)

    @property
    def data_key(self) -> str:
        """The Redis key holding the data: ``<prefix>:{<escaped name>}:resource``."""
        return self._data_key

    @property
    def fence_key(self) -> str:
        """The Redis key holding the fence state: ``<prefix>:{<escaped name>}:resource:fence``."""
        return self._fence_key

    @property
    def last_token(self) -> int | None:
        """The largest accepted token (one round trip), or ``None`` before the first access.

        Raises [`BackendError`][fencedlease.BackendError] when Redis fails or the fence state holds
        no integer.
        """
        return self._fence_field("token", int)

    @property
    def lease_key(self) -> str | None:
        """The counter of the leases that fence this resource, as recorded by the first lease
        accepted: its ``fencing_scope`` (``"<prefix>:{<escaped key>}:fence"``), or a bare key
        recorded by an earlier version or a lease without a scope (one round trip); ``None`` while
        only bare ``int`` tokens (or nothing) were accepted.

        Raises [`BackendError`][fencedlease.BackendError] when Redis fails.
        """
        return self._fence_field("key", str) or None

    def _fence_field(self, field: str, convert: type[_T]) -> _T | None:
        with backend_errors(f"reading the fence of {self._name!r}"):
            raw = self._client.hget(self._fence_key, field)
        if raw is None:
            return None
        try:
            return convert(text(raw))
        except ValueError as exc:
            raise BackendError(f"the fence of {self._name!r} holds {field} {raw!r}") from exc

    def accept(self, token_or_lease: TokenOrLease) -> int:
        """Check ``token_or_lease`` and move the fence, touching no data; return the token.

        Raises [`StaleTokenError`][fencedlease.StaleTokenError],
        [`ValidationError`][fencedlease.ValidationError],
        [`BackendError`][fencedlease.BackendError].
        """
        token, _ = self._run(_ACCEPT, token_or_lease, ())
        return token

    def set(self, value: str | bytes | int | float, token_or_lease: TokenOrLease) -> None:
        """Fenced ``SET <data_key> value``: written only if the token is accepted, in the same step.

        Raises [`StaleTokenError`][fencedlease.StaleTokenError],
        [`ValidationError`][fencedlease.ValidationError],
        [`BackendError`][fencedlease.BackendError].
        """
        self._run(_SET, token_or_lease, (_payload(value, "value", "value"),))

    def hset(
        self, mapping: Mapping[str, str | bytes | int | float], token_or_lease: TokenOrLease
    ) -> int:
        """Fenced ``HSET <data_key> field value ...``; return how many fields were new.

        ``mapping`` must hold at least one field. Raises
        [`StaleTokenError`][fencedlease.StaleTokenError],
        [`ValidationError`][fencedlease.ValidationError],
        [`BackendError`][fencedlease.BackendError].
        """
        if not isinstance(mapping, Mapping) or not mapping:
            raise ValidationError(
                "mapping", "mapping must be a non-empty mapping of field to value"
            )
        args: list[str | bytes | int | float] = []
        for field, value in mapping.items():
            if not isinstance(field, str | bytes):
                raise ValidationError("mapping", "mapping fields must be str or bytes")
            args.append(_payload(field, "mapping", "a mapping field"))
            args.append(_payload(value, "mapping", f"the value of field {field!r}"))
        _, reply = self._run(_HSET, token_or_lease, args)
        return int(reply[1])

    def get(self, token_or_lease: TokenOrLease) -> Any:
        """Fenced read: check the token, move the fence, ``GET <data_key>``; return the value or
        ``None``.

        The value is ``str`` or ``bytes`` as the client's ``decode_responses`` says. Raises
        [`StaleTokenError`][fencedlease.StaleTokenError] (nothing read),
        [`ValidationError`][fencedlease.ValidationError],
        [`BackendError`][fencedlease.BackendError].
        """
        _, reply = self._run(_GET, token_or_lease, ())
        return reply[1] if len(reply) > 1 else None

    def hgetall(self, token_or_lease: TokenOrLease) -> dict[Any, Any]:
        """Fenced read: check the token, move the fence, ``HGETALL <data_key>``; return a ``dict``.

        Empty when the key is missing. Keys and values are ``str`` or ``bytes`` as the client's
        ``decode_responses`` says. Raises [`StaleTokenError`][fencedlease.StaleTokenError] (nothing
        read), [`ValidationError`][fencedlease.ValidationError],
        [`BackendError`][fencedlease.BackendError].
        """
        _, reply = self._run(_HGETALL, token_or_lease, ())
        flat = reply[1] if len(reply) > 1 else []
        return dict(zip(flat[0::2], flat[1::2], strict=True))

    def _run(
        self,
        script: Script,
        token_or_lease: TokenOrLease,
        payload: Sequence[str | bytes | int | float],
    ) -> tuple[int, list[Any]]:
        access = coerce_access(token_or_lease)
        args = (
            str(access.token),  # exact: the scripts compare decimal strings
            access.fingerprint or "",
            "1" if self._strict else "0",
            access.lease_key or "",
            access.legacy_key or "",
            *payload,
        )
        keys = (self._fence_key, self._data_key)
        with backend_errors(f"{script.name} on {self._name!r}"):
            reply = run_script(self._client, script, keys, args)
        if not isinstance(reply, list) or not reply:
            raise BackendError(f"{script.name} on {self._name!r} replied {reply!r}")
        if int(reply[0]) == 1:
            return access.token, reply
        last_token = int(text(reply[1]))
        reason = _REASONS.get(text(reply[2]), "older")
        raise stale_token_error(
            self._name,
            access.token,
            last_token,
            reason,
            lease_key=text(reply[3]) if len(reply) > 3 else None,
            presented_key=access.lease_key,
        )

    def __repr__(self) -> str:
        return f"RedisFencedResource({self._name!r}, strict={self._strict})"
