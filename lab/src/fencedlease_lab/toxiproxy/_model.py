"""Pure parts of the Toxiproxy API: request parsing, validation, reply shapes, addresses.

No I/O here, so the unit tests can pin every shape and status code without a socket. The shapes,
defaults, field types and error texts follow Shopify/toxiproxy v2 (``api.go``,
``toxic_collection.go``, ``proxy_collection.go``, ``toxics/*.go``).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Mapping
from typing import Any, Final

import attrs

__all__ = [
    "TOXIC_ATTRIBUTES",
    "VERSION",
    "ApiError",
    "ProxyInput",
    "ToxicSpec",
    "decode_json",
    "format_address",
    "parse_populate",
    "parse_proxy_create",
    "parse_proxy_update",
    "parse_toxic_create",
    "parse_toxic_update",
    "slice_bounds",
    "split_address",
    "toxic_json",
]

#: What ``GET /version`` reports: the real API level we follow, marked as this embedded server.
VERSION: Final = "2.12.0+fencedlease-embedded"

#: Toxic type -> its integer attributes, in the real server's field order. Units: ``latency``,
#: ``jitter``, ``timeout`` and ``slow_close``'s ``delay`` in milliseconds; ``slicer``'s ``delay``
#: in microseconds; ``rate`` in KB/s (1 KB = 1000 bytes); ``bytes``, ``average_size`` and
#: ``size_variation`` in bytes.
TOXIC_ATTRIBUTES: Final[Mapping[str, tuple[str, ...]]] = {
    "noop": (),
    "latency": ("latency", "jitter"),
    "timeout": ("timeout",),
    "reset_peer": ("timeout",),
    "bandwidth": ("rate",),
    "slow_close": ("delay",),
    "limit_data": ("bytes",),
    "slicer": ("average_size", "size_variation", "delay"),
}

# The Go type of each toxic's attributes, as its decode errors name it: int64 but for slicer's.
_GO_ATTRIBUTE_TYPE: Final[Mapping[str, str]] = {"slicer": "int"}

DIRECTIONS: Final = ("upstream", "downstream")


@attrs.frozen
class ApiError(Exception):
    """An API failure, rendered as the real server does: ``{"error": message, "status": code}``."""

    message: str
    status: int

    def body(self) -> bytes:
        """The JSON body, compact, with the trailing newline Go's ``http.Error`` adds."""
        return json.dumps({"error": self.message, "status": self.status}).encode() + b"\n"


def _bad_body(detail: str) -> ApiError:
    return ApiError(f"bad request body: {detail}", 400)


def _missing(field: str) -> ApiError:
    return ApiError(f"missing required field: {field}", 400)


ERR_PROXY_NOT_FOUND: Final = ApiError("proxy not found", 404)
ERR_PROXY_EXISTS: Final = ApiError("proxy already exists", 409)
ERR_INVALID_STREAM: Final = ApiError(
    "stream was invalid, can be either upstream or downstream", 400
)
ERR_INVALID_TOXIC_TYPE: Final = ApiError("invalid toxic type", 400)
ERR_TOXIC_EXISTS: Final = ApiError("toxic already exists", 409)
ERR_TOXIC_NOT_FOUND: Final = ApiError("toxic not found", 404)


@attrs.frozen
class ToxicSpec:
    """One toxic as the API shows it.

    ``stream`` is ``"upstream"`` (client to server) or ``"downstream"`` (server to client), kept
    as the caller spelled it; ``toxicity`` is the probability in [0, 1] that the toxic acts on a
    given connection; ``attributes`` maps every attribute of ``type`` to an integer.
    """

    name: str
    type: str
    stream: str
    toxicity: float
    attributes: Mapping[str, int]

    @property
    def direction(self) -> str:
        """``"upstream"`` or ``"downstream"``, lower case whatever the caller sent."""
        return self.stream.lower()


@attrs.frozen
class ProxyInput:
    """A proxy as a request describes it (``listen`` may still say port 0)."""

    name: str
    listen: str
    upstream: str
    enabled: bool


def decode_json(body: bytes) -> Any:
    """The first JSON value in ``body``, as Go's ``json.Decoder.Decode`` reads it.

    Raises `ApiError` 400 ``bad request body: ...`` for an empty or malformed body.
    """
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _bad_body(f"invalid UTF-8: {exc}") from exc
    stripped = text.lstrip(" \t\r\n")
    if not stripped:
        raise _bad_body("EOF")
    try:
        value, _ = json.JSONDecoder().raw_decode(stripped)
    except json.JSONDecodeError as exc:
        raise _bad_body(str(exc)) from exc
    return value


def _object(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _bad_body(f"json: cannot unmarshal {_json_kind(value)} into Go value of type {what}")
    return value


def _json_kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if value is None:
        return "null"
    return "object"


def _field(obj: Mapping[str, Any], key: str, kind: type, go_type: str, default: Any) -> Any:
    """``obj[key]`` checked against Go's decoding rules; JSON null or absence keeps ``default``."""
    value = obj.get(key)
    if value is None:
        return default
    ok = isinstance(value, kind) and not (kind is not bool and isinstance(value, bool))
    if kind is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not ok:
        raise _bad_body(
            f"json: cannot unmarshal {_json_kind(value)} into Go struct field .{key} "
            f"of type {go_type}"
        )
    return float(value) if kind is float else value


def _proxy_fields(obj: Mapping[str, Any], base: ProxyInput) -> ProxyInput:
    return ProxyInput(
        name=_field(obj, "name", str, "string", base.name),
        listen=_field(obj, "listen", str, "string", base.listen),
        upstream=_field(obj, "upstream", str, "string", base.upstream),
        enabled=_field(obj, "enabled", bool, "bool", base.enabled),
    )


def parse_proxy_create(body: bytes) -> ProxyInput:
    """Parse ``POST /proxies``: ``{"name", "upstream", "listen"?, "enabled"? = true}``.

    Raises `ApiError` 400 for a malformed body or a missing ``name``/``upstream``.
    """
    obj = _object(decode_json(body), "toxiproxy.Proxy")
    proxy = _proxy_fields(obj, ProxyInput(name="", listen="", upstream="", enabled=True))
    if not proxy.name:
        raise _missing("name")
    if not proxy.upstream:
        raise _missing("upstream")
    return proxy


def parse_proxy_update(body: bytes, current: ProxyInput) -> ProxyInput:
    """Parse ``POST``/``PATCH /proxies/{name}``: absent fields keep ``current``'s values.

    Raises `ApiError` 400 for a malformed body.
    """
    obj = _object(decode_json(body), "toxiproxy.Proxy")
    updated = _proxy_fields(obj, current)
    return attrs.evolve(updated, name=current.name)


def parse_populate(body: bytes) -> list[ProxyInput]:
    """Parse ``POST /populate``: a JSON array of proxies, ``enabled`` defaulting to true.

    Raises `ApiError` 400 for a malformed body or a proxy without ``name``/``upstream``
    (the message names the 1-based position, as the real server's does). A name may come more
    than once: the server applies the entries in order, so a later one replaces an earlier one.
    """
    items = decode_json(body)
    if not isinstance(items, list):
        raise _bad_body(
            f"json: cannot unmarshal {_json_kind(items)} into Go value of type []struct"
        )
    proxies: list[ProxyInput] = []
    for position, item in enumerate(items, start=1):
        obj = _object(item, "struct")
        proxy = _proxy_fields(obj, ProxyInput(name="", listen="", upstream="", enabled=True))
        if not proxy.name:
            raise _missing(f"name at proxy {position}")
        if not proxy.upstream:
            raise _missing(f"upstream at proxy {position}")
        proxies.append(proxy)
    return proxies


def _attributes(toxic_type: str, raw: Any, base: Mapping[str, int]) -> dict[str, int]:
    """Merge ``raw`` (a JSON object or null) onto ``base``; unknown keys are ignored, as in Go."""
    names = TOXIC_ATTRIBUTES[toxic_type]
    merged = {name: base.get(name, 0) for name in names}
    if raw is None:
        return merged
    obj = _object(raw, f"toxics.{toxic_type}")
    for name in names:
        value = obj.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            # Go decodes these into int64: 1.5, "1" and true are all refused.
            raise _bad_body(
                f"json: cannot unmarshal {_json_kind(value)} into Go struct field "
                f".attributes.{name} of type {_GO_ATTRIBUTE_TYPE.get(toxic_type, 'int64')}"
            )
        merged[name] = value
    return merged


def parse_toxic_create(body: bytes, taken: Mapping[str, object]) -> ToxicSpec:
    """Parse ``POST /proxies/{name}/toxics``.

    Body ``{"type", "name"? = "<type>_<stream>", "stream"? = "downstream", "toxicity"? = 1.0,
    "attributes"? = {}}``; ``taken`` holds the proxy's toxic names. Raises `ApiError`
    400 (bad body, bad stream, unknown type) or 409 (name taken), in the real server's order.
    """
    obj = _object(decode_json(body), "toxics.ToxicWrapper")
    name: str = _field(obj, "name", str, "string", "")
    toxic_type: str = _field(obj, "type", str, "string", "")
    stream: str = _field(obj, "stream", str, "string", "downstream")
    toxicity: float = _field(obj, "toxicity", float, "float32", 1.0)
    raw_attributes = obj.get("attributes")
    if raw_attributes is not None and not isinstance(raw_attributes, dict):
        raise _bad_body(f"json: cannot unmarshal {_json_kind(raw_attributes)} into attributes")
    if stream.lower() not in DIRECTIONS:
        raise ERR_INVALID_STREAM
    if not name:
        name = f"{toxic_type}_{stream}"
    if toxic_type not in TOXIC_ATTRIBUTES:
        raise ERR_INVALID_TOXIC_TYPE
    if name in taken:
        raise ERR_TOXIC_EXISTS
    attributes = _attributes(toxic_type, raw_attributes, {})
    return ToxicSpec(name, toxic_type, stream, toxicity, attributes)


def parse_toxic_update(body: bytes, current: ToxicSpec) -> ToxicSpec:
    """Parse ``POST``/``PATCH /proxies/{name}/toxics/{toxic}``: ``{"attributes"?, "toxicity"?}``.

    Given attributes replace only the named ones. Raises `ApiError` 400 for a bad body.
    """
    obj = _object(decode_json(body), "struct")
    toxicity: float = _field(obj, "toxicity", float, "float32", current.toxicity)
    attributes = _attributes(current.type, obj.get("attributes"), current.attributes)
    return attrs.evolve(current, toxicity=toxicity, attributes=attributes)


def slice_bounds(
    size: int,
    average_size: int,
    size_variation: int,
    randrange: Callable[[int], int] = random.randrange,
) -> list[tuple[int, int]]:
    """Where the ``slicer`` toxic cuts a chunk of ``size`` bytes: ``[(start, end), ...]``.

    The real server's ``SlicerToxic.chunk`` (``toxics/slicer.go``): a span longer than
    ``average_size + size_variation`` is cut about in half, the cut moved by a uniform draw in
    ``[-size_variation, size_variation)`` (``randrange(n)`` draws in ``[0, n)``, as Go's
    ``rand.Intn``), and both halves are cut again; shorter spans are kept whole. The slices are
    contiguous, in order, and cover ``[0, size)``. Where the real server would fail (an
    ``average_size + size_variation`` below 1 recurses forever there, a ``size_variation``
    above ``average_size`` can cut outside the span) a span of one byte is kept whole and a cut
    is kept inside its span.
    """
    bounds: list[tuple[int, int]] = []

    def cut(start: int, end: int) -> None:
        if (end - start) - average_size <= size_variation or end - start <= 1:
            bounds.append((start, end))
            return
        middle = start + (end - start) // 2
        if size_variation > 0:
            middle += randrange(size_variation * 2) - size_variation
        middle = min(max(middle, start + 1), end - 1)
        cut(start, middle)
        cut(middle, end)

    cut(0, size)
    return bounds


def _number(value: float) -> float | int:
    # Go marshals float32(1) as 1, not 1.0; keep the same text.
    return int(value) if value.is_integer() else value


def toxic_json(toxic: ToxicSpec) -> dict[str, Any]:
    """The real server's toxic shape: ``{"attributes", "name", "type", "stream", "toxicity"}``."""
    return {
        "attributes": dict(toxic.attributes),
        "name": toxic.name,
        "type": toxic.type,
        "stream": toxic.stream,
        "toxicity": _number(toxic.toxicity),
    }


def split_address(address: str) -> tuple[str, int]:
    """``"host:port"`` or ``"[v6]:port"`` -> ``(host, port)``; the host may be empty.

    Raises ``ValueError`` with Go's wording when the port is missing or not a number.
    """
    host, sep, port_text = address.rpartition(":")
    if not sep:
        raise ValueError(f"address {address}: missing port in address")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not port_text.isdigit() or int(port_text) > 65535:
        raise ValueError(f"address {address}: invalid port")
    return host, int(port_text)


def format_address(host: str, port: int) -> str:
    """``(host, port)`` -> ``"host:port"``, bracketing IPv6 hosts as Go's ``Addr().String()``."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
