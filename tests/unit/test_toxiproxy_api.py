"""The embedded Toxiproxy's pure parts: parsing, defaults, shapes, routes and status codes."""

from __future__ import annotations

import asyncio
import json

import pytest

from fencedlease.toxiproxy_server._api import Api, Response
from fencedlease.toxiproxy_server._model import (
    ApiError,
    ProxyInput,
    ToxicSpec,
    decode_json,
    format_address,
    parse_populate,
    parse_proxy_create,
    parse_proxy_update,
    parse_toxic_create,
    parse_toxic_update,
    split_address,
    toxic_json,
)


def handle(method: str, path: str, body: bytes = b"", agent: str = "test") -> Response:
    async def run() -> Response:
        return await Api().handle(method, path, body, agent)

    return asyncio.run(run())


def test_toxic_defaults_follow_the_real_server() -> None:
    """Only a type given: name <type>_<stream>, downstream, toxicity 1.0, attributes zeroed."""
    toxic = parse_toxic_create(b'{"type": "latency"}', {})
    assert toxic == ToxicSpec(
        "latency_downstream",
        "latency",
        "downstream",
        1.0,
        {
            "latency": 0,
            "jitter": 0,
        },
    )


def test_toxic_json_has_the_real_field_order_and_integral_toxicity() -> None:
    """A toxic renders as attributes, name, type, stream, toxicity, with 1.0 written as 1."""
    toxic = ToxicSpec("t", "bandwidth", "upstream", 1.0, {"rate": 5})
    rendered = json.dumps(toxic_json(toxic), separators=(",", ":"))
    expected = '{"attributes":{"rate":5},"name":"t","type":"bandwidth","stream":"upstream",'
    assert rendered == expected + '"toxicity":1}'


def test_unknown_attributes_are_ignored_and_known_ones_must_be_integers() -> None:
    """Unknown attribute keys are dropped; a float, string or bool for an int64 is a 400."""
    toxic = parse_toxic_create(b'{"type": "timeout", "attributes": {"timeout": 7, "x": 1}}', {})
    assert toxic.attributes == {"timeout": 7}
    for bad in (b"1.5", b'"1"', b"true"):
        body = b'{"type": "timeout", "attributes": {"timeout": ' + bad + b"}}"
        with pytest.raises(ApiError) as caught:
            parse_toxic_create(body, {})
        assert caught.value.status == 400


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        (b"", 400, "bad request body: EOF"),
        (
            b'{"type": "latency", "stream": "sideways"}',
            400,
            "stream was invalid, can be either upstream or downstream",
        ),
        (b'{"type": "slicer"}', 400, "invalid toxic type"),
        (b'{"type": "latency"}', 409, "toxic already exists"),
    ],
)
def test_toxic_create_errors(body: bytes, status: int, message: str) -> None:
    """Bad body, bad stream and unknown type are 400; a taken name is 409."""
    with pytest.raises(ApiError) as caught:
        parse_toxic_create(body, {"latency_downstream": object()})
    assert (caught.value.status, caught.value.message) == (status, message)


def test_toxic_update_merges_attributes_and_keeps_toxicity() -> None:
    """An update replaces only the attributes it names and keeps the toxicity unless given."""
    current = ToxicSpec("l", "latency", "downstream", 0.5, {"latency": 10, "jitter": 3})
    updated = parse_toxic_update(b'{"attributes": {"latency": 99}}', current)
    assert (updated.attributes, updated.toxicity) == ({"latency": 99, "jitter": 3}, 0.5)


def test_proxy_create_defaults_to_enabled_and_requires_name_and_upstream() -> None:
    """enabled defaults to true; a missing name or upstream is a 400 naming the field."""
    parsed = parse_proxy_create(b'{"name": "a", "upstream": "h:1"}')
    assert parsed == ProxyInput("a", "", "h:1", True)
    with pytest.raises(ApiError, match="missing required field: upstream"):
        parse_proxy_create(b'{"name": "a"}')


def test_proxy_update_keeps_unnamed_fields_and_the_name() -> None:
    """An update body with only enabled keeps listen, upstream and the proxy's own name."""
    current = ProxyInput("a", "127.0.0.1:5", "h:1", True)
    updated = parse_proxy_update(b'{"enabled": false, "name": "other"}', current)
    assert updated == ProxyInput("a", "127.0.0.1:5", "h:1", False)


def test_populate_names_the_position_of_a_bad_proxy() -> None:
    """A populate entry without upstream is a 400 naming its 1-based position."""
    with pytest.raises(ApiError) as caught:
        parse_populate(b'[{"name": "a", "upstream": "h:1"}, {"name": "b"}]')
    assert caught.value.message == "missing required field: upstream at proxy 2"


def test_decode_json_reads_the_first_value_like_go() -> None:
    """Leading whitespace is skipped and trailing bytes after the first value are ignored."""
    assert decode_json(b'  {"a": 1} trailing') == {"a": 1}


def test_addresses_split_and_format_like_go() -> None:
    """host:port and [v6]:port split; IPv6 hosts format with brackets; no port is an error."""
    assert split_address("127.0.0.1:0") == ("127.0.0.1", 0)
    assert split_address("[::1]:80") == ("::1", 80)
    assert format_address("::1", 80) == "[::1]:80"
    with pytest.raises(ValueError, match="missing port"):
        split_address("localhost")


def test_routes_answer_404_405_403_like_gorilla_mux() -> None:
    """Unknown path 404 (text), known path with another method 405, a browser 403."""
    assert handle("GET", "/nope") == Response(
        404, b"404 page not found\n", "text/plain; charset=utf-8"
    )
    assert handle("PUT", "/proxies").status == 405
    assert handle("GET", "/version", agent="Mozilla/5.0").status == 403


def test_empty_state_routes() -> None:
    """With no proxies: index is {}, unknown proxy 404 with the JSON error, reset 204."""
    assert handle("GET", "/proxies").body == b"{}"
    missing = handle("GET", "/proxies/x/toxics")
    assert (missing.status, json.loads(missing.body)) == (
        404,
        {"error": "proxy not found", "status": 404},
    )
    assert handle("POST", "/reset") == Response(204)
    version = handle("GET", "/version")
    assert version.status == 200
    assert json.loads(version.body)["version"].startswith("2.")
