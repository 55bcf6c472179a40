"""Toxiproxy's HTTP routes, on the loop thread: request in, (status, body) out.

Routes, methods and status codes follow the real server's ``api.go``: 201 on proxy create and
populate, 200 on toxic create, 204 on deletes and reset, 404 for unknown names or paths, 405 for a
known path with another method, 409 for a name taken, 400 for a bad body, 403 for browsers.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, Final
from urllib.parse import unquote, urlsplit

import attrs

from ._model import (
    ERR_PROXY_EXISTS,
    ERR_PROXY_NOT_FOUND,
    ERR_TOXIC_NOT_FOUND,
    VERSION,
    ApiError,
    ProxyInput,
    parse_populate,
    parse_proxy_create,
    parse_proxy_update,
    parse_toxic_create,
    parse_toxic_update,
    toxic_json,
)
from ._proxy import Proxy, ProxyStartError, resolve_tcp_address

__all__ = ["Api", "Response"]

_JSON: Final = "application/json"
_TEXT: Final = "text/plain; charset=utf-8"


@attrs.frozen
class Response:
    """An HTTP reply: status code, body bytes and content type (None when there is no body)."""

    status: int
    body: bytes = b""
    content_type: str | None = None


def _json(value: Any, status: int = 200) -> Response:
    # Go's json.Marshal is compact: no spaces after separators.
    return Response(status, json.dumps(value, separators=(",", ":")).encode(), _JSON)


def _error(error: ApiError) -> Response:
    # Go's http.Error sets text/plain even though the body is JSON; we answer the same.
    return Response(error.status, error.body(), _TEXT)


def proxy_json(proxy: Proxy) -> dict[str, Any]:
    """The real server's proxy shape: ``{"name", "listen", "upstream", "enabled", "toxics"}``."""
    return {
        "name": proxy.name,
        "listen": proxy.listen,
        "upstream": proxy.upstream,
        "enabled": proxy.enabled,
        "toxics": [toxic_json(t) for t in proxy.toxics.all()],
    }


class Api:
    """The proxies of one server and the handlers of every route."""

    def __init__(self) -> None:
        self.proxies: dict[str, Proxy] = {}
        # One request changes state at a time, as the real server's collection locks do.
        self._lock = asyncio.Lock()

    async def handle(self, method: str, target: str, body: bytes, user_agent: str) -> Response:
        """Answer one request; ``target`` is the request line's path (query string ignored)."""
        if user_agent.startswith("Mozilla/"):
            return Response(403, b"User agent not allowed\n", _TEXT)
        parts = [unquote(p) for p in urlsplit(target).path.split("/")[1:]]
        route = self._route(parts)
        if route is None:
            return Response(404, b"404 page not found\n", _TEXT)
        handlers, args = route
        handler = handlers.get(method)
        if handler is None:
            return Response(405)
        try:
            async with self._lock:
                return await handler(body, *args)  # type: ignore[no-any-return]
        except ApiError as error:
            return _error(error)

    def _route(self, parts: list[str]) -> tuple[dict[str, Any], tuple[str, ...]] | None:
        if any(not p for p in parts):
            return None
        match parts:
            case ["version"]:
                return {"GET": self._version}, ()
            case ["reset"]:
                return {"POST": self._reset}, ()
            case ["populate"]:
                return {"POST": self._populate}, ()
            case ["proxies"]:
                return {"GET": self._proxy_index, "POST": self._proxy_create}, ()
            case ["proxies", proxy]:
                update = self._proxy_update
                routes = {"GET": self._proxy_show, "POST": update, "PATCH": update}
                return {**routes, "DELETE": self._proxy_delete}, (proxy,)
            case ["proxies", proxy, "toxics"]:
                return {"GET": self._toxic_index, "POST": self._toxic_create}, (proxy,)
            case ["proxies", proxy, "toxics", toxic]:
                toxic_update = self._toxic_update
                toxic_routes = {"GET": self._toxic_show, "POST": toxic_update}
                toxic_routes |= {"PATCH": toxic_update, "DELETE": self._toxic_delete}
                return toxic_routes, (proxy, toxic)
        return None

    def _get(self, name: str) -> Proxy:
        proxy = self.proxies.get(name)
        if proxy is None:
            raise ERR_PROXY_NOT_FOUND
        return proxy

    async def close(self) -> None:
        """Stop every proxy and forget them."""
        async with self._lock:
            await asyncio.gather(*(p.stop() for p in self.proxies.values()))
            self.proxies.clear()

    async def _version(self, body: bytes) -> Response:
        return Response(200, f'{{"version": "{VERSION}"}}\n'.encode(), f"{_JSON};charset=utf-8")

    async def _reset(self, body: bytes) -> Response:
        for proxy in list(self.proxies.values()):
            if not proxy.enabled:
                await _start(proxy)
            await proxy.toxics.reset()
        return Response(204)

    async def _proxy_index(self, body: bytes) -> Response:
        return _json({name: proxy_json(self.proxies[name]) for name in sorted(self.proxies)})

    async def _proxy_create(self, body: bytes) -> Response:
        spec = parse_proxy_create(body)
        if spec.name in self.proxies:
            raise ERR_PROXY_EXISTS
        proxy = Proxy(spec.name, spec.listen or "127.0.0.1:0", spec.upstream)
        if spec.enabled:
            await _start(proxy)
        self.proxies[proxy.name] = proxy
        return _json(proxy_json(proxy), 201)

    async def _populate(self, body: bytes) -> Response:
        specs = parse_populate(body)
        done: list[Proxy] = []
        error: ApiError | None = None
        for spec in specs:
            # In order, as the real server's AddOrReplace: an entry naming a proxy that exists
            # (made earlier in the same request too) keeps it when listen (as resolved) and
            # upstream are the same, and otherwise stops it and takes its place.
            existing = self.proxies.get(spec.name)
            if existing is not None:
                try:
                    listen = await resolve_tcp_address(spec.listen)
                except ValueError as exc:
                    error = ApiError(str(exc), 500)
                    break
                if existing.listen == listen and existing.upstream == spec.upstream:
                    done.append(existing)
                    continue
                await existing.stop()  # stays listed, stopped, if the new one cannot start
            proxy = Proxy(spec.name, spec.listen or "127.0.0.1:0", spec.upstream)
            if spec.enabled:
                try:
                    await _start(proxy)
                except ApiError as exc:
                    error = exc
                    break
            self.proxies[proxy.name] = proxy
            done.append(proxy)
        listed = [proxy_json(p) for p in done] or None  # Go marshals an empty result as null
        if error is None:
            return _json({"proxies": listed}, 201)
        reply = {"error": error.message, "status": error.status, "proxies": listed}
        return _json(reply, error.status)

    async def _proxy_show(self, body: bytes, name: str) -> Response:
        return _json(proxy_json(self._get(name)))

    async def _proxy_update(self, body: bytes, name: str) -> Response:
        proxy = self._get(name)
        current = ProxyInput(proxy.name, proxy.listen, proxy.upstream, proxy.enabled)
        wanted = parse_proxy_update(body, current)
        try:
            # Resolved first, as the real server's Proxy.Differs: a listen that cannot be
            # resolved is a 500 that leaves the proxy as it was, listening and serving.
            listen = await resolve_tcp_address(wanted.listen)
        except ValueError as exc:
            raise ApiError(str(exc), 500) from exc
        if listen != proxy.listen or wanted.upstream != proxy.upstream:
            await proxy.stop()
            proxy.listen = wanted.listen or "127.0.0.1:0"
            proxy.upstream = wanted.upstream
        if wanted.enabled and not proxy.enabled:
            await _start(proxy)
        elif not wanted.enabled:
            await proxy.stop()
        return _json(proxy_json(proxy))

    async def _proxy_delete(self, body: bytes, name: str) -> Response:
        proxy = self._get(name)
        await proxy.stop()
        del self.proxies[name]
        return Response(204)

    async def _toxic_index(self, body: bytes, name: str) -> Response:
        return _json([toxic_json(t) for t in self._get(name).toxics.all()])

    async def _toxic_create(self, body: bytes, name: str) -> Response:
        proxy = self._get(name)
        taken = {t.name: t for t in proxy.toxics.all()}
        toxic = parse_toxic_create(body, taken)
        await proxy.toxics.add(toxic)
        return _json(toxic_json(toxic))

    async def _toxic_show(self, body: bytes, name: str, toxic_name: str) -> Response:
        toxic = self._get(name).toxics.get(toxic_name)
        if toxic is None:
            raise ERR_TOXIC_NOT_FOUND
        return _json(toxic_json(toxic))

    async def _toxic_update(self, body: bytes, name: str, toxic_name: str) -> Response:
        proxy = self._get(name)
        current = proxy.toxics.get(toxic_name)
        if current is None:
            raise ERR_TOXIC_NOT_FOUND
        toxic = parse_toxic_update(body, current)
        await proxy.toxics.update(toxic)
        return _json(toxic_json(toxic))

    async def _toxic_delete(self, body: bytes, name: str, toxic_name: str) -> Response:
        proxy = self._get(name)
        if proxy.toxics.get(toxic_name) is None:
            raise ERR_TOXIC_NOT_FOUND
        await proxy.toxics.remove(toxic_name)
        return Response(204)


async def _start(proxy: Proxy) -> None:
    try:
        await proxy.start()
    except ProxyStartError as exc:
        # Not one of the real server's typed errors, so it answers 500 with the listen error.
        raise ApiError(str(exc), 500) from exc
