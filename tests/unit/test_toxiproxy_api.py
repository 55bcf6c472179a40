"""The embedded Toxiproxy's pure parts: parsing, defaults, shapes, routes and status codes, and
single toxics driven through their queues (no sockets, no clock)."""

from __future__ import annotations

import asyncio
import json

import pytest

from fencedlease_lab.toxiproxy._api import Api, Response
from fencedlease_lab.toxiproxy._model import (
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
    slice_bounds,
    split_address,
    toxic_json,
)
from fencedlease_lab.toxiproxy._proxy import resolve_tcp_address
from fencedlease_lab.toxiproxy._toxics import Chunk, Queue, Stub


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
        (b'{"type": "slice"}', 400, "invalid toxic type"),
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


def test_slicer_attributes_default_to_zero_and_are_go_ints() -> None:
    """slicer has average_size, size_variation and delay (int, not int64, in the Go errors)."""
    toxic = parse_toxic_create(b'{"type": "slicer", "attributes": {"average_size": 8}}', {})
    assert (toxic.name, toxic.attributes) == (
        "slicer_downstream",
        {"average_size": 8, "size_variation": 0, "delay": 0},
    )
    with pytest.raises(ApiError) as caught:
        parse_toxic_create(b'{"type": "slicer", "attributes": {"delay": 1.5}}', {})
    assert caught.value.status == 400
    assert caught.value.message.endswith(".attributes.delay of type int")


def test_slice_bounds_halve_until_within_average_plus_variation() -> None:
    """Without variation the cuts are the real server's halvings: 100 bytes at average 10 come
    out as 6,6,6,7 / 6,6,6,7 / ... (each half of a half until at most 10 bytes)."""
    bounds = slice_bounds(100, 10, 0)
    sizes = [end - start for start, end in bounds]
    assert sizes == [6, 6, 6, 7, 6, 6, 6, 7, 6, 6, 6, 7, 6, 6, 6, 7]
    assert slice_bounds(40, 10, 0) == [(0, 10), (10, 20), (20, 30), (30, 40)]
    assert slice_bounds(10, 10, 0) == [(0, 10)]
    assert slice_bounds(0, 10, 0) == [(0, 0)]


@pytest.mark.parametrize(
    ("draw", "expected"),
    [
        ("low", [(0, 4), (4, 13), (13, 19), (19, 30)]),
        ("high", [(0, 9), (9, 16), (16, 24), (24, 30)]),
    ],
)
def test_slice_bounds_move_each_cut_by_the_variation_drawn(
    draw: str, expected: list[tuple[int, int]]
) -> None:
    """Each cut moves by randrange(2 * variation) - variation: the lowest draw moves it left by
    the variation (30 bytes, average 10, variation 2: first cut at 15 - 2 = 13), the highest
    right by variation - 1 (at 15 + 1 = 16); spans of at most 12 bytes are kept whole."""
    calls: list[int] = []

    def randrange(n: int) -> int:
        calls.append(n)
        return 0 if draw == "low" else n - 1

    assert slice_bounds(30, 10, 2, randrange) == expected
    assert calls == [4, 4, 4]


@pytest.mark.parametrize(("average", "variation"), [(0, 0), (-3, 0), (2, 9)])
def test_slice_bounds_terminate_where_the_real_server_would_fail(
    average: int, variation: int
) -> None:
    """An average of 0 (endless recursion in the real server) or a variation above the average
    (cuts outside the span there) still gives contiguous, non-empty slices covering the chunk."""
    bounds = slice_bounds(50, average, variation, lambda n: n - 1)
    assert bounds[0][0] == 0 and bounds[-1][1] == 50
    assert all(start < end for start, end in bounds)
    assert [s for s, _ in bounds[1:]] == [e for _, e in bounds[:-1]]


def test_populate_accepts_a_name_given_twice() -> None:
    """A repeated name is no error: the entries are applied in order, the later replacing."""
    parsed = parse_populate(
        b'[{"name": "a", "upstream": "h:1"}, {"name": "a", "upstream": "h:2", "enabled": false}]'
    )
    assert parsed == [ProxyInput("a", "", "h:1", True), ProxyInput("a", "", "h:2", False)]


@pytest.mark.parametrize(
    ("address", "resolved"),
    [
        ("", ":0"),
        (":8474", ":8474"),
        ("127.0.0.1:0", "127.0.0.1:0"),
        ("localhost:80", "127.0.0.1:80"),
        ("[::1]:80", "[::1]:80"),
        ("[0:0::1]:80", "[::1]:80"),
    ],
)
def test_listen_addresses_resolve_like_go(address: str, resolved: str) -> None:
    """Go's ResolveTCPAddr(...).String(): empty is :0, names become their IPv4 address, IPv6
    is bracketed and normalised."""
    assert asyncio.run(resolve_tcp_address(address)) == resolved


def test_an_unresolvable_listen_is_gos_error() -> None:
    """A listen without a port fails with Go's SplitHostPort wording."""
    with pytest.raises(ValueError, match=r"^address nonsense: missing port in address$"):
        asyncio.run(resolve_tcp_address("nonsense"))


def test_update_with_a_bad_listen_is_500_and_changes_nothing() -> None:
    """PATCH with a listen that does not resolve: 500 with the error body, proxy untouched."""

    async def run() -> tuple[Response, Response, Response]:
        api = Api()
        try:
            body = b'{"name": "p", "upstream": "127.0.0.1:9", "listen": "127.0.0.1:0"}'
            created = await api.handle("POST", "/proxies", body, "test")
            patched = await api.handle("PATCH", "/proxies/p", b'{"listen": "nonsense"}', "test")
            shown = await api.handle("GET", "/proxies/p", b"", "test")
            return created, patched, shown
        finally:
            await api.close()

    created, patched, shown = asyncio.run(run())
    assert (patched.status, json.loads(patched.body)) == (
        500,
        {"error": "address nonsense: missing port in address", "status": 500},
    )
    assert json.loads(shown.body) == json.loads(created.body)
    assert json.loads(shown.body)["enabled"] is True


class _Hooks:
    """A link's side of a stub: counts the bytes toxics drop."""

    def __init__(self) -> None:
        self.dropped = 0

    def discarded(self, size: int) -> None:
        self.dropped += size


def _stub(toxic: ToxicSpec | None) -> tuple[Stub, Queue, Queue, _Hooks]:
    source: Queue = asyncio.Queue()
    sink: Queue = asyncio.Queue()
    hooks = _Hooks()
    return Stub(source, sink, hooks, toxic), source, sink, hooks


def _drain(queue: Queue) -> list[Chunk | None]:
    items: list[Chunk | None] = []
    while not queue.empty():
        items.append(queue.get_nowait())
    return items


async def _settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


def test_toxicity_is_drawn_again_on_every_restart(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stub draws toxicity each time it starts (so on every interruption and restart), as the
    real ToxicStub.Run: draws 0.9, 0.1, 0.7 against toxicity 0.5 give off, on, off."""
    draws = iter([0.9, 0.1, 0.7])
    monkeypatch.setattr("fencedlease_lab.toxiproxy._toxics.random.random", lambda: next(draws))

    async def run() -> list[bool]:
        toxic = ToxicSpec("t", "latency", "downstream", 0.5, {"latency": 10_000, "jitter": 0})
        stub, _, _, _ = _stub(toxic)
        seen = []
        for _ in range(3):
            stub.start()
            await _settle()
            seen.append(stub.applies)
            assert await stub.interrupt() is True
        return seen

    assert asyncio.run(run()) == [False, True, False]


def test_slicer_pipe_emits_the_slices_in_order_and_ends_the_stream() -> None:
    """slicer average_size=10, no variation, no delay: a 40-byte chunk leaves as four 10-byte
    chunks with the original timestamp; end of stream is passed on."""

    async def run() -> list[Chunk | None]:
        toxic = ToxicSpec(
            "s", "slicer", "downstream", 1.0, {"average_size": 10, "size_variation": 0, "delay": 0}
        )
        stub, source, sink, _ = _stub(toxic)
        stub.start()
        source.put_nowait(Chunk(bytes(range(40)), 7.0))
        source.put_nowait(None)
        await _settle()
        return _drain(sink)

    out = asyncio.run(run())
    assert out[-1] is None
    chunks = [c for c in out if c is not None]
    assert [(c.data, c.timestamp) for c in chunks] == [
        (bytes(range(i, i + 10)), 7.0) for i in range(0, 40, 10)
    ]


def test_slicer_interrupted_mid_delay_passes_the_rest_whole() -> None:
    """Interrupted while waiting after its first slice, the slicer hands on the rest of the
    chunk as one chunk, so nothing is lost or reordered."""

    async def run() -> tuple[bool, list[Chunk | None]]:
        toxic = ToxicSpec(
            "s",
            "slicer",
            "downstream",
            1.0,
            {"average_size": 10, "size_variation": 0, "delay": 60_000_000},
        )
        stub, source, sink, _ = _stub(toxic)
        stub.start()
        source.put_nowait(Chunk(bytes(range(40)), 1.0))
        await _settle()
        resumed = await stub.interrupt()
        return resumed, _drain(sink)

    resumed, out = asyncio.run(run())
    assert resumed is True
    assert [c.data for c in out if c is not None] == [bytes(range(10)), bytes(range(10, 40))]
    assert None not in out


def test_reset_peer_cannot_be_interrupted_once_data_came() -> None:
    """reset_peer takes the first chunk, drops it and waits: an interruption waits for the end
    of that wait and finds the stream ended (False), as the real server's does; before any
    data, an interruption stops it at once (True)."""

    async def run() -> tuple[bool, bool, list[Chunk | None], int]:
        toxic = ToxicSpec("r", "reset_peer", "downstream", 1.0, {"timeout": 50})
        stub, source, sink, hooks = _stub(toxic)
        stub.start()
        await _settle()
        before = await stub.interrupt()
        stub.start()
        source.put_nowait(Chunk(b"dropped", 0.0))
        await _settle()
        assert stub.committed
        after = await stub.interrupt()
        return before, after, _drain(sink), hooks.dropped

    before, after, out, dropped = asyncio.run(run())
    assert (before, after, out, dropped) == (True, False, [None], len(b"dropped"))


def test_timeout_pipe_drops_data_and_honours_the_end_of_stream() -> None:
    """timeout (never firing here) drops every chunk, counting it, and passes the end on."""

    async def run() -> tuple[list[Chunk | None], int]:
        toxic = ToxicSpec("t", "timeout", "downstream", 1.0, {"timeout": 60_000})
        stub, source, sink, hooks = _stub(toxic)
        stub.start()
        source.put_nowait(Chunk(b"abc", 0.0))
        source.put_nowait(Chunk(b"de", 0.0))
        source.put_nowait(None)
        await _settle()
        return _drain(sink), hooks.dropped

    assert asyncio.run(run()) == ([None], 5)
