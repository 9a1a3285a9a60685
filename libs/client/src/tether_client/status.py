"""`tether status`: each service's health and replicas, queue depths, parked work, the kill
switches in force, versions.

Health is each service's own `/healthz` and `/readyz`. Replicas and queue depths come from
the NATS server's monitoring endpoint (`/connz`: connections are named `tether-<service>`,
one per replica wherever it runs; `/jsz`: every JetStream consumer's pending count):
`tether up` enables it on loopback and records its address, `TETHER_NATS_MONITOR_URL`
names another server's. Parked work is the approvals waiting for a decision and the runs
waiting on them, as the caller's token may see them; the kill switches are those the
token may see (an admin's: all of them).
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import os
import platform
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

import httpx
from rich.console import Group
from rich.text import Text

from tether_client.console import Format, OutputOption, emit, err, rows_table
from tether_client.endpoints import DEFAULT_URLS, read_state, service_url
from tether_client.exits import ExitCode
from tether_client.kill_cli import line as kill_line
from tether_client.ops_cli import ApprovalsClient
from tether_client.session import blocking, connect, operator_token
from tether_common.errors import TetherError
from tether_common.messages.kills import KillView

__all__ = ["SystemStatus", "gather", "status_command"]

PROBE_TIMEOUT_S = 3.0
DISTRIBUTIONS = (
    "tether-client",
    "tether-common",
    "tether-brain",
    "tether-gateway",
    "tether-tools-runner",
    "tether-approvals",
    "tether-output-store",
)


@dataclass
class ServiceHealth:
    name: str
    url: str
    health: str  # ready | not ready | down
    checks: dict[str, bool] = field(default_factory=dict)
    replicas: int | None = None  # None: no monitoring endpoint to count them
    pid: int | None = None


@dataclass
class SystemStatus:
    services: list[ServiceHealth]
    queues: list[dict[str, Any]] = field(default_factory=list)
    pending_approvals: int | None = None
    parked_runs: int | None = None
    kills: list[dict[str, Any]] | None = None  # the kill switches in force (None: unread)
    versions: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> ExitCode:
        health = {s.health for s in self.services}
        if health == {"down"}:
            return ExitCode.UNREACHABLE
        return ExitCode.OK if health == {"ready"} else ExitCode.FAILED


async def probe(http: httpx.AsyncClient, name: str) -> ServiceHealth:
    url = service_url(name)
    try:
        await http.get(f"{url}/healthz")
        ready = await http.get(f"{url}/readyz")
    except httpx.HTTPError:
        return ServiceHealth(name, url, "down")
    try:
        checks = {str(k): bool(v) for k, v in ready.json().get("checks", {}).items()}
    except (ValueError, AttributeError):
        checks = {}
    return ServiceHealth(name, url, "ready" if ready.status_code == 200 else "not ready", checks)


def monitor_url() -> str | None:
    if url := os.environ.get("TETHER_NATS_MONITOR_URL", "").strip():
        return url
    state = read_state()
    return state.nats_monitor_url if state is not None else None


def replicas(connz: dict[str, Any]) -> Counter[str]:
    names = (str(c.get("name") or "") for c in connz.get("connections", []))
    return Counter(n.removeprefix("tether-") for n in names if n.startswith("tether-"))


def queues(jsz: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per JetStream consumer: its stream, pending and unacknowledged messages."""
    rows = []
    for account in jsz.get("account_details", []):
        for stream in account.get("stream_detail", []):
            for consumer in stream.get("consumer_detail", []) or []:
                rows.append(
                    {
                        "stream": stream.get("name"),
                        "consumer": consumer.get("name"),
                        "pending": consumer.get("num_pending", 0),
                        "unacked": consumer.get("num_ack_pending", 0),
                        "messages": stream.get("state", {}).get("messages", 0),
                    }
                )
    return rows


async def from_monitor(http: httpx.AsyncClient, found: SystemStatus) -> None:
    url = monitor_url()
    if url is None:
        found.notes.append("replicas and queues: set TETHER_NATS_MONITOR_URL (tether up sets it)")
        return
    try:
        connz, jsz, varz = await asyncio.gather(
            http.get(f"{url}/connz", params={"limit": "4096"}),
            http.get(
                f"{url}/jsz", params={"accounts": "true", "streams": "true", "consumers": "true"}
            ),
            http.get(f"{url}/varz"),
        )
        counted = replicas(connz.json())
        found.queues = queues(jsz.json())
        found.versions["nats-server"] = str(varz.json().get("version"))
    except (httpx.HTTPError, ValueError) as exc:
        found.notes.append(f"NATS monitoring at {url} did not answer: {exc}")
        return
    for service in found.services:
        service.replicas = counted.get(service.name, 0)


async def parked(found: SystemStatus) -> None:
    """Pending approvals (operator token) and runs parked on them (the caller's runs)."""
    try:
        async with connect() as client:
            runs = await client.list_runs(status="awaiting_approval", limit=500)
        found.parked_runs = len(runs.runs)
    except (TetherError, httpx.HTTPError) as exc:  # status reports what it cannot read
        found.notes.append(f"parked runs: {type(exc).__name__}: {exc}")
    token = operator_token()
    if token is None:
        found.notes.append("pending approvals: no operator token")
        return
    try:
        async with ApprovalsClient(service_url("approvals"), token) as approvals:
            found.pending_approvals = len(await approvals.list("pending"))
    except (TetherError, httpx.HTTPError) as exc:
        found.notes.append(f"pending approvals: {type(exc).__name__}: {exc}")


async def kill_switches(found: SystemStatus) -> None:
    """The kill switches in force that the caller's token may see."""
    try:
        async with connect() as client:
            kills = (await client.kills()).kills
        found.kills = [k.model_dump(mode="json", exclude={"version"}) for k in kills]
    except (TetherError, httpx.HTTPError) as exc:  # status reports what it cannot read
        found.notes.append(f"kill switches: {type(exc).__name__}: {exc}")


def local_versions() -> dict[str, str]:
    found = {"python": platform.python_version()}
    for dist in DISTRIBUTIONS:
        try:
            found[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return found


async def gather() -> SystemStatus:
    async with httpx.AsyncClient(timeout=PROBE_TIMEOUT_S) as http:
        services = list(await asyncio.gather(*(probe(http, n) for n in DEFAULT_URLS)))
        found = SystemStatus(services, versions=local_versions())
        state = read_state()
        for service in services:
            if state is not None:
                service.pid = state.services.get(service.name, {}).get("pid")
        if found.exit_code is ExitCode.UNREACHABLE:
            return found
        await from_monitor(http, found)
    await parked(found)
    await kill_switches(found)
    return found


def render(found: SystemStatus) -> Group:
    colour = {"ready": "green", "not ready": "yellow", "down": "red"}
    services = rows_table(
        ["SERVICE", "HEALTH", "REPLICAS", "PID", "URL"],
        [
            (
                s.name,
                Text(s.health, style=colour[s.health]),
                "?" if s.replicas is None else s.replicas,
                s.pid,
                s.url,
            )
            for s in found.services
        ],
    )
    parts: list[Any] = [services, Text("")]
    if found.queues:
        columns = ["STREAM", "CONSUMER", "PENDING", "UNACKED", "MESSAGES"]
        parts += [rows_table(columns, [tuple(q.values()) for q in found.queues]), Text("")]
    parts.append(
        Text(
            f"parked: {_count(found.pending_approvals)} approvals pending, "
            f"{_count(found.parked_runs)} runs awaiting approval"
        )
    )
    for kill in found.kills or []:
        parts.append(Text(f"KILLED: {kill_line(KillView.model_validate(kill))}", style="bold red"))
    parts.append(Text("versions: " + ", ".join(f"{k} {v}" for k, v in found.versions.items())))
    return Group(*parts)


def _count(value: int | None) -> str:
    return "?" if value is None else str(value)


@blocking
async def status_command(output: OutputOption = Format.table) -> int:
    """Each service's health and replicas, queue depths, parked approvals, versions.

    Exit 0 when every service is ready, 1 when some are not, 3 when none answers.

    Example: tether status -o json
    """
    found = await gather()
    emit(asdict(found), output, render(found))
    for note in found.notes:
        err(f"note: {note}", "dim")
    if found.exit_code is ExitCode.UNREACHABLE:
        err("nothing answers: start the system with `tether up`", "red")
    return found.exit_code
