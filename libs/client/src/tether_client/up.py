"""`tether up`: the whole system on this machine.

Starts an embedded NATS (JetStream) and an embedded PostgreSQL with data under
`TETHER_HOME` (default `~/.tether`) unless `TETHER_NATS_URL` / `TETHER_DATABASE_URL` name
real ones, then the five services under the supervisor, and prints the API address.
Ctrl-C (or SIGTERM) stops everything it started.

The embedded NATS is locked down: its configuration is generated from the subject
declarations (`tether_common.natsauth`) with fresh passwords on every start, and each
service connects as its own user. With `TETHER_NATS_TLS_CERT` and `TETHER_NATS_TLS_KEY`
the server speaks TLS only and services get a `tls://` URL.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import signal
from contextlib import AsyncExitStack, suppress
from pathlib import Path

from tether_common.embedded import EmbeddedPostgres, NatsServer, free_port
from tether_common.natsauth import (
    CLIENT_USER,
    TlsFiles,
    generate_passwords,
    render_config,
    service_env,
    write_config,
)
from tether_common.settings import CommonSettings, tether_home
from tether_common.subjects import Subjects
from tether_common.supervisor import ServiceSpec, Supervisor


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


def operator_token(base: Path) -> str:
    """The operator token from the environment, or one made once and kept in TETHER_HOME."""
    if token := os.environ.get("TETHER_OPERATOR_TOKEN"):
        return token
    path = base / "operator-token"
    if not path.exists():
        path.write_text(secrets.token_urlsafe(32))
        path.chmod(0o600)
    return path.read_text().strip()


def port_or_free(preferred: int) -> int:
    try:
        import socket

        with socket.socket() as sock:
            sock.bind(("127.0.0.1", preferred))
        return preferred
    except OSError:
        return free_port()


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
    config_file = write_config(base / "nats" / "nats-server.conf", config)
    write_config(base / "nats" / "client-password", passwords[CLIENT_USER])
    nats = NatsServer(base / "nats", port=port_or_free(4222), config_file=config_file).start()
    stack.callback(nats.stop)
    url = nats.url.replace("nats://", "tls://") if tls is not None else nats.url
    return url, passwords


async def up() -> int:
    base = tether_home()
    base.mkdir(parents=True, exist_ok=True)
    async with AsyncExitStack() as stack:
        nats_url = os.environ.get("TETHER_NATS_URL")
        passwords: dict[str, str] = {}
        if not nats_url:
            nats_url, passwords = start_locked_nats(base, stack)
        database_url = os.environ.get("TETHER_DATABASE_URL")
        if not database_url:
            pg = EmbeddedPostgres(base / "postgres", port=port_or_free(5432))
            pg.start()
            stack.callback(pg.stop)
            database_url = pg.url
        env = {
            "TETHER_NATS_URL": nats_url,
            "TETHER_DATABASE_URL": database_url,
            "TETHER_OPERATOR_TOKEN": operator_token(base),
            "TETHER_RUNNER_WORKSPACE": os.environ.get("TETHER_RUNNER_WORKSPACE")
            or str(base / "workspace"),
        }
        Path(env["TETHER_RUNNER_WORKSPACE"]).mkdir(parents=True, exist_ok=True)

        def own_credentials(spec: ServiceSpec) -> dict[str, str]:
            # With an outside NATS, credentials come from the environment as before.
            return service_env(spec.name, passwords[spec.name]) if passwords else {}

        env |= await start_local_model(stack, base)
        supervisor = Supervisor(env, restart=True, fixed_ports=True, env_for=own_credentials)
        stack.push_async_callback(supervisor.stop)
        await supervisor.start()
        await supervisor.wait_ready(timeout=120)
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
