"""The TLS files of a [`RedisServer`][fencedlease_lab.servers.redis.RedisServer] that listens on
TLS only, as ``redis-server`` arguments and as redis-py client arguments."""

from __future__ import annotations

from typing import Any

import attrs


@attrs.frozen
class RedisTLS:
    """TLS files of a [`RedisServer`][fencedlease_lab.servers.redis.RedisServer] that listens on TLS
    only (PEM paths).

    ``cert_file``/``key_file``: the server's certificate and key; ``ca_file``: the CA clients
    check the server against, and the server checks client certificates against.
    ``auth_clients``: the server demands a client certificate (mutual TLS).
    ``client_cert_file``/``client_key_file``: the certificate the server's own admin client
    presents (needed when ``auth_clients``).
    """

    cert_file: str
    key_file: str
    ca_file: str
    auth_clients: bool = False
    client_cert_file: str | None = None
    client_key_file: str | None = None

    def server_args(self) -> list[str]:
        """``redis-server`` arguments for these files (the port is the caller's)."""
        return [
            "--tls-cert-file", self.cert_file,
            "--tls-key-file", self.key_file,
            "--tls-ca-cert-file", self.ca_file,
            "--tls-auth-clients", "yes" if self.auth_clients else "no",
        ]  # fmt: skip

    def client_kwargs(self) -> dict[str, Any]:
        """redis-py keyword arguments of a client that trusts the CA and presents the client
        certificate, if any."""
        kwargs: dict[str, Any] = {"ssl_ca_certs": self.ca_file}
        if self.client_cert_file is not None:
            kwargs["ssl_certfile"] = self.client_cert_file
            kwargs["ssl_keyfile"] = self.client_key_file
        return kwargs
