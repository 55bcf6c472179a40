"""An embedded, Toxiproxy-compatible fault-injecting TCP proxy (standard library + attrs).

For machines with no ``toxiproxy-server`` and no Docker; prefer the real server when there is
one (:func:`fencedlease.servers.toxiproxy.toxiproxy_endpoint` chooses). It speaks Shopify
Toxiproxy v2's HTTP API, so toxiproxy-python and every other client drive it unchanged:

=========================================  ======================================================
``GET /version``                           200 ``{"version": "..."}``
``GET /proxies``                           200 ``{name: proxy, ...}``
``POST /proxies``                          201 proxy; 400 bad body/field; 409 name taken;
                                           500 cannot listen
``POST /populate``                         201 ``{"proxies": [proxy, ...]}``
``GET /proxies/{p}``                       200 proxy; 404
``POST|PATCH /proxies/{p}``                200 proxy (``listen``/``upstream``/``enabled``); 404
``DELETE /proxies/{p}``                    204; 404
``GET /proxies/{p}/toxics``                200 ``[toxic, ...]``
``POST /proxies/{p}/toxics``               200 toxic; 400; 404; 409
``GET|POST|PATCH|DELETE .../toxics/{t}``   200 toxic / 204 on delete; 404
``POST /reset``                            204: every proxy enabled, every toxic removed
=========================================  ======================================================

Shapes: proxy ``{"name", "listen", "upstream", "enabled", "toxics": [toxic]}`` (a ``listen``
port 0 comes back as the bound port); toxic ``{"attributes", "name", "type", "stream",
"toxicity"}`` with ``stream`` ``"upstream"`` or ``"downstream"`` (default) and ``toxicity``
default 1.0; errors ``{"error": message, "status": code}``.

Toxics (milliseconds unless said): ``latency`` (``latency``, ``jitter``: each chunk delayed
uniformly in [latency - jitter, latency + jitter)); ``timeout`` (``timeout``: drop all data and
close after that long, or never when 0; removing it closes the connection, as in the real
server); ``reset_peer`` (``timeout``: on the first data, wait, then RST both sides);
``bandwidth`` (``rate`` in KB/s, 1 KB = 1000 bytes); ``slow_close`` (``delay`` before passing
the close on); ``limit_data`` (``bytes``, then close); ``noop``. Toxics act on open connections
too. ``enabled: false`` closes the listener and every open connection.

Known differences from the real server: no ``slicer``/HTTP toxics and no ``/metrics``; toxicity
is drawn once per connection and toxic (the real one draws again whenever a stub restarts);
``reset_peer`` resets with RST even on connections opened before it was added (the real one
sends FIN there); interrupting ``slow_close`` mid-delay closes at once instead of never.
"""

from __future__ import annotations

from ._model import TOXIC_ATTRIBUTES, VERSION
from ._server import ToxiproxyServer

__all__ = ["TOXIC_ATTRIBUTES", "VERSION", "ToxiproxyServer"]
