"""`tether up`'s embedded NATS: locked down by the generated configuration, its secrets
readable by the owner only, and TLS-only when a certificate and key are configured. Its
ports (a taken one refused with who holds it; TIME_WAIT is not taken), readiness asked of
its own processes, and one `tether up` per home (its lock)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import threading
from collections.abc import Iterator
from contextlib import AsyncExitStack, contextmanager
from pathlib import Path

import nats
import pytest
from nats.aio.client import Client
from nats.errors import Error as NatsError

from tether_client.endpoints import UpState, write_state
from tether_client.server.embedded import free_port
from tether_client.server.natsauth import client_tls
from tether_client.server.supervisor import SERVICES, ServiceSpec, Supervisor
from tether_client.system import start_locked_nats
from tether_client.up import (
    Running,
    hold_home,
    holds_port,
    http_ports,
    port_free,
    wait_own_ready,
)
from tether_common.bus import Bus
from tether_common.errors import ConfigError
from tether_common.subjects import Subjects


@pytest.fixture(autouse=True)
def plain_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("TETHER_SUBJECT_PREFIX", "TETHER_NATS_TLS_CERT", "TETHER_NATS_TLS_KEY"):
        monkeypatch.delenv(name, raising=False)


async def test_up_starts_nats_that_admits_only_tether_users(tmp_path: Path) -> None:
    async with AsyncExitStack() as stack:
        locked = start_locked_nats(tmp_path, stack)
        url, passwords = locked.url, locked.passwords
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
        locked = start_locked_nats(tmp_path / "home", stack)
        url, passwords = locked.url, locked.passwords
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


# ---- HTTP ports and readiness (issue 14, item 5) ------------------------------------

FAKE_SERVICE = '''
"""A stand-in service: answers /readyz on $TETHER_FAKE_HTTP_PORT, or (SLEEP=1) never listens."""
import asyncio, os

async def answer(reader, writer):
    await reader.readuntil(b"\\r\\n\\r\\n")
    writer.write(b"HTTP/1.1 200 OK\\r\\ncontent-length: 2\\r\\nconnection: close\\r\\n\\r\\nok")
    await writer.drain()
    writer.close()

async def main():
    if os.environ.get("FAKE_SLEEP"):
        await asyncio.sleep(3600)
    server = await asyncio.start_server(answer, "127.0.0.1", int(os.environ["TETHER_FAKE_HTTP_PORT"]))
    async with server:
        await server.serve_forever()

asyncio.run(main())
'''


def fake_spec(tmp_path: Path, default_port: int = 1) -> ServiceSpec:
    (tmp_path / "fake_service.py").write_text(FAKE_SERVICE)
    return ServiceSpec("fake", "fake_service", "TETHER_FAKE_", default_port)


def held_port() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    return sock


def test_http_ports_come_from_the_environment() -> None:
    wanted = {spec.port_env: str(free_port()) for spec in SERVICES}
    ports = http_ports(wanted)
    assert {spec.port_env: str(ports[spec.name]) for spec in SERVICES} == wanted
    any_port = http_ports({spec.port_env: "0" for spec in SERVICES})
    assert len(set(any_port.values())) == len(SERVICES)
    assert all(port > 0 for port in any_port.values())
    if all(port_free(spec.default_port) for spec in SERVICES):  # nothing here holds them
        assert http_ports({}) == {spec.name: spec.default_port for spec in SERVICES}


def test_a_taken_or_bad_configured_port_is_refused() -> None:
    with held_port() as taken:
        port = taken.getsockname()[1]
        free = str(free_port())
        for environ in [
            {"TETHER_BRAIN_HTTP_PORT": str(port)},
            {"TETHER_APPROVALS_HTTP_PORT": str(port)},
            {"TETHER_RUNNER_HTTP_PORT": "not-a-port"},
            {"TETHER_GATEWAY_HTTP_PORT": "-1"},
            {"TETHER_OUTPUTS_HTTP_PORT": "65536"},
            {"TETHER_BRAIN_HTTP_PORT": free, "TETHER_GATEWAY_HTTP_PORT": free},
        ]:
            with pytest.raises(ConfigError):
                http_ports({spec.port_env: "0" for spec in SERVICES} | environ)


def test_a_taken_port_names_its_holder_and_the_variable_to_set(tmp_path: Path) -> None:
    """Issue 29, item 1: a taken usual port is not swapped for another (a bookmarked
    console would break); the refusal names the port, who holds it and what to set."""
    with held_port() as taken:
        port = taken.getsockname()[1]
        spec = fake_spec(tmp_path, default_port=port)
        with pytest.raises(ConfigError) as usual:
            http_ports({}, specs=(spec,))
        with pytest.raises(ConfigError) as configured:
            http_ports({spec.port_env: str(port)}, specs=(spec,))
    for refused in (usual.value.message, configured.value.message):
        assert f"port {port}" in refused
        assert f"by pid {os.getpid()} (" in refused
        assert f": set {spec.port_env} to another port (0: any free one)" in refused
        assert "\n" not in refused
    assert "usual port" in usual.value.message


def time_wait_port() -> int:
    """A port whose server has stopped, leaving a connection it closed first in
    TIME_WAIT (as a service's keep-alive connections are when it stops)."""
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = int(server.getsockname()[1])
    with socket.create_connection(("127.0.0.1", port)) as client:
        accepted, _ = server.accept()
        accepted.close()  # the server's side closes first: it is the one that waits
        assert client.recv(1) == b""
    server.close()
    assert (port, "06") in tcp_states(), "no TIME_WAIT left to test with"  # 06: TIME_WAIT
    return port


def tcp_states() -> set[tuple[int, str]]:
    """(local port, state) of every IPv4 TCP socket here."""
    lines = Path("/proc/net/tcp").read_text().splitlines()[1:]
    return {(int(f[1].rsplit(":", 1)[1], 16), f[3]) for f in (line.split() for line in lines)}


def test_a_port_left_in_time_wait_is_free_again() -> None:
    """Issue 29, item 1: `tether up` started again within a minute of stopping found its
    own ports "in use": the check bound without SO_REUSEADDR, as no server binds."""
    port = time_wait_port()
    assert port_free(port)
    environ = {spec.port_env: "0" for spec in SERVICES} | {"TETHER_BRAIN_HTTP_PORT": str(port)}
    assert http_ports(environ)["brain"] == port
    with socket.socket() as again:  # and a server does get it
        again.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        again.bind(("127.0.0.1", port))
        again.listen(1)


@pytest.mark.parametrize(
    ("family", "host", "reuse"),
    [
        (socket.AF_INET, "127.0.0.1", False),
        (socket.AF_INET, "127.0.0.1", True),
        (socket.AF_INET, "0.0.0.0", False),  # a listener on every address
        (socket.AF_INET, "0.0.0.0", True),
        (socket.AF_INET6, "::", True),  # dual-stack: IPv4 loopback too
    ],
)
def test_a_listening_port_is_taken_however_it_was_bound(
    family: socket.AddressFamily, host: str, reuse: bool
) -> None:
    with socket.socket(family) as listener:
        if reuse:
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            listener.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        listener.bind((host, 0))
        listener.listen(1)
        assert not port_free(listener.getsockname()[1])


def test_holds_port_tells_whose_socket_it_is() -> None:
    with held_port() as mine:
        port = mine.getsockname()[1]
        assert holds_port(os.getpid(), port) is True
        assert holds_port(os.getppid(), port) is False
        assert holds_port(os.getpid(), free_port()) is False


async def test_readiness_is_asked_of_the_process_up_started(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another instance answering /readyz on the configured port is not taken for the
    service `tether up` started; the service itself is."""
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    spec = fake_spec(tmp_path)
    impostor = Supervisor({}, specs=(spec,), restart=False)
    impostor.child("fake").port = free_port()
    await impostor.start()
    try:
        await wait_own_ready(impostor, timeout=30)  # an honest service is ready
        ours = Supervisor({"FAKE_SLEEP": "1"}, specs=(spec,), restart=False)
        ours.child("fake").port = impostor.child("fake").port
        await ours.start()
        try:
            await ours.wait_ready(timeout=10)  # the old check: fooled by the impostor
            with pytest.raises(ConfigError, match="not listening on port"):
                await wait_own_ready(ours, timeout=1.5)
        finally:
            await ours.stop()
    finally:
        await impostor.stop()


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    found = tmp_path / "home"
    found.mkdir(mode=0o700)
    monkeypatch.setenv("TETHER_HOME", str(found))
    return found


@contextmanager
def holding(home: Path) -> Iterator[int]:
    held = hold_home(home)
    assert isinstance(held, int), held
    try:
        yield held
    finally:
        os.close(held)


def test_a_second_up_on_a_home_is_told_the_first_s_pid_and_addresses(home: Path) -> None:
    """Issue 29, item 1: a second `tether up` on the same home started NATS, then died
    in `pg_ctl`; now it is refused before anything starts, told who runs and where."""
    with holding(home):
        starting = hold_home(home)
        assert starting == Running(os.getpid(), None)
        assert f"(pid {os.getpid()}, still starting)" in starting.message(home)
        brain, approvals = "http://127.0.0.1:18700", "http://127.0.0.1:18701"
        services = {"brain": {"url": brain, "pid": 1}, "approvals": {"url": approvals, "pid": 2}}
        write_state(UpState(pid=os.getpid(), services=services))
        ready = hold_home(home)
        assert isinstance(ready, Running)
        said = ready.message(home)
        assert f"already running for {home} (pid {os.getpid()}: API {brain}, " in said
        assert f"console {brain}/console, approvals {approvals})" in said
        assert f"`kill {os.getpid()}`" in said
    with holding(home):  # let go with its holder
        pass


def dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


@pytest.mark.parametrize("left", ["gone pid", "live pid of another program", "garbage"])
def test_what_a_gone_up_left_behind_blocks_nothing(home: Path, left: str) -> None:
    """An `up.json` (and `up.lock`) left by a `tether up` killed outright, whose pid may
    since name another process, or torn: the lock alone says who runs."""
    pid = {"gone pid": dead_pid(), "live pid of another program": os.getppid()}.get(left)
    state = "{not json" if pid is None else json.dumps({"pid": pid, "services": {}})
    (home / "up.json").write_text(state)
    (home / "up.lock").write_text(f"{pid}\n" if pid else "garbage")
    with holding(home) as held:
        assert os.pread(held, 32, 0).decode() == f"{os.getpid()}\n"


def test_two_ups_starting_at_once_cannot_both_hold_the_home(home: Path) -> None:
    racers = 8
    start = threading.Barrier(racers)
    outcomes: list[int | Running] = []

    def race() -> None:
        start.wait()
        outcomes.append(hold_home(home))

    threads = [threading.Thread(target=race) for _ in range(racers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    held = [o for o in outcomes if isinstance(o, int)]
    try:
        assert len(held) == 1
        assert len(outcomes) == racers
    finally:
        for fd in held:
            os.close(fd)
