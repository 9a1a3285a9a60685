"""`tether up`'s embedded NATS: locked down by the generated configuration, its secrets
readable by the owner only, and TLS-only when a certificate and key are configured."""

from __future__ import annotations

import shutil
import subprocess
from contextlib import AsyncExitStack
from pathlib import Path

import nats
import pytest
from nats.aio.client import Client
from nats.errors import Error as NatsError

from tether_client.up import start_locked_nats
from tether_common.bus import Bus
from tether_common.natsauth import client_tls
from tether_common.subjects import Subjects


@pytest.fixture(autouse=True)
def plain_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("TETHER_SUBJECT_PREFIX", "TETHER_NATS_TLS_CERT", "TETHER_NATS_TLS_KEY"):
        monkeypatch.delenv(name, raising=False)


async def test_up_starts_nats_that_admits_only_tether_users(tmp_path: Path) -> None:
    async with AsyncExitStack() as stack:
        url, passwords = start_locked_nats(tmp_path, stack)
        bus = await Bus.connect(
            url, service="brain", subjects=Subjects(), user="brain", password=passwords["brain"]
        )
        try:
            await bus.ensure_streams()
        finally:
            await bus.close()
        stranger = Client()
        try:
            with pytest.raises(NatsError, match=r"(?i)authorization"):
                await stranger.connect(url, allow_reconnect=False, connect_timeout=2)
        finally:
            await stranger.close()
    for secret in ("nats-server.conf", "client-password"):
        assert (tmp_path / "nats" / secret).stat().st_mode & 0o077 == 0
    assert (tmp_path / "nats" / "client-password").read_text() == passwords["client"]


def self_signed(folder: Path) -> tuple[Path, Path]:
    cert, key = folder / "server.pem", folder / "server-key.pem"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"),
            *("-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"),
            *("-keyout", str(key), "-out", str(cert)),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return cert, key


async def test_up_serves_tls_when_a_certificate_is_configured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert shutil.which("openssl"), "the openssl command is missing (apt-get install openssl)"
    cert, key = self_signed(tmp_path)
    monkeypatch.setenv("TETHER_NATS_TLS_CERT", str(cert))
    monkeypatch.setenv("TETHER_NATS_TLS_KEY", str(key))
    async with AsyncExitStack() as stack:
        url, passwords = start_locked_nats(tmp_path / "home", stack)
        assert url.startswith("tls://")
        nc = await nats.connect(
            url, user="client", password=passwords["client"], tls=client_tls(cert)
        )
        try:
            assert nc.is_connected
            assert nc.connected_url is not None
            assert nc.connected_url.scheme == "tls"
        finally:
            await nc.close()
