"""`tether up`: the whole system on this machine.

Starts an embedded NATS (JetStream) and an embedded PostgreSQL with data under
`TETHER_HOME` (default `~/.tether`) unless `TETHER_NATS_URL` / `TETHER_DATABASE_URL` name
real ones, then the five services under the supervisor, printing one line per component
as it becomes ready, then a summary of addresses and where the token is. It records them
in `TETHER_HOME/up.json` for the other commands (`tether_client.endpoints`), and removes
it on the way out. Ctrl-C (or SIGTERM) stops everything it started.

Service logs are text for people on a terminal and JSON lines otherwise
(`--log-format`, or `TETHER_LOG_FORMAT` when set). The embedded NATS serves its
monitoring endpoint on loopback (connections, JetStream consumers: counts and names, no
message content, no credentials) for `tether status`.

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
import importlib.metadata
import json
import os
import secrets
import signal
import socket
import time
from collections.abc import Callable, Mapping
from contextlib import AsyncExitStack, suppress
from pathlib import Path
from typing import Literal

from rich.text import Text

from tether_client.console import stdout
from tether_client.endpoints import UpState, state_path, write_state
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

LogFormat = Literal["auto", "text", "json"]


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


async def wait_own_ready(
    supervisor: Supervisor, timeout: float, on_ready: Callable[[Child], None] | None = None
) -> None:
    """Ready when each process `tether up` started listens on the port it was given and
    answers `/readyz` there; never on the word of another process on that port.
    `on_ready` hears of each service as it becomes ready, in start order."""
    deadline = time.monotonic() + timeout
    for child in supervisor.children:
        while not _ours(child):
            if time.monotonic() > deadline:
                raise ConfigError(
                    f"{child.label} is not listening on port {child.port} after {timeout:.0f}s"
                    f" (is another program using it? see {child.spec.port_env})"
                )
            await asyncio.sleep(0.1)
        await supervisor.wait_ready(timeout=max(1.0, deadline - time.monotonic()), children=[child])
        if on_ready is not None:
            on_ready(child)
    if not all(_ours(child) for child in supervisor.children):
        raise ConfigError("a service stopped while it was being checked; see its log above")


def tls_files(settings: CommonSettings) -> TlsFiles | None:
    if settings.nats_tls_cert is None or settings.nats_tls_key is None:
        return None
    return TlsFiles(settings.nats_tls_cert, settings.nats_tls_key, settings.nats_tls_ca)


def start_locked_nats(
    base: Path, stack: AsyncExitStack, *, monitor_port: int | None = None
) -> tuple[str, dict[str, str]]:
    """An embedded NATS with one user per service; returns its URL and the passwords.
    The client user's password is kept in TETHER_HOME for NATS clients of the API. With
    `monitor_port`, its monitoring endpoint listens there, on loopback only."""
    settings = CommonSettings()
    passwords = generate_passwords()
    tls = tls_files(settings)
    config = render_config(Subjects(settings.subject_prefix), passwords, tls=tls)
    if monitor_port is not None:
        config += f"http: 127.0.0.1:{monitor_port}\n"
    config_file = write_config(base / NATS_CONFIG_FILE, config)
    write_config(base / NATS_CLIENT_PASSWORD_FILE, passwords[CLIENT_USER])
    nats = NatsServer(base / "nats", port=port_or_free(4222), config_file=config_file).start()
    stack.callback(nats.stop)
    url = nats.url.replace("nats://", "tls://") if tls is not None else nats.url
    return url, passwords


class Progress:
    """One line per component as it becomes ready, with the time it took."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.console = stdout()

    def step(self, what: str) -> None:
        self.console.print(Text(f"… {what}", style="dim"))

    def ready(self, component: str, detail: str) -> None:
        took = time.monotonic() - self.started
        line = Text("✓ ", style="green")
        line.append(f"{component:<13}", style="bold")
        line.append(f"{detail}  ")
        line.append(f"{took:5.1f}s", style="dim")
        self.console.print(line)


def log_format(wanted: LogFormat) -> str:
    """Services log text for a person at a terminal, JSON lines for anything else."""
    if wanted != "auto":
        return wanted
    if configured := os.environ.get("TETHER_LOG_FORMAT"):
        return configured
    return "text" if stdout().is_terminal else "json"


def traces_line() -> str:
    if link := os.environ.get("TETHER_BRAIN_TRACE_URL"):
        return link.split("{", 1)[0]
    if endpoint := os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        return f"exported to {endpoint} (set TETHER_BRAIN_TRACE_URL to link the console)"
    return "off (set OTEL_EXPORTER_OTLP_ENDPOINT to export them)"


def token_line(token_file: str | None) -> str:
    if token_file == "TETHER_OPERATOR_TOKEN":
        return "from the environment (TETHER_OPERATOR_TOKEN)"
    return f"{token_file}  (the CLI reads it; TETHER_OPERATOR_TOKEN overrides it)"


def summary(state: UpState, supervisor: Supervisor) -> None:
    brain = supervisor.child("brain").url
    rows = [
        ("API", brain),
        ("console", f"{brain}/console"),
        ("approvals", supervisor.child("approvals").url),
        ("traces", traces_line()),
        ("token", token_line(state.token_file)),
        ("provider", state.provider or "rules"),
        ("state", str(state_path())),
    ]
    console = stdout()
    console.print(
        Text(f"Tether is up. API: {brain}  (provider: {state.provider})", style="bold green")
    )
    for name, value in rows:
        console.print(Text(f"  {name:<10} ") + Text(value))
    console.print(
        'Try: tether run "what time is it in Tokyo?"   tether status   Ctrl-C stops everything.'
    )


async def start_database(base: Path, stack: AsyncExitStack, progress: Progress) -> str:
    if database_url := os.environ.get("TETHER_DATABASE_URL"):
        progress.ready("PostgreSQL", "TETHER_DATABASE_URL (not started here)")
        return database_url
    progress.step("starting PostgreSQL")
    pg = EmbeddedPostgres(
        base / "postgres", port=port_or_free(5432), password_file=base / PG_PASSWORD_FILE
    )
    await asyncio.to_thread(pg.start)
    stack.callback(pg.stop)
    progress.ready("PostgreSQL", f"127.0.0.1:{pg.port} (embedded, data in {base / 'postgres'})")
    return pg.url  # carries the password: handed to services, never printed


async def start_bus(
    base: Path, stack: AsyncExitStack, progress: Progress, state: UpState
) -> tuple[str, dict[str, str]]:
    if nats_url := os.environ.get("TETHER_NATS_URL"):
        progress.ready("NATS", "TETHER_NATS_URL (not started here)")
        state.nats_monitor_url = os.environ.get("TETHER_NATS_MONITOR_URL")
        return nats_url, {}
    progress.step("starting NATS")
    monitor = port_or_free(8222)
    nats_url, passwords = start_locked_nats(base, stack, monitor_port=monitor)
    state.nats_url, state.nats_monitor_url = nats_url, f"http://127.0.0.1:{monitor}"
    progress.ready("NATS", f"{nats_url} (embedded, JetStream; monitor :{monitor})")
    return nats_url, passwords


async def up(wanted_logs: LogFormat = "auto") -> int:
    base = private_dir(tether_home())
    narrow([base / name for name in SECRET_FILES])  # files older versions left readable
    # Before anything starts: a port that cannot be used fails at once.
    ports = http_ports(os.environ)
    progress = Progress()
    state = UpState(
        pid=os.getpid(),
        token_file="TETHER_OPERATOR_TOKEN"
        if os.environ.get("TETHER_OPERATOR_TOKEN")
        else str(base / OPERATOR_TOKEN_FILE),
        provider=os.environ.get("TETHER_PROVIDER", "rules"),
        version=importlib.metadata.version("tether-client"),
    )
    async with AsyncExitStack() as stack:
        nats_url, passwords = await start_bus(base, stack, progress, state)
        database_url = await start_database(base, stack, progress)
        state.database = database_url.rsplit("@", 1)[-1].split("/", 1)[0]
        env = {
            "TETHER_NATS_URL": nats_url,
            "TETHER_DATABASE_URL": database_url,
            "TETHER_OPERATOR_TOKEN": operator_token(base),
            "TETHER_DECISION_KEY": decision_key(base),
            "TETHER_RUNNER_WORKSPACE": os.environ.get("TETHER_RUNNER_WORKSPACE")
            or str(base / "workspace"),
            "TETHER_LOG_FORMAT": log_format(wanted_logs),
        }
        Path(env["TETHER_RUNNER_WORKSPACE"]).mkdir(parents=True, exist_ok=True)

        def own_credentials(spec: ServiceSpec) -> dict[str, str]:
            # With an outside NATS, credentials come from the environment as before.
            return service_env(spec.name, passwords[spec.name]) if passwords else {}

        if os.environ.get("TETHER_PROVIDER") == "local":
            progress.step("starting the local model")
        local = await start_local_model(stack, base)
        if local:
            state.local_model_url = local["TETHER_GATEWAY_LOCAL_BASE_URL"]
            progress.ready(
                "local model", f"{state.local_model_url} ({local['TETHER_GATEWAY_LOCAL_MODEL']})"
            )
        env |= local
        supervisor = Supervisor(env, restart=True, env_for=own_credentials)
        for name, port in ports.items():
            supervisor.child(name).port = port
        stack.push_async_callback(supervisor.stop)
        progress.step(f"starting {len(supervisor.children)} services")
        await supervisor.start()

        def service_ready(child: Child) -> None:
            pid = child.proc.pid if child.proc is not None else None
            state.services[child.label] = {"url": child.url, "pid": pid}
            progress.ready(child.label, f"{child.url}  pid {pid}")

        await wait_own_ready(supervisor, timeout=120, on_ready=service_ready)
        write_state(state)
        stack.callback(forget_state, state)
        summary(state, supervisor)
        await wait_for_signal()
    return 0


def forget_state(state: UpState) -> None:
    """Remove `up.json` if it is still this process's (a newer `up` may have replaced it)."""
    path = state_path()
    with suppress(OSError, ValueError):
        if json.loads(path.read_text()).get("pid") == state.pid:
            path.unlink()


def run_up(wanted_logs: LogFormat = "auto") -> int:
    """`tether up` from the command line: Ctrl-C ends it quietly."""
    try:
        return asyncio.run(up(wanted_logs))
    except KeyboardInterrupt:  # Ctrl-C before everything was ready: it is all stopped
        return 130


async def wait_for_signal() -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
