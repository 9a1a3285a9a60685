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
declarations (`tether_client.server.natsauth`) with fresh passwords on every start, and each
service connects as its own user. With `TETHER_NATS_TLS_CERT` and `TETHER_NATS_TLS_KEY`
the server speaks TLS only and services get a `tls://` URL.

One `tether up` per home: it holds `TETHER_HOME/up.lock` (an exclusive `flock`, which the
kernel lets go when the process ends, however it ends) from before anything starts until
everything has stopped. A second one on the same home exits at once (code 6) naming the
first's pid and, once it is ready, its addresses; an `up.json` left by a process that is
gone blocks nothing.

Each service listens on `TETHER_<SERVICE>_HTTP_PORT` when set (0: any free port), else on
its usual port (8700–8704). A port that is taken (by a listening socket: the connections
a stopped server leaves in TIME_WAIT do not count, as servers bind with `SO_REUSEADDR`),
out of range or named twice stops `tether up` before anything starts, with one line naming
the port, who holds it when this system can tell, and the variable to set. A usual port is
never silently swapped for another: the console's address would change under a bookmark,
and the CLI of another home would find the wrong system. NATS and PostgreSQL, which only
`tether up`'s own processes reach (through `up.json`), move to a free port when theirs is
taken, and the progress line says so.

Readiness is asked of the processes `tether up` started: a service counts only once the
process it launched holds the listening socket on the port it was given (read from /proc
where there is one), so another instance on the same machine answering `/readyz` on that
port is never taken for it.

Nothing `tether up` prints at the default log level is a traceback: a failure to start is
one line (`--log-level debug` adds the traceback, and the services' debug logs).
"""

from __future__ import annotations

import asyncio
import fcntl
import importlib.metadata
import json
import os
import secrets
import signal
import socket
import sys
import time
import traceback
from collections.abc import Callable, Mapping
from contextlib import AsyncExitStack, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

from rich.text import Text

from tether_client.console import safe, stderr, stdout
from tether_client.endpoints import UpState, read_state, state_path, write_state
from tether_client.exits import ExitCode
from tether_client.server.embedded import EmbeddedPostgres, free_port
from tether_client.server.secretfiles import narrow, private_dir, secret_in
from tether_client.server.supervisor import SERVICES, Child, ServiceSpec, Supervisor
from tether_client.system import (
    NATS_CLIENT_PASSWORD_FILE,
    NATS_CONFIG_FILE,
    new_credentials_key,
    start_locked_nats,
    system_env,
    system_supervisor,
)
from tether_common.decisions import new_key
from tether_common.errors import ConfigError
from tether_common.settings import tether_home

LogFormat = Literal["auto", "text", "json"]
LogLevel = Literal["debug", "info", "warning", "error"]
LOCK_FILE = "up.lock"  # held by the running `tether up` of this home (`hold_home`)


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


# Secrets `tether up` keeps in TETHER_HOME, each mode 0600 (tether_client.server.secretfiles).
OPERATOR_TOKEN_FILE = "operator-token"
DECISION_KEY_FILE = "decision-key"
CREDENTIALS_KEY_FILE = "credentials-key"  # seals tool servers' credentials (the runner's)
PG_PASSWORD_FILE = "postgres/password"
SECRET_FILES = (
    OPERATOR_TOKEN_FILE,
    DECISION_KEY_FILE,
    CREDENTIALS_KEY_FILE,
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


def credentials_key(base: Path) -> str:
    """The key the runner seals tool servers' credentials with: from the environment, or
    made once and kept in TETHER_HOME (never in the database, so a copy of it opens
    nothing)."""
    if key := os.environ.get("TETHER_RUNNER_CREDENTIALS_KEY"):
        return key
    return secret_in(base / CREDENTIALS_KEY_FILE, new_credentials_key)[0]


def port_free(port: int) -> bool:
    """Whether a server could listen on loopback `port` now. Bound as servers bind (with
    `SO_REUSEADDR`: uvicorn, nats-server and PostgreSQL all do), so the connections a
    server that just stopped left in TIME_WAIT do not count; a listening socket does."""
    try:
        with socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("127.0.0.1", port))
    except OSError:
        return False
    return True


def port_or_free(preferred: int) -> int:
    return preferred if port_free(preferred) else free_port()


def _configured_port(spec: ServiceSpec, raw: str) -> int:
    try:
        port = int(raw)
    except ValueError:
        raise ConfigError(f"{spec.port_env}={raw!r} is not a port number") from None
    if not 0 <= port <= 65535:
        raise ConfigError(f"{spec.port_env}={port} is not a port number")
    return port


def _busy(port: int, spec: ServiceSpec, *, configured: bool) -> ConfigError:
    holder = port_holder(port)
    by = f" by {holder}" if holder else ""
    if configured:
        return ConfigError(
            f"port {port} ({spec.port_env}) is in use{by}: set {spec.port_env} to another "
            "port (0: any free one)"
        )
    return ConfigError(
        f"port {port}, the {spec.name}'s usual port, is in use{by}: set {spec.port_env} to "
        "another port (0: any free one), or stop what holds it"
    )


def http_ports(
    environ: Mapping[str, str], specs: tuple[ServiceSpec, ...] = SERVICES
) -> dict[str, int]:
    """Each service's HTTP port: `TETHER_<SERVICE>_HTTP_PORT` (0: any free port), else its
    usual one. A port that is taken, out of range or given to two services is a
    `ConfigError`: moving it would leave a bookmarked console, or a client of this home,
    talking to whatever holds it."""
    ports: dict[str, int] = {}
    for spec in specs:
        raw = environ.get(spec.port_env, "").strip()
        port = _configured_port(spec, raw) if raw else spec.default_port
        if port == 0:
            while (port := free_port()) in ports.values():
                pass  # the system may hand out a port it just handed out
        elif not port_free(port):
            raise _busy(port, spec, configured=bool(raw))
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


def _holds(pid: int, inodes: set[str]) -> bool:
    """Whether process `pid` has one of the sockets `inodes` open (False: gone, or not
    ours to read)."""
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return False
    for fd in fds:
        try:
            link = os.readlink(fd)
        except OSError:
            continue  # closed since the listing
        if link.startswith("socket:[") and link[8:-1] in inodes:
            return True
    return False


def holds_port(pid: int, port: int) -> bool | None:
    """Whether process `pid` holds the socket listening on `port` (None: this system
    cannot tell, e.g. no /proc)."""
    inodes = _listening_inodes(port)
    if inodes is None:
        return None
    return _holds(pid, inodes)


def port_holder(port: int) -> str | None:
    """Who listens on `port`, as "pid N (name)", when /proc lets this process see it."""
    inodes = _listening_inodes(port)
    if not inodes:
        return None
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and _holds(int(entry.name), inodes):
            try:
                return f"pid {entry.name} ({(entry / 'comm').read_text().strip()})"
            except OSError:
                return f"pid {entry.name}"
    return None


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


# The usual ports of what only `tether up`'s own processes reach (through `up.json`):
# moved to a free port when taken, and said so.
NATS_PORT, NATS_MONITOR_PORT, PG_PORT = 4222, 8222, 5432


def moved(port: int, usual: int) -> str:
    return "" if port == usual else f"; {usual} was in use"


async def start_database(base: Path, stack: AsyncExitStack, progress: Progress) -> str:
    if database_url := os.environ.get("TETHER_DATABASE_URL"):
        progress.ready("PostgreSQL", "TETHER_DATABASE_URL (not started here)")
        return database_url
    progress.step("starting PostgreSQL")
    port = port_or_free(PG_PORT)
    pg = EmbeddedPostgres(base / "postgres", port=port, password_file=base / PG_PASSWORD_FILE)
    await asyncio.to_thread(pg.start)
    stack.callback(pg.stop)
    progress.ready(
        "PostgreSQL",
        f"127.0.0.1:{pg.port} (embedded, data in {base / 'postgres'}{moved(port, PG_PORT)})",
    )
    return pg.url  # carries the password: handed to services, never printed


async def start_bus(
    base: Path, stack: AsyncExitStack, progress: Progress, state: UpState
) -> tuple[str, dict[str, str]]:
    if nats_url := os.environ.get("TETHER_NATS_URL"):
        progress.ready("NATS", "TETHER_NATS_URL (not started here)")
        state.nats_monitor_url = os.environ.get("TETHER_NATS_MONITOR_URL")
        return nats_url, {}
    progress.step("starting NATS")
    port, monitor = port_or_free(NATS_PORT), port_or_free(NATS_MONITOR_PORT)
    bus = start_locked_nats(base, stack, port=port, monitor_port=monitor)
    state.nats_url, state.nats_monitor_url = bus.url, f"http://127.0.0.1:{monitor}"
    notes = moved(port, NATS_PORT) + moved(monitor, NATS_MONITOR_PORT)
    progress.ready("NATS", f"{bus.url} (embedded, JetStream; monitor :{monitor}{notes})")
    return bus.url, bus.passwords


@dataclass(frozen=True, slots=True)
class Running:
    """The `tether up` that holds this home's lock: its pid (None: it has not written it
    yet) and its `up.json` once it is ready."""

    pid: int | None
    state: UpState | None

    def message(self, base: Path) -> str:
        pid = "pid unknown" if self.pid is None else f"pid {self.pid}"
        if self.state is None or not self.state.services:
            where = f"{pid}, still starting"
        else:
            brain = self.state.services.get("brain", {}).get("url", "?")
            approvals = self.state.services.get("approvals", {}).get("url", "?")
            where = f"{pid}: API {brain}, console {brain}/console, approvals {approvals}"
        stop = "" if self.pid is None else f" or `kill {self.pid}`"
        return (
            f"tether up is already running for {base} ({where}); stop it first "
            f"(Ctrl-C where it runs{stop}) or set TETHER_HOME to another folder"
        )


def hold_home(base: Path) -> int | Running:
    """This home's lock (`up.lock`), as an open descriptor to keep until everything has
    stopped, or the `tether up` holding it. An exclusive `flock`: taken and tested in one
    step, so two starting at once cannot both pass, and let go by the kernel when its
    holder ends however it ends, so nothing stale blocks (nor does a stale `up.json`)."""
    fd = os.open(base / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        try:
            holder = int(os.pread(fd, 32, 0).decode().strip() or "x")
        except ValueError:
            holder = None  # between its lock and its pid
        finally:
            os.close(fd)
        state = read_state()
        return Running(holder, state if state is not None and state.pid == holder else None)
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


async def up(wanted_logs: LogFormat = "auto", log_level: LogLevel = "info") -> int:
    base = private_dir(tether_home())
    held = hold_home(base)
    if isinstance(held, Running):
        one_line(f"error: {held.message(base)}")
        return ExitCode.CONFLICT
    async with AsyncExitStack() as stack:
        stack.callback(os.close, held)  # let go last, once everything has stopped
        await start_system(base, stack, wanted_logs, log_level)
        await wait_for_signal()
    return 0


async def start_system(
    base: Path, stack: AsyncExitStack, wanted_logs: LogFormat, log_level: LogLevel
) -> None:
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
    nats_url, passwords = await start_bus(base, stack, progress, state)
    database_url = await start_database(base, stack, progress)
    state.database = database_url.rsplit("@", 1)[-1].split("/", 1)[0]
    workspace = os.environ.get("TETHER_RUNNER_WORKSPACE")
    env = system_env(
        base,
        nats_url=nats_url,
        database_url=database_url,
        operator_token=operator_token(base),
        decision_key=decision_key(base),
        workspace=Path(workspace) if workspace else None,
        credentials_key=credentials_key(base),
    )
    env["TETHER_LOG_FORMAT"] = log_format(wanted_logs)
    env["TETHER_LOG_LEVEL"] = log_level.upper()

    if os.environ.get("TETHER_PROVIDER") == "local":
        progress.step("starting the local model")
    local = await start_local_model(stack, base)
    if local:
        state.local_model_url = local["TETHER_GATEWAY_LOCAL_BASE_URL"]
        progress.ready(
            "local model", f"{state.local_model_url} ({local['TETHER_GATEWAY_LOCAL_MODEL']})"
        )
    env |= local
    supervisor = system_supervisor(env, passwords, restart=True)
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


def forget_state(state: UpState) -> None:
    """Remove `up.json` if it is still this process's (a newer `up` may have replaced it)."""
    path = state_path()
    with suppress(OSError, ValueError):
        if json.loads(path.read_text()).get("pid") == state.pid:
            path.unlink()


def run_up(wanted_logs: LogFormat = "auto", log_level: LogLevel | None = None) -> int:
    """`tether up` from the command line: Ctrl-C ends it quietly; a failure to start is one
    line (and its traceback at `--log-level debug`), everything started stopped again."""
    level = log_level or default_log_level()
    try:
        return asyncio.run(up(wanted_logs, level))
    except KeyboardInterrupt:  # Ctrl-C before everything was ready: it is all stopped
        return ExitCode.INTERRUPTED
    except Exception as exc:
        return failed_to_start(exc, debug=level == "debug")


def default_log_level() -> LogLevel:
    """`TETHER_LOG_LEVEL` when it names a level, else info."""
    configured = os.environ.get("TETHER_LOG_LEVEL", "").strip().lower()
    level: LogLevel
    for level in get_args(LogLevel):
        if level == configured:
            return level
    return "info"


def failed_to_start(exc: Exception, *, debug: bool) -> int:
    """One line on why `tether up` could not start (a `ConfigError`: the operator's to
    fix; anything else: a bug or the machine, with the traceback at debug level)."""
    if debug:
        traceback.print_exception(exc, file=sys.stderr)
    if isinstance(exc, ConfigError):
        one_line(f"error: {exc.message}")
        return ExitCode.USAGE
    more = "" if debug else " (--log-level debug shows where)"
    one_line(f"error: tether up could not start: {type(exc).__name__}: {exc}{more}")
    return ExitCode.FAILED


def one_line(text: str) -> None:
    """`text` on standard error as one line, however wide the terminal."""
    stderr().print(Text(safe(" ".join(text.split())), style="red"), soft_wrap=True)


async def wait_for_signal() -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
