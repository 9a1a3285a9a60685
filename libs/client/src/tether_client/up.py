"""`tether up`: the whole system on this machine.

Starts an embedded NATS (JetStream) and an embedded PostgreSQL with data under
`TETHER_HOME` (default `~/.tether`) unless `TETHER_NATS_URL` / `TETHER_DATABASE_URL` name
real ones, then the five services under the supervisor, and prints the API address.
Ctrl-C (or SIGTERM) stops everything it started.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import signal
from contextlib import AsyncExitStack
from pathlib import Path

from tether_common.embedded import EmbeddedPostgres, NatsServer, free_port
from tether_common.settings import default_home
from tether_common.supervisor import Supervisor


def home() -> Path:
    return Path(os.environ.get("TETHER_HOME") or default_home()).expanduser()


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


async def up() -> int:
    base = home()
    base.mkdir(parents=True, exist_ok=True)
    async with AsyncExitStack() as stack:
        nats_url = os.environ.get("TETHER_NATS_URL")
        if not nats_url:
            nats = NatsServer(base / "nats", port=port_or_free(4222)).start()
            stack.callback(nats.stop)
            nats_url = nats.url
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
        supervisor = Supervisor(env, restart=True, fixed_ports=True)
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
