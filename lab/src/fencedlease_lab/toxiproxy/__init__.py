"""An embedded, Toxiproxy-compatible fault-injecting TCP proxy (standard library + attrs).

For machines with no ``toxiproxy-server`` and no Docker; prefer the real server when there is
one ([`fencedlease_lab.servers.toxiproxy.toxiproxy_endpoint`][] chooses). It speaks Shopify
Toxiproxy v2's HTTP API, so toxiproxy-python and every other client drive it unchanged:

|  |  |
| --- | --- |
| ``GET /version`` | 200 ``{"version": "..."}`` |
| ``GET /proxies`` | 200 ``{name: proxy, ...}`` |
| ``POST /proxies`` | 201 proxy; 400 bad body/field; 409 name taken; 500 cannot listen |
| ``POST /populate`` | 201 ``{"proxies": [proxy, ...]}`` |
| ``GET /proxies/{p}`` | 200 proxy; 404 |
| ``POST\\|PATCH /proxies/{p}`` | 200 proxy (``listen``/``upstream``/``enabled``); 404 |
| ``DELETE /proxies/{p}`` | 204; 404 |
| ``GET /proxies/{p}/toxics`` | 200 ``[toxic, ...]`` |
| ``POST /proxies/{p}/toxics`` | 200 toxic; 400; 404; 409 |
| ``GET\\|POST\\|PATCH\\|DELETE .../toxics/{t}`` | 200 toxic / 204 on delete; 404 |
| ``POST /reset`` | 204: every proxy enabled, every toxic removed |

Shapes: proxy ``{"name", "listen", "upstream", "enabled", "toxics": [toxic]}`` (a ``listen``
port 0 comes back as the bound port); toxic ``{"attributes", "name", "type", "stream",
"toxicity"}`` with ``stream`` ``"upstream"`` or ``"downstream"`` (default) and ``toxicity``
default 1.0; errors ``{"error": message, "status": code}``.

Toxics (milliseconds unless said), as the real server's ``toxics/*.go``: ``latency``
(``latency``, ``jitter``: each chunk delayed uniformly in [latency - jitter, latency + jitter));
``timeout`` (``timeout``: drop all data, and close once no data has arrived for that long, every
chunk restarting the timer, or never when 0; removing it closes the connection); ``reset_peer``
(``timeout``: on the first data, drop it, wait, then close; a connection opened while the
toxic was there closes with RST, now and on every later close, one opened before with FIN);
``bandwidth`` (``rate`` in KB/s, 1 KB = 1000 bytes); ``slow_close`` (``delay`` before passing
the close on); ``limit_data`` (``bytes``, then close); ``slicer`` (``average_size`` and
``size_variation`` in bytes, ``delay`` in microseconds: each chunk cut in slices of about
average_size +/- size_variation, a delay after each); ``noop``. Toxics act on open connections
too, and toxicity is drawn again each time a toxic restarts on a link: when it is updated, or
a toxic is added right after it, or the toxic right after it is removed. ``enabled: false``
closes the listener and every open connection. An update whose ``listen`` does not resolve
answers 500 and changes nothing; ``/populate`` applies its entries in order, a repeated name
replacing the earlier proxy.

Known differences from the real server: no HTTP toxics and no ``/metrics``; the real proxy JSON
also carries a ``"Logger": {}`` key, left out here; a ``listen`` or ``upstream`` port must be a
number (the real one also takes service names); a connection that resets on close resets both
sockets at once (the real one resets the second when its link has ended); a ``slicer`` whose
average_size + size_variation is below 1, or whose size_variation exceeds average_size, still
slices here (the real server fails); interrupting ``slow_close`` mid-delay closes at once
instead of never.
"""

from __future__ import annotations

from ._model import TOXIC_ATTRIBUTES, VERSION
from ._server import ToxiproxyServer

__all__ = ["TOXIC_ATTRIBUTES", "VERSION", "ToxiproxyServer"]
