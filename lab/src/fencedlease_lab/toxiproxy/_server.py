"""``ToxiproxyServer``: the HTTP API on a thread, the proxies on an asyncio loop on another."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Final

from ._api import Api, Response

__all__ = ["ToxiproxyServer"]

# The real server answers 503 when a request takes longer than this (http.TimeoutHandler).
_REQUEST_TIMEOUT_S: Final = 25.0
#: How many times stopping cancels the tasks still running (each round may start new ones).
_CANCEL_ROUNDS: Final = 10


class _HttpServer(ThreadingHTTPServer):
    # Non-daemon request threads, so server_close() joins them and stop() leaves none behind.
    daemon_threads = False
    block_on_close = True

    def __init__(self, address: tuple[str, int], owner: ToxiproxyServer) -> None:
        self.owner = owner
        self.open_sockets: set[socket.socket] = set()
        self.open_lock = threading.Lock()
        super().__init__(address, _Handler)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as Go's server; every reply has a length
    server: _HttpServer

    def setup(self) -> None:
        super().setup()
        with self.server.open_lock:
            self.server.open_sockets.add(self.connection)

    def finish(self) -> None:
        with self.server.open_lock:
            self.server.open_sockets.discard(self.connection)
        with contextlib.suppress(OSError):
            super().finish()

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length > 0 else b""
        agent = self.headers.get("User-Agent") or ""
        response = self.server.owner._call(self.command, self.path, body, agent)
        self.send_response(response.status)
        if response.content_type is not None:
            self.send_header("Content-Type", response.content_type)
        if response.status != 204:
            self.send_header("Content-Length", str(len(response.body)))
        self.end_headers()
        if response.body and response.status != 204:
            self.wfile.write(response.body)

    do_GET = do_POST = do_PATCH = do_DELETE = do_PUT = _serve

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: the harness prints its own account of faults."""


class ToxiproxyServer:
    """A Toxiproxy-compatible server in this process, for machines without the real one.

    Speaks the real server's HTTP API (see [`fencedlease_lab.toxiproxy`][]) on
    ``host:port`` (``port=0``: a free port, read it back from
    [`port`][fencedlease_lab.toxiproxy.ToxiproxyServer.port]). Drive it with toxiproxy-python, as
    the real one. Proxies listen where their ``listen`` says; a proxy created without ``listen``
    listens on ``127.0.0.1:0`` (the real server would take every interface).

    Starts two threads at construction; [`stop`][fencedlease_lab.toxiproxy.ToxiproxyServer.stop] (or
    leaving the ``with`` block) closes every listener and connection and joins them. Raises
    ``OSError`` when the API address cannot be bound.
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self._loop = asyncio.new_event_loop()
        self._loop_thread = threading.Thread(
            target=self._run_loop, name="toxiproxy-embedded-loop", daemon=True
        )
        self._loop_thread.start()
        self._api = self._submit(_make_api()).result()
        try:
            self._http = _HttpServer((host, port), self)
        except OSError:
            self._stop_loop()
            raise
        self._http_thread = threading.Thread(
            target=self._http.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="toxiproxy-embedded-http",
            daemon=True,
        )
        self._http_thread.start()
        self._stopped = False

    @property
    def host(self) -> str:
        """The API's bound host, e.g. ``"127.0.0.1"``."""
        return str(self._http.server_address[0])

    @property
    def port(self) -> int:
        """The API's bound port."""
        return int(self._http.server_address[1])

    @property
    def api_url(self) -> str:
        """``http://host:port`` of the API, the form ``TOXIPROXY_URL`` takes."""
        return f"http://{self.host}:{self.port}"

    def _run_loop(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_forever()

    def _submit(self, coroutine: object) -> concurrent.futures.Future[Api]:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop)  # type: ignore[arg-type]

    def _call(self, method: str, target: str, body: bytes, user_agent: str) -> Response:
        future = asyncio.run_coroutine_threadsafe(
            self._api.handle(method, target, body, user_agent), self._loop
        )
        try:
            return future.result(timeout=_REQUEST_TIMEOUT_S)
        except concurrent.futures.TimeoutError:
            return Response(503)

    def stop(self) -> None:
        """Close the API, every proxy listener and connection; join the threads. Idempotent."""
        if self._stopped:
            return
        self._stopped = True
        self._http.shutdown()
        with self._http.open_lock:
            open_sockets = list(self._http.open_sockets)
        for sock in open_sockets:
            # An idle keep-alive client would otherwise hold its request thread (and us) forever.
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        self._http.server_close()
        self._http_thread.join()
        asyncio.run_coroutine_threadsafe(self._api.close(), self._loop).result()
        self._stop_loop()

    def _stop_loop(self) -> None:
        async def cancel_rest() -> None:
            current = asyncio.current_task()
            # A cancelled link may start a stub's task as it unwinds: cancel again until none is
            # left (a bounded number of rounds), so that no task is destroyed pending.
            for _ in range(_CANCEL_ROUNDS):
                rest = [t for t in asyncio.all_tasks() if t is not current]
                if not rest:
                    break
                for task in rest:
                    task.cancel()
                await asyncio.wait(rest)
            # getaddrinfo ran in the default executor; its worker thread must end with us.
            await asyncio.get_running_loop().shutdown_default_executor()

        asyncio.run_coroutine_threadsafe(cancel_rest(), self._loop).result()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._loop_thread.join()
        self._loop.close()

    def __enter__(self) -> ToxiproxyServer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"ToxiproxyServer(api_url={self.api_url!r})"


async def _make_api() -> Api:
    return Api()
