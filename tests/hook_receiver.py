"""A tenant's HTTPS hook endpoint for tests: a TLS server on a free loopback port with a
self-signed certificate for 127.0.0.1 (the brain is told to trust it through
`TETHER_BRAIN_HOOKS_CA_FILE`), recording each request and whether its
`Tether-Signature` verifies with the hook's secret, and answering what the test says."""

from __future__ import annotations

import datetime as dt
import ipaddress
import json
import ssl
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tether_common.signing import SIGNATURE_HEADER, verify


@dataclass
class Receiver:
    """What the endpoint answers, and what it saw (`secret`: the hook's, once known)."""

    secret: str = ""
    status: int = 200
    body: bytes = b'{"action": "allow"}'
    delay_s: float = 0.0
    seen: list[dict[str, Any]] = field(default_factory=list)


def handler(receiver: Receiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            receiver.seen.append(
                {
                    "signed": verify(receiver.secret, body, self.headers.get(SIGNATURE_HEADER)),
                    "forged": verify(
                        "hksec_other" + "x" * 30, body, self.headers.get(SIGNATURE_HEADER)
                    ),
                    "hook": self.headers.get("Tether-Hook"),
                    "raw": body,
                    "signature": self.headers.get(SIGNATURE_HEADER),
                    "body": json.loads(body),
                }
            )
            time.sleep(receiver.delay_s)
            self.send_response(receiver.status)
            self.send_header("Content-Length", str(len(receiver.body)))
            self.end_headers()
            self.wfile.write(receiver.body)

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet."""

    return Handler


def certificate(folder: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1, and its key."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "tether hook test")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = folder / "cert.pem", folder / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_file, key_file


@dataclass
class Endpoint:
    url: str
    ca_file: Path
    receiver: Receiver


@contextmanager
def serve_tls(folder: Path, receiver: Receiver) -> Iterator[Endpoint]:
    cert_file, key_file = certificate(folder)
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler(receiver))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_file, key_file)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield Endpoint(f"https://127.0.0.1:{server.server_address[1]}/hook", cert_file, receiver)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
