"""The suite's stacks, made by the code that makes `tether up`'s system
(`tether_client.system`): a nats-server of their own locked by the generated
configuration, each service its own NATS user with only its own secrets, the home and
workspace of one installation. What a test adds is explicit: its extra environment, and
an all-rights `observer` NATS user for the test's own clients beside the services."""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

from tether_client.server.natsauth import CLIENT_USER
from tether_client.server.supervisor import SERVICES, ServiceSpec, Supervisor
from tether_client.system import LockedBus, start_locked_nats, system_env, system_supervisor
from tether_common.bus import Bus
from tether_common.decisions import new_key
from tether_common.subjects import Subjects
from tether_common.topology import BY_NAME

OBSERVER = "observer"
READY_S = 180.0  # services import slowly on a loaded two-core machine
_BUSES: dict[int, LockedBus] = {}


@asynccontextmanager
async def one_service(
    name: str,
    database_url: str,
    *,
    operator_token: str,
    extra_env: Mapping[str, str] | None = None,
    ready_s: float = 60.0,
) -> AsyncIterator[Supervisor]:
    """One service alone (the test plays the others on the bus as the observer), started
    as `tether up` starts it."""
    async with shipped_stack(
        None,
        database_url,
        operator_token=operator_token,
        extra_env=extra_env,
        specs=(BY_NAME[name],),
        ready_s=ready_s,
    ) as supervisor:
        yield supervisor


@asynccontextmanager
async def shipped_stack(
    base: Path | None,
    database_url: str,
    *,
    operator_token: str,
    decision_key: str | None = None,
    extra_env: Mapping[str, str] | None = None,
    prefix: str | None = None,
    specs: tuple[ServiceSpec, ...] = SERVICES,
    ready_s: float = READY_S,
) -> AsyncIterator[Supervisor]:
    """The five services (or some: `specs`, said by the test) as `tether up` starts them,
    under `base` (None: a temporary home, removed afterwards; not under pytest's private
    basetemp, as the sandbox's user needs the workspace); their logs are printed when they
    fail to start. The decision key is the suite's (`TETHER_DECISION_KEY`) unless given."""
    prefix = prefix or f"s{uuid.uuid4().hex[:10]}"
    async with AsyncExitStack() as stack:
        if base is None:
            base = Path(tempfile.mkdtemp(prefix="tether-stack-"))
            stack.callback(shutil.rmtree, base, ignore_errors=True)
        logs = base / "logs"
        bus = start_locked_nats(
            base, stack, prefix=prefix, observers={OBSERVER: secrets.token_urlsafe(24)}
        )
        env = system_env(
            base,
            nats_url=bus.url,
            database_url=database_url,
            operator_token=operator_token,
            decision_key=decision_key or os.environ.get("TETHER_DECISION_KEY") or new_key(),
        )
        env |= {"TETHER_SUBJECT_PREFIX": prefix, "TETHER_LOG_LEVEL": "INFO"}
        env |= dict(extra_env or {})
        supervisor = system_supervisor(env, bus.passwords, restart=False, log_dir=logs, specs=specs)
        _BUSES[id(supervisor)] = bus
        stack.callback(_BUSES.pop, id(supervisor), None)
        stack.push_async_callback(supervisor.stop)
        try:
            await supervisor.start()
            await supervisor.wait_ready(timeout=ready_s)
        except BaseException:
            print_logs(logs)
            raise
        yield supervisor


def locked_bus(stack: Supervisor) -> LockedBus:
    return _BUSES[id(stack)]


async def observe(stack: Supervisor, service: str = "test") -> Bus:
    """A bus client with every right on `stack`'s bus (the test's own, not a service's)."""
    return await _connect(stack, OBSERVER, locked_bus(stack).observers[OBSERVER], service)


async def as_client(stack: Supervisor) -> Bus:
    """A bus client as an API client connects: the `client` user, in its own account."""
    return await _connect(stack, CLIENT_USER, locked_bus(stack).passwords[CLIENT_USER])


async def _connect(stack: Supervisor, user: str, password: str, service: str = "") -> Bus:
    return await Bus.connect(
        locked_bus(stack).url,
        service=service or user,
        subjects=Subjects(stack.env["TETHER_SUBJECT_PREFIX"]),
        user=user,
        password=password,
    )


def print_logs(logs: Path) -> None:
    for log_file in sorted(logs.glob("*.log")):
        print(f"--- {log_file.name}\n{log_file.read_text()[-4000:]}")  # noqa: T201
