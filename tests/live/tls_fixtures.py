"""A throwaway PKI for the TLS tests: a self-signed CA, a server certificate for 127.0.0.1 and
localhost, and a client certificate, all made with ``cryptography`` in a directory."""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

import attrs
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@attrs.frozen
class Pki:
    """PEM paths: the CA, the server's and a client's certificate and key, and a second CA that
    signed nothing of these (a client trusting only it must refuse the server)."""

    ca_file: str
    server_cert: str
    server_key: str
    client_cert: str
    client_key: str
    stranger_ca_file: str


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> str:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)
    return str(path)


def _write_cert(path: Path, cert: x509.Certificate) -> str:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return str(path)


def _ca(common_name: str) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(_name(common_name))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return key, cert


def _leaf(
    ca_key: ec.EllipticCurvePrivateKey, ca_cert: x509.Certificate, common_name: str, server: bool
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
    )
    if server:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
    return key, builder.sign(ca_key, hashes.SHA256())


def make_pki(directory: Path) -> Pki:
    """Write a fresh CA, server and client certificates (and a stranger CA) to ``directory``."""
    ca_key, ca_cert = _ca("fencedlease test CA")
    _, stranger_cert = _ca("fencedlease stranger CA")
    server_key, server_cert = _leaf(ca_key, ca_cert, "fencedlease test server", server=True)
    client_key, client_cert = _leaf(ca_key, ca_cert, "fencedlease test client", server=False)
    return Pki(
        ca_file=_write_cert(directory / "ca.pem", ca_cert),
        server_cert=_write_cert(directory / "server.pem", server_cert),
        server_key=_write_key(directory / "server.key", server_key),
        client_cert=_write_cert(directory / "client.pem", client_cert),
        client_key=_write_key(directory / "client.key", client_key),
        stranger_ca_file=_write_cert(directory / "stranger-ca.pem", stranger_cert),
    )
