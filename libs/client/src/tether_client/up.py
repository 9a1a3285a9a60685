"""`tether up`: the whole system on this machine.

Starts an embedded NATS (JetStream) and an embedded PostgreSQL with data under
`TETHER_HOME` (default `~/.tether`) unless `TETHER_NATS_URL` / `TETHER_DATABASE_URL` name
real ones, then the five services under the supervisor, and prints the API address.
Ctrl-C (or SIGTERM) stops everything it started.

Secrets live in TETHER_HOME (mode 0700), each file mode 0600 from its creation: the
operator token, the decision key, the database password, the NATS configuration and the
client's NATS password. The embedded PostgreSQL asks every connection for its password.

The embedded NATS is locked down: its configuration is generated from the subject
declarations (`tether_common.natsauth`) with fresh passwords on every start, and each
service connects as its own user. With `TETHER_NATS_TLS_CERT` and `TETHER_NATS_TLS_KEY`
the server speaks TLS only and services get a `tls://` URL.

Each service listens on `TETHER_<SERVICE>_HTTP_PORT` when set (refused at once if that
port is taken or named twice), else on its usual port (8700–8704), else, that one being
taken, on a free one. Readiness is asked of the processes `tether up` started: a service
counts only once the process it launched holds the listening socket on the port it was
given (read from /proc where there is one), so another instance on the same machine
answering `/readyz` on that port is never taken for it.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import signal
import socket
import time
from collections.abc import Mapping
from contextlib import AsyncExitStack, suppress
from pathlib import Path

from tether_common.decisions import new_key
from tether_common.embedded import EmbeddedPostgres, NatsServer, free_port
from tether_common.errors import ConfigError
from tether_common.natsauth import (
    CLIENT_USER,
    TlsFiles,
    generate_passwords,
    render_config,
    service_env,
    write_config,
)
from tether_common.secretfiles import narrow, private_dir, secret_in
from tether_common.settings import CommonSettings, tether_home
from tether_common.subjects import Subjects
from tether_common.supervisor import SERVICES, Child, ServiceSpec, Supervisor


async def start_local_model(stack: AsyncExitStack, base: Path) -> dict[str, str]:
    """With `TETHER_PROVIDER=local`, the bundled model's llama.cpp server as a child of
    `tether up`, unless `TETHER_GATEWAY_LOCAL_BASE_URL` names one already running."""
    if os.environ.get("TETHER_PROVIDER") != "local" or os.environ.get(
        "TETHER_GATEWAY_LOCAL_BASE_URL"
    ):
        return {}
    from tether_client.local_model import (
        LocalModelSettings,
        model_path,
        start_llama_server,
        stop,
        supervise,
        wait_ready,
    )

    local = LocalModelSettings()
    server = start_llama_server(
        model_path(local),
        port_or_free(local.port),
        n_ctx=local.n_ctx,
        alias=local.model_alias,
        log_path=base / "llama-server.log",
    )
    stack.callback(stop, server)
    await wait_ready(server, timeout=120)
    keeper = asyncio.create_task(supervise(server), name="llama-server")
    stack.push_async_callback(cancel, keeper)  # runs before `stop`: no restart while stopping
    return {
        "TETHER_GATEWAY_LOCAL_BASE_URL": server.base_url,
        "TETHER_GATEWAY_LOCAL_MODEL": local.model_alias,
    }


async def cancel(task: asyncio.Task[None]) -> None:
    task.cancel()
    with suppress(asyncio.CancelledError):
        await task


# Secrets `tether up` keeps in TETHER_HOME, each mode 0600 (tether_common.secretfiles).
OPERATOR_TOKEN_FILE = "operator-token"
DECISION_KEY_FILE = "decision-key"
PG_PASSWORD_FILE = "postgres/password"
NATS_CONFIG_FILE = "nats/nats-server.conf"
NATS_CLIENT_PASSWORD_FILE = "nats/client-password"
SECRET_FILES = (
    OPERATOR_TOKEN_FILE,
    DECISION_KEY_FILE,
    PG_PASSWORD_FILE,
    NATS_CONFIG_FILE,
    NATS_CLIENT_PASSWORD_FILE,
)


def operator_token(base: Path) -> str:
    """The operator token from the environment, or one made once and kept in TETHER_HOME."""
    if token := os.environ.get("TETHER_OPERATOR_TOKEN"):
        return token
    return secret_in(base / OPERATOR_TOKEN_FILE, lambda: secrets.token_urlsafe(32))[0]


def decision_key(base: Path) -> str:
    """The key the approvals service signs decisions with and the brain verifies them
    with: from the environment, or made once and kept in TETHER_HOME (never in the
    database, so SQL access cannot forge a decision)."""
    if key := os.environ.get("TETHER_DECISION_KEY"):
        return key
    return secret_in(base / DECISION_KEY_FILE, new_key)[0]


def port_free(port: int) -> bool:
    try:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))
    except OSError:
        return False
    return True


def port_or_free(preferred: int) -> int:
    return preferred if port_free(preferred) else free_port()


def http_ports(
    environ: Mapping[str, str], specs: tuple[ServiceSpec, ...] = SERVICES
) -> dict[str, int]:
    """Each service's HTTP port: `TETHER_<SERVICE>_HTTP_PORT` (0: any free port), else its
    usual one, else a free one. A configured port that is taken, out of range or given to
    two services is a `ConfigError`: silently moving it would leave clients talking to
    whatever holds it."""
    ports: dict[str, int] = {}
    for spec in specs:
        raw = environ.get(spec.port_env, "").strip()
        if not raw:
            ports[spec.name] = port_or_free(spec.default_port)
            continue
        try:
            port = int(raw)
        except ValueError:
            raise ConfigError(f"{spec.port_env}={raw!r} is not a port number") from None
        if not 0 <= port <= 65535:
            raise ConfigError(f"{spec.port_env}={port} is not a port number")
        if port == 0:
            port = free_port()
        elif not port_free(port):
            raise ConfigError(
                f"port {port} ({spec.port_env}) is in use: is another Tether running? "
                f"Choose another port with {spec.port_env}."
            )
        if port in ports.values():
            raise ConfigError(f"port {port} ({spec.port_env}) is given to two services")
        ports[spec.name] = port
    return ports


def _listening_inodes(port: int) -> set[str] | None:
    """Socket inodes listening on TCP `port` (None: no /proc/net here to tell)."""
    found: set[str] = set()
    tables = [Path("/proc/net/tcp"), Path("/proc/net/tcp6")]
    if not tables[0].exists():
        return None
    for table in tables:
        try:
            lines = table.read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            listening = len(fields) > 9 and fields[3] == "0A"  # 0A: LISTEN
            if listening and int(fields[1].rsplit(":", 1)[1], 16) == port:
                found.add(fields[9])
    return found


def holds_port(pid: int, port: int) -> bool | None:
    """Whether process `pid` holds the socket listening on `port` (None: this system
    cannot tell, e.g. no /proc)."""
    inodes = _listening_inodes(port)
    if inodes is None:
        return None
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return False  # gone, or not ours to read
    for fd in fds:
        try:
            link = os.readlink(fd)
        except OSError:
            continue  # closed since the listing
        if link.startswith("socket:[") and link[8:-1] in inodes:
            return True
    return False


def _ours(child: Child) -> bool:
    proc = child.proc
    if proc is None or proc.returncode is not None:
        return False
    return holds_port(proc.pid, child.port) is not False


async def wait_own_ready(supervisor: Supervisor, timeout: float) -> None:
    """Ready when each process `tether up` started listens on the port it was given and
    answers `/readyz` there; never on the word of another process on that port."""
    deadline = time.monotonic() + timeout
    for child in supervisor.children:
        while not _ours(child):
            if time.monotonic() > deadline:
                raise ConfigError(
                    f"{child.label} is not listening on port {child.port} after {timeout:.0f}s"
                    f" (is another program using it? see {child.spec.port_env})"
                )
            await asyncio.sleep(0.1)
    await supervisor.wait_ready(timeout=max(1.0, deadline - time.monotonic()))
    if not all(_ours(child) for child in supervisor.children):
        raise ConfigError("a service stopped while it was being checked; see its log above")


def tls_files(settings: CommonSettings) -> TlsFiles | None:
    if settings.nats_tls_cert is None or settings.nats_tls_key is None:
        return None
    return TlsFiles(settings.nats_tls_cert, settings.nats_tls_key, settings.nats_tls_ca)


def start_locked_nats(base: Path, stack: AsyncExitStack) -> tuple[str, dict[str, str]]:
    """An embedded NATS with one user per service; returns its URL and the passwords.
    The client user's password is kept in TETHER_HOME for NATS clients of the API."""
    settings = CommonSettings()
    passwords = generate_passwords()
    tls = tls_files(settings)
    config = render_config(Subjects(settings.subject_prefix), passwords, tls=tls)
    config_file = write_config(base / NATS_CONFIG_FILE, config)
    write_config(base / NATS_CLIENT_PASSWORD_FILE, passwords[CLIENT_USER])
    nats = NatsServer(base / "nats", port=port_or_free(4222), config_file=config_file).start()
    stack.callback(nats.stop)
    url = nats.url.replace("nats://", "tls://") if tls is not None else nats.url
    return url, passwords


async def up() -> int:
    base = private_dir(tether_home())
    narrow([base / name for name in SECRET_FILES])  # files older versions left readable
    # Before anything starts: a port that cannot be used fails at once.
    ports = http_ports(os.environ)
    async with AsyncExitStack() as stack:
        nats_url = os.environ.get("TETHER_NATS_URL")
        passwords: dict[str, str] = {}
        if not nats_url:
            nats_url, passwords = start_locked_nats(base, stack)
        database_url = os.environ.get("TETHER_DATABASE_URL")
        if not database_url:
            pg = EmbeddedPostgres(
                base / "postgres", port=port_or_free(5432), password_file=base / PG_PASSWORD_FILE
            )
            pg.start()
            stack.callback(pg.stop)
            database_url = pg.url  # carries the password: handed to services, never printed
        env = {
            "TETHER_NATS_URL": nats_url,
            "TETHER_DATABASE_URL": database_url,
            "TETHER_OPERATOR_TOKEN": operator_token(base),
            "TETHER_DECISION_KEY": decision_key(base),
            "TETHER_RUNNER_WORKSPACE": os.environ.get("TETHER_RUNNER_WORKSPACE")
            or str(base / "workspace"),
        }
        Path(env["TETHER_RUNNER_WORKSPACE"]).mkdir(parents=True, exist_ok=True)

        def own_credentials(spec: ServiceSpec) -> dict[str, str]:
            # With an outside NATS, credentials come from the environment as before.
            return service_env(spec.name, passwords[spec.name]) if passwords else {}

        env |= await start_local_model(stack, base)
        supervisor = Supervisor(env, restart=True, env_for=own_credentials)
        for name, port in ports.items():
            supervisor.child(name).port = port
        stack.push_async_callback(supervisor.stop)
        await supervisor.start()
        await wait_own_ready(supervisor, timeout=120)
        brain = supervisor.child("brain").url
        provider = os.environ.get("TETHER_PROVIDER", "rules")
        print(f"Tether is up. API: {brain}  (provider: {provider})", flush=True)
        print(f"Approvals: {supervisor.child('approvals').url}  token: {base / 'operator-token'}")
        print('Try: tether run "what time is it in Tokyo?"   Ctrl-C stops everything.', flush=True)
        await wait_for_signal()
    return 0


async def wait_for_signal() -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
