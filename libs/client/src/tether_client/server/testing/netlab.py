"""Several hosts on one machine, for partition tests and benchmarks: Linux network
namespaces joined by one bridge, links that can be cut and healed, and PostgreSQL, a
NATS cluster and Tether's services started inside them as real processes.

Needs root and iproute2 (`ip`); and iptables where br_netfilter is on (dockerd loads it
and sets the FORWARD policy to DROP, which would drop the frames between the lab's hosts):
the lab then accepts its own bridge's traffic with one rule, removed when it closes.
A cut is a pair of blackhole routes, one in each namespace, so packets between two hosts
vanish both ways while each keeps every other link: new connections fail, open ones go silent, as across a real
partition. `isolate` takes a host's whole link down.

Servers are started from a thread that has entered the host's namespace (`setns` is per
thread), so they and every process they fork live there; services are started through
`ip netns exec`. Each is armed to die with this process (`tether_common.lifeline`). Everything started is stopped by `LabStack.close`, then the namespaces
and the bridge are deleted.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import os
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import IO, TypeVar

import httpx

from tether_client.server.embedded import EmbeddedPostgres, NatsServer
from tether_client.server.supervisor import SERVICES, ServiceSpec
from tether_common import lifeline
from tether_common.bus import Bus
from tether_common.decisions import new_key
from tether_common.errors import ConfigError
from tether_common.settings import async_database_url
from tether_common.subjects import Subjects

T = TypeVar("T")

CLONE_NEWNET = 0x40000000
NATS_CLIENT_PORT = 4222
NATS_CLUSTER_PORT = 6222


def require_root() -> None:
    """Fail (never skip) with what is missing: the partition tests must run in CI."""
    if os.geteuid() != 0:
        raise ConfigError("network namespaces need root: run the partition tests as root (CI does)")
    if shutil.which("ip") is None:
        raise ConfigError("`ip` not found: install the iproute2 package")


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise ConfigError(f"ip {' '.join(args)}: {done.stderr.strip()}")


@dataclass(frozen=True, slots=True)
class Host:
    """One namespace on the bridge: its label, namespace name, address, bridge-side link."""

    name: str
    netns: str
    ip: str
    link: str


def _free_subnet() -> str:
    """A /24 under 10/8 that no route of this machine uses (its first three octets)."""
    routes = subprocess.run(["ip", "-4", "route"], capture_output=True, text=True).stdout
    for _ in range(200):
        prefix = f"10.{secrets.randbelow(150) + 100}.{secrets.randbelow(250) + 1}"
        if f"{prefix}." not in routes:
            return prefix
    raise ConfigError("no free 10.x.y.0/24 subnet for the lab")


BRIDGE_NETFILTER = Path("/proc/sys/net/bridge/bridge-nf-call-iptables")


def _bridge_filtered() -> bool:
    """Whether bridged frames pass iptables (br_netfilter loaded and on)."""
    try:
        return BRIDGE_NETFILTER.read_text().strip() == "1"
    except OSError:
        return False


def _iptables(*args: str) -> None:
    if shutil.which("iptables") is None:
        raise ConfigError("br_netfilter is on (Docker loads it): install the iptables package")
    done = subprocess.run(["iptables", "-w", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise ConfigError(f"iptables {' '.join(args)}: {done.stderr.strip()}")


class NetLab:
    """A bridge and the hosts on it; a context manager that deletes them all."""

    def __init__(self) -> None:
        require_root()
        self.tag = secrets.token_hex(3)
        self.bridge = f"tlb{self.tag}"
        self.subnet = _free_subnet()
        self.hosts: dict[str, Host] = {}
        self._cuts: set[tuple[str, str]] = set()
        self._threads: dict[str, ThreadPoolExecutor] = {}
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", f"{self.subnet}.1/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        # Between the lab's hosts only; Docker's own chains and policy stay as they are.
        self._accept = ("FORWARD", "-i", self.bridge, "-o", self.bridge, "-j", "ACCEPT")
        self._accepting = _bridge_filtered()
        if self._accepting:
            _iptables("-I", *self._accept)

    @property
    def network(self) -> str:
        return f"{self.subnet}.0/24"

    def add(self, name: str) -> Host:
        index = len(self.hosts) + 10
        host = Host(name, f"tl{self.tag}-{name}", f"{self.subnet}.{index}", f"tv{self.tag}{index}")
        peer = f"tp{self.tag}{index}"
        _ip("netns", "add", host.netns)
        self.hosts[name] = host
        _ip("link", "add", host.link, "type", "veth", "peer", "name", peer)
        _ip("link", "set", peer, "netns", host.netns)
        _ip("link", "set", host.link, "master", self.bridge, "up")
        _ip("-n", host.netns, "addr", "add", f"{host.ip}/24", "dev", peer)
        _ip("-n", host.netns, "link", "set", peer, "up")
        _ip("-n", host.netns, "link", "set", "lo", "up")
        return host

    def cut(self, a: Host, b: Host) -> None:
        """Packets between `a` and `b` vanish, both ways."""
        for one, other in ((a, b), (b, a)):
            _ip("-n", one.netns, "route", "add", "blackhole", f"{other.ip}/32")
            self._cuts.add((one.netns, other.ip))

    def heal(self, a: Host, b: Host) -> None:
        for one, other in ((a, b), (b, a)):
            if (one.netns, other.ip) in self._cuts:
                _ip("-n", one.netns, "route", "del", "blackhole", f"{other.ip}/32")
                self._cuts.discard((one.netns, other.ip))

    def isolate(self, host: Host) -> None:
        _ip("link", "set", host.link, "down")

    def rejoin(self, host: Host) -> None:
        _ip("link", "set", host.link, "up")

    def call_in(self, host: Host, fn: Callable[[], T]) -> T:
        """`fn()` on `host`'s own thread, inside its namespace: what it forks stays there.
        The thread lives until the lab closes, because the servers it starts are armed to
        die with the thread that forked them (`lifeline`)."""

        def body() -> T:
            _enter(host.netns)  # again on every call: cheap, and the same namespace
            lifeline.fork_here()
            return fn()

        thread = self._threads.get(host.name)
        if thread is None:
            thread = ThreadPoolExecutor(1, thread_name_prefix=f"netns-{host.name}")
            self._threads[host.name] = thread
        return thread.submit(body).result()

    def command(self, host: Host, argv: list[str]) -> list[str]:
        return ["ip", "netns", "exec", host.netns, *argv]

    def close(self) -> None:
        for thread in self._threads.values():  # what each started goes with it
            thread.shutdown(wait=True)
        for host in self.hosts.values():
            with contextlib.suppress(ConfigError):
                _ip("netns", "del", host.netns)  # its veth pair goes with it
        with contextlib.suppress(ConfigError):
            _ip("link", "del", self.bridge)
        if self._accepting:
            with contextlib.suppress(ConfigError):
                _iptables("-D", *self._accept)

    def __enter__(self) -> NetLab:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _enter(netns: str) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(f"/run/netns/{netns}", os.O_RDONLY | os.O_CLOEXEC)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, f"setns into {netns}: {os.strerror(errno)}")
    finally:
        os.close(fd)


@dataclass
class LabPostgres(EmbeddedPostgres):
    """The embedded PostgreSQL, also accepting (with the password) the lab's network."""

    network: str = ""

    def _write_hba(self) -> None:
        super()._write_hba()
        with (self.data_dir / "pg_hba.conf").open("a") as hba:
            hba.write(f"host all all {self.network} scram-sha-256\n")


def cluster_config(path: Path, name: str, me: Host, peers: list[Host]) -> Path:
    """A nats-server cluster member's configuration (JetStream on; its own name)."""
    routes = [f"nats-route://{p.ip}:{NATS_CLUSTER_PORT}" for p in peers if p != me]
    text = (
        f"server_name: {json.dumps(name)}\n"
        "cluster {\n"
        '  name: "tether-lab"\n'
        f'  listen: "{me.ip}:{NATS_CLUSTER_PORT}"\n'
        f"  routes: {json.dumps(routes)}\n"
        "}\n"
    )
    path.write_text(text)
    return path


@dataclass
class LabService:
    """One service process inside a host."""

    label: str
    spec: ServiceSpec
    host: Host
    log: Path
    proc: asyncio.subprocess.Process | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host.ip}:{self.spec.default_port}"

    def kill(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.kill()

    def logged(self, text: str) -> datetime | None:
        """When the service first logged a message containing `text` (its JSON `ts`)."""
        for entry in self.lines():
            if text in str(entry.get("msg", "")):
                return datetime.fromisoformat(str(entry["ts"]))
        return None

    def stopped_acting(self, run_id: str) -> datetime | None:
        """When this brain stopped acting on the run: fenced it, or its task ended by
        itself on a failed commit (database unreachable, or the fence moved on)."""
        said = (f"fenced run {run_id}", f"run {run_id} paused", f"run {run_id} handed over")
        return min((t for t in map(self.logged, said) if t is not None), default=None)

    def lines(self) -> list[dict[str, object]]:
        """The service's JSON log records so far (other lines skipped)."""
        records = []
        for raw in self.log.read_text(errors="replace").splitlines():
            with contextlib.suppress(ValueError):
                entry = json.loads(raw)
                if isinstance(entry, dict):
                    records.append(entry)
        return records


@dataclass
class LabStack:
    """PostgreSQL on one host, a NATS cluster on others, Tether services on the rest."""

    lab: NetLab
    base: Path
    env: dict[str, str] = field(default_factory=dict)
    postgres: LabPostgres | None = None
    nats: list[NatsServer] = field(default_factory=list)
    nats_hosts: list[Host] = field(default_factory=list)
    services: list[LabService] = field(default_factory=list)

    async def start_postgres(self, host: Host) -> LabPostgres:
        server = LabPostgres(self.base / "pg", host=host.ip, network=self.lab.network)
        await asyncio.to_thread(self.lab.call_in, host, server.start)
        self.postgres = server
        return server

    async def start_nats(self, hosts: list[Host]) -> None:
        """One cluster member per host; every node must be up before any is ready."""
        self.nats_hosts = hosts
        for i, host in enumerate(hosts):
            folder = self.base / f"nats{i + 1}"
            folder.mkdir(parents=True, exist_ok=True)
            config = cluster_config(folder / "cluster.conf", f"n{i + 1}", host, hosts)
            self.nats.append(NatsServer(folder, NATS_CLIENT_PORT, config, host.ip))
        await asyncio.gather(*(self.start_node(i) for i in range(len(hosts))))

    async def start_node(self, index: int) -> None:
        """Start (or restart, same store) the `index`th NATS node."""
        server = self.nats[index]
        await asyncio.to_thread(self.lab.call_in, self.nats_hosts[index], server.start)

    def kill_node(self, index: int) -> None:
        self.nats[index].stop(kill=True)

    @property
    def nats_url(self) -> str:
        return ",".join(server.url for server in self.nats)

    @property
    def database_url(self) -> str:
        if self.postgres is None:
            raise ConfigError("the lab's PostgreSQL is not started")
        return self.postgres.url

    def service_env(self) -> dict[str, str]:
        return {
            "TETHER_NATS_URL": self.nats_url,
            "TETHER_DATABASE_URL": async_database_url(self.database_url),
            "TETHER_NATS_STREAM_REPLICAS": str(min(3, len(self.nats))),
        } | self.env

    async def start_service(self, name: str, host: Host, label: str | None = None) -> LabService:
        spec = next(s for s in SERVICES if s.name == name)
        service = LabService(label or name, spec, host, self.base / "logs" / f"{label or name}.log")
        self.services.append(service)
        await self.launch(service)
        return service

    async def launch(self, service: LabService) -> None:
        """Start (or start again) a service in its host, logging to its file."""
        spec = service.spec
        env = os.environ | self.service_env()
        env |= {f"{spec.env_prefix}HTTP_HOST": service.host.ip}
        env |= {spec.port_env: str(spec.default_port)}
        service.log.parent.mkdir(parents=True, exist_ok=True)
        out: IO[bytes] = service.log.open("ab")
        try:
            service.proc = await asyncio.create_subprocess_exec(
                *self.lab.command(service.host, [sys.executable, "-m", spec.module]),
                env=env,
                stdout=out,
                stderr=asyncio.subprocess.STDOUT,
                preexec_fn=lifeline.preexec(),  # dies with this process
            )
        finally:
            out.close()  # the child holds its own descriptor

    async def wait_ready(self, services: list[LabService], timeout: float = 90.0) -> None:
        deadline = time.monotonic() + timeout
        async with httpx.AsyncClient(timeout=2.0) as client:
            for service in services:
                while True:
                    with contextlib.suppress(httpx.HTTPError):
                        if (await client.get(f"{service.url}/readyz")).status_code == 200:
                            break
                    if service.proc is not None and service.proc.returncode is not None:
                        raise ConfigError(f"{service.label} exited: {tail(service.log)}")
                    if time.monotonic() > deadline:
                        raise ConfigError(f"{service.label} not ready after {timeout}s")
                    await asyncio.sleep(0.2)

    async def close(self) -> None:
        for service in reversed(self.services):
            if service.proc is not None and service.proc.returncode is None:
                service.proc.terminate()
                try:
                    await asyncio.wait_for(service.proc.wait(), 10)
                except TimeoutError:
                    service.proc.kill()
                    await service.proc.wait()
        for server in self.nats:
            server.stop(kill=True)
        if self.postgres is not None:
            await asyncio.to_thread(self.postgres.stop, mode="immediate")


def tail(log: Path, lines: int = 20) -> str:
    if not log.exists():
        return "(no log)"
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


async def tool_offered(service: LabService, name: str, token: str, timeout: float = 90.0) -> None:
    """Wait until the brain `service` offers the tool `name` (an MCP server's tools come
    some time after the runner is ready)."""
    deadline = time.monotonic() + timeout
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(timeout=5.0, headers=headers) as client:
        while True:
            with contextlib.suppress(httpx.HTTPError, ValueError):
                tools = (await client.get(f"{service.url}/v1/tools")).json()
                if any(t.get("name") == name and t.get("available") for t in tools):
                    return
            if time.monotonic() > deadline:
                raise ConfigError(f"{service.label} never offered {name}")
            await asyncio.sleep(0.2)


async def streams_ready(stack: LabStack, prefix: str, timeout: float = 60.0) -> None:
    """Declare the streams at three replicas once the cluster has a JetStream leader (a
    service declaring them while the cluster still elects one would exit)."""
    subjects = Subjects(prefix, stream_replicas=3)
    deadline = time.monotonic() + timeout
    async with await Bus.connect(stack.nats_url, service="lab", subjects=subjects) as bus:
        while True:
            try:
                await bus.ensure_streams()
                await bus.jetstream.stream_info(subjects.streams[0].name)
                return
            except Exception:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.5)


async def start_lab(
    net: NetLab, base: Path, env: dict[str, str], *, brains: int = 2, ready_s: float = 150.0
) -> tuple[LabStack, list[LabService]]:
    """PostgreSQL (host `pg`), a 3-node NATS cluster (`n1`..`n3`), a gateway and a
    tools-runner (`svc`) and `brains` brain replicas (`b1`..), each brain on its own host;
    every service ready. `env` needs `TETHER_SUBJECT_PREFIX`. The caller closes the stack
    (also when this raises: the stack is handed back through `LabStack.close`)."""
    hosts = {name: net.add(name) for name in ("pg", "n1", "n2", "n3", "svc")}
    stack = LabStack(net, base, env)
    try:
        await stack.start_postgres(hosts["pg"])
        await stack.start_nats([hosts["n1"], hosts["n2"], hosts["n3"]])
        await streams_ready(stack, env["TETHER_SUBJECT_PREFIX"])
        others = [
            await stack.start_service("gateway", hosts["svc"]),
            await stack.start_service("tools-runner", hosts["svc"]),
        ]
        replicas = [
            await stack.start_service("brain", net.add(f"b{i + 1}"), f"brain-{i + 1}")
            for i in range(brains)
        ]
        await stack.wait_ready([*others, *replicas], timeout=ready_s)
    except BaseException:
        for service in stack.services:
            print(f"--- {service.label}\n{tail(service.log, 30)}")  # noqa: T201
        await stack.close()
        raise
    return stack, replicas


def lab_env(
    base: Path,
    *,
    token: str,
    tool: str,
    mcp_server: Path,
    ledger: Path,
    lease_s: float,
    bus_loss_s: float,
) -> dict[str, str]:
    """The services' settings for a partition lab: its own subject prefix, scripts under
    `base/scripts`, one MCP server (`mcp_server ledger`: it counts each call it runs), and
    an agent `lab` that may call `tool` without asking (its results taint the run; the
    waiver lets the run go on)."""
    (base / "scripts").mkdir(parents=True, exist_ok=True)
    server = {"name": "chaos", "command": sys.executable, "args": [str(mcp_server), str(ledger)]}
    agent = {"lab": {"grants": [f"{tool}#noapproval"], "waiver_lifts_taint": True}}
    return {
        "TETHER_SUBJECT_PREFIX": f"lab{secrets.token_hex(5)}",
        "TETHER_OPERATOR_TOKEN": token,
        # The brain refuses to start without the key approval decisions are signed with.
        "TETHER_DECISION_KEY": os.environ.get("TETHER_DECISION_KEY") or new_key(),
        "TETHER_LOG_LEVEL": "INFO",
        "TETHER_DB_POOL_SIZE": "10",
        "TETHER_GATEWAY_SCRIPTS_DIR": str(base / "scripts"),
        "TETHER_RUNNER_WORKSPACE": str(base / "workspace"),
        "TETHER_RUNNER_MCP_SERVERS": json.dumps([server]),
        "TETHER_BRAIN_AGENTS": json.dumps(agent),
        "TETHER_BRAIN_LEASE_S": str(lease_s),
        "TETHER_BRAIN_BUS_LOSS_S": str(bus_loss_s),
        "TETHER_BRAIN_MODEL_TIMEOUT_S": "8",
        "TETHER_BRAIN_TOOL_TIMEOUT_S": "20",
        "TETHER_BRAIN_CATALOG_TTL_S": "15",
    }
