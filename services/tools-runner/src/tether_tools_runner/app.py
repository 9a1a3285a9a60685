"""Composition root of the tools-runner: catalogue and execution served on the bus."""

from __future__ import annotations

import logging
import os
import socket
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Request
from opentelemetry import trace

from tether_common.background import FailureLog, every
from tether_common.errors import TetherError
from tether_common.identity import RemoteVerifier
from tether_common.identity.http import Caller
from tether_common.messages.tool_servers import ToolServersChanged
from tether_common.messages.tools import Catalog, CatalogRequest
from tether_common.safety.urls import PrivateHosts
from tether_common.service import Service
from tether_common.settings import CommonSettings
from tether_tools_runner.calls import Calls
from tether_tools_runner.credentials import CredentialKey
from tether_tools_runner.effects import EffectLedger
from tether_tools_runner.executor import Executor
from tether_tools_runner.mcp_tools import McpHub
from tether_tools_runner.offload import threshold_for
from tether_tools_runner.revision_store import StoredRevisions
from tether_tools_runner.sandbox import (
    Attestation,
    attest,
    release_cgroups,
    sandbox_user,
)
from tether_tools_runner.server_routes import ServerRoutes
from tether_tools_runner.server_store import ServerStore
from tether_tools_runner.server_urls import ServerDestinations
from tether_tools_runner.settings import RunnerSettings
from tether_tools_runner.staging.shell import ShellStaging
from tether_tools_runner.staging.stager import Stager
from tether_tools_runner.staging.store import StagedStore
from tether_tools_runner.tenant_servers import LinkOptions, TenantServers
from tether_tools_runner.tool import Registry
from tether_tools_runner.tools import Builtins
from tether_tools_runner.tools.retrieve import make_retrieve_tool

SERVICE = "tools-runner"
tracer = trace.get_tracer(__name__)
log = logging.getLogger(__name__)


# The attestation's name on `app.state` (create_app puts it there).
ATTESTATION = "attestation"

router = APIRouter(tags=["health"])


async def attestation_of(request: Request) -> Attestation:
    found: Attestation = getattr(request.app.state, ATTESTATION)
    return found


@router.get("/sandbox")
async def sandbox(
    attestation: Annotated[Attestation, Depends(attestation_of)], who: Caller
) -> dict[str, Any]:
    """What confinement this runner has (a token that may `service.read`)."""
    who.require("service.read")
    # The filter itself is bytes of BPF; its effect is in `features["seccomp"]`.
    return {
        "level": attestation.level,
        "bwrap": attestation.bwrap,
        "features": attestation.features,
        "problems": attestation.problems,
    }


def replica_name() -> str:
    """This process's name in the effect ledger: unique per start, readable in a row."""
    return f"{socket.gethostname()[:40]}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def make_stager(
    settings: RunnerSettings,
    builtins: Builtins,
    executor: Executor,
    store: StagedStore,
    *,
    home: Path,
) -> Stager:
    """Staged effects: file tools by scratch copy of the file, shell by scratch copy of
    the workspace under the runner's staging folder (`TETHER_RUNNER_STAGING_DIR`, else
    `staging` in the runner's own TETHER_HOME: a folder a non-root service user can
    make, unlike one beside a workspace mounted at `/`). A folder that cannot be used is
    said at start; each stage request then answers `staging_unavailable`."""
    shell = ShellStaging(
        builtins.attestation,
        builtins.limits(),
        sandbox_user(settings.sandbox_uid, settings.sandbox_gid),
        settings.staging_dir or home / "staging",
        settings.staging_max_bytes,
    )
    try:
        shell.prepare()
    except TetherError as exc:
        log.warning("calls that need approval will be asked without a diff: %s", exc.message)
    return Stager(
        executor, builtins.workspaces(), builtins.file_workers(), builtins.book, store, shell
    )


def make_tenant_servers(
    service: Service, settings: RunnerSettings, registry: Registry
) -> tuple[TenantServers, ServerRoutes]:
    """Tool servers added through `/v1/tool-servers`: their rows, links and routes."""
    key = settings.credentials_key
    sealer = CredentialKey.from_text(key.get_secret_value()) if key is not None else None
    destinations = ServerDestinations(PrivateHosts.of(settings.tool_server_private_hosts))
    store = ServerStore(service.engine)
    options = LinkOptions(
        settings.mcp_refresh_s, settings.mcp_connect_timeout_s, settings.mcp_max_attempts
    )
    configured = frozenset(s.name for s in settings.mcp_servers)
    servers = TenantServers(store, registry, destinations, sealer, options, configured=configured)
    return servers, ServerRoutes(service.bus, store, servers, destinations, sealer)


def create_app(common: CommonSettings, settings: RunnerSettings) -> FastAPI:
    service = Service(SERVICE, common, migrations=Path(__file__).parent / "migrations")
    runner = build(service, common, settings)
    # No identity tables here: tokens are verified over the bus (identity.verify).
    verifier = RemoteVerifier(service.bus)
    return service.app(
        title="Tether tools-runner",
        on_start=runner.start,
        on_stop=runner.stop,
        routers=[router],
        verifier=verifier,
        state={ATTESTATION: runner.attestation},
    )


@dataclass(frozen=True, slots=True)
class Effects:
    """What a call's effects leave in PostgreSQL: the ledger of calls run (leased by this
    replica), read-before-write revisions (a run's read on one replica counts for its
    edit on another) and staged effects; each row kept `effects_retention_s`."""

    ledger: EffectLedger
    revisions: StoredRevisions
    staged: StagedStore

    async def sweep(self, older_than_s: float) -> None:
        await self.ledger.sweep(older_than_s)
        await self.revisions.sweep(older_than_s)
        await self.staged.sweep(older_than_s)


def build(service: Service, common: CommonSettings, settings: RunnerSettings) -> ToolsRunner:
    attestation = attest(sandbox_user(settings.sandbox_uid, settings.sandbox_gid))
    log.info("sandbox level %s (%s)", attestation.level, attestation.problems or "no problems")
    effects = Effects(
        EffectLedger(service.engine, replica_name(), lease_s=settings.effect_lease_s),
        StoredRevisions(service.engine),
        StagedStore(service.engine),
    )
    builtins = Builtins(settings, attestation, book=effects.revisions)
    builtins.workspaces().prepare()
    registry = make_registry(service, settings, builtins)
    servers, server_routes = make_tenant_servers(service, settings, registry)
    executor = Executor(
        registry,
        default_timeout_s=settings.default_timeout_s,
        attestation=attestation,
        min_sandbox=settings.min_sandbox,
        tenant_tools=servers.registry_of,
    )
    stager = make_stager(settings, builtins, executor, effects.staged, home=common.home)
    calls = Calls(
        service.bus,
        executor,
        sandbox_level=attestation.level,
        thresholds=settings.offload_thresholds,
        ledger=effects.ledger,
        stager=stager,
    )
    mcp = McpHub(
        settings.mcp_servers,
        registry,
        refresh_s=settings.mcp_refresh_s,
        connect_timeout_s=settings.mcp_connect_timeout_s,
        max_attempts=settings.mcp_max_attempts,
    )
    return ToolsRunner(
        service,
        settings,
        attestation,
        builtins,
        registry,
        servers,
        server_routes,
        effects,
        stager,
        calls,
        mcp,
    )


def make_registry(service: Service, settings: RunnerSettings, builtins: Builtins) -> Registry:
    """The built-in tools and `retrieve_output` (the tools of MCP servers join later)."""
    registry = Registry(builtins.tools())
    threshold = threshold_for("retrieve_output", settings.offload_thresholds)
    registry.add(make_retrieve_tool(service.bus, threshold=threshold).as_tool())
    return registry


@dataclass(frozen=True, slots=True)
class ToolsRunner:
    """The runner's parts, and what starts before serving, is served and stops."""

    service: Service
    settings: RunnerSettings
    attestation: Attestation
    builtins: Builtins
    registry: Registry
    servers: TenantServers
    server_routes: ServerRoutes
    effects: Effects
    stager: Stager
    calls: Calls
    mcp: McpHub

    async def start(self) -> None:
        await self.builtins.file_workers().start()
        await self.mcp.start()
        await self.servers.reload()
        self.start_background()
        await self.serve_bus()

    def start_background(self) -> None:
        settings, background = self.settings, self.service.background
        servers = every(
            settings.tool_servers_refresh_s,
            self.servers.reload,
            FailureLog(log, "tool servers"),
        )
        background.start("tool servers refresh", servers)
        renewal = every(
            settings.effect_lease_s / 3, self.effects.ledger.renew, FailureLog(log, "lease renewal")
        )
        background.start("lease renewal", renewal)
        sweep = every(3600.0, self.sweep_effects, FailureLog(log, "effects sweep"))
        background.start("effects sweep", sweep)

    async def sweep_effects(self) -> None:
        await self.effects.sweep(self.settings.effects_retention_s)

    async def serve_bus(self) -> None:
        bus, subjects, routes = self.service.bus, self.service.subjects, self.server_routes
        await bus.listen(subjects.tool_servers_changed, ToolServersChanged, routes.on_changed)
        await bus.serve(subjects.tool_server_add, routes.add)
        await bus.serve(subjects.tool_server_list, routes.listing)
        await bus.serve(subjects.tool_server_remove, routes.remove)
        await bus.serve(subjects.tool_catalog, self.catalog)
        await bus.serve(subjects.tool_execute, self.calls.execute)
        await bus.serve(subjects.tool_stage, self.stager.stage)

    async def catalog(self, req: CatalogRequest) -> Catalog:
        level, servers = self.attestation.level, self.servers
        if req.tenant is not None:  # that tenant's own servers' tools, laid over the rest
            return Catalog(
                tools=servers.descriptors(req.tenant),
                sandbox_level=level,
                connecting=servers.connecting(req.tenant),
            )
        return Catalog(
            tools=self.registry.descriptors(),
            sandbox_level=level,
            connecting=self.mcp.connecting() + servers.connecting(None),
        )

    async def stop(self) -> None:
        # No call is in flight any more (Service.stop drained the bus first), so the MCP
        # sessions and file workers can go.
        await self.mcp.stop()
        await self.servers.stop()
        self.builtins.close()
        release_cgroups()
