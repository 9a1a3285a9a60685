"""Runs Tether's services as child processes: one place that knows how each is started.

Used by `tether up` (restart on crash with back-off, log lines prefixed by service,
Ctrl-C stops everything it started, by pid) and by the end-to-end tests (the same
processes, logs to files, SIGKILL on demand for chaos tests).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from tether_client.server import forking
from tether_client.server.embedded import free_port
from tether_client.server.forking import Forked
from tether_common.errors import ConfigError
from tether_common.http import hash_token
from tether_common.retrying import Policy, delay_s
from tether_common.topology import OPERATOR_TOKEN_ENV, OPERATOR_TOKEN_HASH_ENV, may_see
from tether_common.topology import SERVICES as SERVICES  # the table, re-exported here
from tether_common.topology import ServiceSpec as ServiceSpec

log = logging.getLogger(__name__)

# Where the approvals service's own console address leads (its `console_url` setting).
CONSOLE_URL_ENV = "TETHER_APPROVALS_CONSOLE_URL"
# A child that exited is started again after 1 s, doubling to 30 s while it keeps exiting.
RESTART = Policy("restarting a service", 1.0, 30.0, jitter=False)


@dataclass
class Child:
    spec: ServiceSpec
    port: int
    replica: int = 0
    proc: Forked | None = None
    restarts: int = 0
    pump: asyncio.Task[None] | None = field(default=None, repr=False)

    @property
    def label(self) -> str:
        return self.spec.name if self.replica == 0 else f"{self.spec.name}-{self.replica}"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def service_env(spec: ServiceSpec, env: Mapping[str, str]) -> dict[str, str]:
    """What `spec`'s process is handed of `env`: none of the secrets it does not use
    (`topology.SECRET_ENV`), and the operator token only as its hash, to the services that
    accept it."""
    handed = {k: v for k, v in env.items() if may_see(spec.name, k)}
    token = env.get(OPERATOR_TOKEN_ENV)
    if token and may_see(spec.name, OPERATOR_TOKEN_HASH_ENV):
        handed[OPERATOR_TOKEN_HASH_ENV] = hash_token(token)
    return handed


async def _stream(fd: int) -> asyncio.StreamReader:
    """The read end of a child's output pipe as lines to pump."""
    reader = asyncio.StreamReader()
    loop = asyncio.get_running_loop()
    pipe = os.fdopen(fd, "rb", buffering=0)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), pipe)
    return reader


class Supervisor:
    """Starts services, restarts the ones that die, stops them all in order."""

    def __init__(
        self,
        env: Mapping[str, str],
        *,
        specs: tuple[ServiceSpec, ...] = SERVICES,
        restart: bool = True,
        log_dir: Path | None = None,
        fixed_ports: bool = False,
        env_for: Callable[[ServiceSpec], Mapping[str, str]] | None = None,
    ) -> None:
        self.env = dict(env)
        # Per-service additions (e.g. each service's own NATS credentials).
        self.env_for = env_for
        self.restart = restart
        self.log_dir = log_dir
        self.children: list[Child] = [
            Child(s, s.default_port if fixed_ports else free_port()) for s in specs
        ]
        self._stopping = False
        self._watchers: set[asyncio.Task[None]] = set()

    def child(self, name: str) -> Child:
        for child in self.children:
            if child.label == name:
                return child
        raise ConfigError(f"no service '{name}'")

    def add_replica(self, name: str) -> Child:
        """Another process of the same service (e.g. a second brain) on its own port."""
        base = self.child(name)
        replica = sum(1 for c in self.children if c.spec is base.spec)
        child = Child(base.spec, free_port(), replica=replica)
        self.children.append(child)
        return child

    async def start(self) -> None:
        for child in self.children:
            if child.proc is None:
                await self._launch(child)

    async def start_child(self, child: Child) -> None:
        await self._launch(child)

    async def _launch(self, child: Child) -> None:
        own = dict(self.env_for(child.spec)) if self.env_for is not None else {}
        env = service_env(child.spec, os.environ | self.env) | own
        env[child.spec.port_env] = str(child.port)
        env |= self._console_address(child.spec, env)
        reader: asyncio.StreamReader | None = None
        if self.log_dir is not None:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC
            out = os.open(self.log_dir / f"{child.label}.log", flags, 0o666)
        else:
            read_end, out = os.pipe()
            reader = await _stream(read_end)
        try:
            # Forked from an interpreter that has imported every service (`forkserver`):
            # what `python -m <module>` would be, its imports already done.
            child.proc = await forking.spawn(child.spec.module, env, out, os.getcwd())
        finally:
            os.close(out)  # the child holds its own descriptor
        if reader is not None:
            child.pump = asyncio.create_task(self._pump(child.label, reader))
        watcher = asyncio.create_task(self._watch(child, child.proc))
        self._watchers.add(watcher)
        watcher.add_done_callback(self._watchers.discard)

    def _console_address(self, spec: ServiceSpec, env: Mapping[str, str]) -> dict[str, str]:
        """The approvals service's `/console` leads to the brain's, the one console, on
        whatever port this supervisor gave the brain (unless the address is set)."""
        brain = next((c for c in self.children if c.spec.name == "brain"), None)
        if spec.name != "approvals" or brain is None or CONSOLE_URL_ENV in env:
            return {}
        return {CONSOLE_URL_ENV: f"{brain.url}/console"}

    async def _pump(self, label: str, stream: asyncio.StreamReader) -> None:
        async for line in stream:
            sys.stdout.write(f"[{label}] {line.decode(errors='replace')}")
            sys.stdout.flush()

    async def _watch(self, child: Child, proc: Forked) -> None:
        code = await proc.wait()
        if self._stopping or not self.restart or child.proc is not proc:
            return
        child.restarts += 1
        delay = delay_s(RESTART, child.restarts)
        log.warning("%s exited with %s; restarting in %.1fs", child.label, code, delay)
        await asyncio.sleep(delay)
        if not self._stopping:
            await self._launch(child)

    async def wait_ready(self, timeout: float = 60.0, children: list[Child] | None = None) -> None:
        deadline = time.monotonic() + timeout
        async with httpx.AsyncClient(timeout=2.0) as client:
            for child in children or self.children:
                while True:
                    with contextlib.suppress(httpx.HTTPError):
                        if (await client.get(f"{child.url}/readyz")).status_code == 200:
                            break
                    if time.monotonic() > deadline:
                        raise ConfigError(f"{child.label} not ready after {timeout}s")
                    await asyncio.sleep(0.1)

    def kill(self, name: str) -> None:
        """SIGKILL one service (chaos tests); it is restarted if `restart` is on."""
        proc = self.child(name).proc
        if proc is not None and proc.returncode is None:
            proc.send_signal(signal.SIGKILL)

    async def stop_child(self, child: Child, timeout: float = 15.0) -> int | None:
        proc, child.proc = child.proc, None
        if proc is None or proc.returncode is not None:
            return None if proc is None else proc.returncode
        proc.send_signal(signal.SIGTERM)
        try:
            return await asyncio.wait_for(proc.wait(), timeout)
        except TimeoutError:
            proc.kill()
            return await proc.wait()

    async def stop(self) -> None:
        """SIGTERM in reverse start order (the brain first), SIGKILL after a grace period."""
        self._stopping = True
        for child in reversed(self.children):
            await self.stop_child(child)
            if child.pump is not None:
                await child.pump
        for watcher in list(self._watchers):
            watcher.cancel()
