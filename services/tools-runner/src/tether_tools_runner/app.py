"""Composition root of the tools-runner: catalogue and execution served on the bus."""

from __future__ import annotations

import logging
import os
import socket
import uuid
from pathlib import Path
from typing import Any

from fastapi import APIRouter, FastAPI
from opentelemetry import trace

from tether_common.background import FailureLog, every
from tether_common.errors import TetherError
from tether_common.identity import Principal, RemoteVerifier, Verifier, principal_dependency
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


def sandbox_router(attestation: Attestation, verifier: Verifier) -> APIRouter:
    router = APIRouter(tags=["health"])
    who_dep = principal_dependency(verifier)
    # The filter itself is bytes of BPF; its effect is in `features["seccomp"]`.
    report = {
        "level": attestation.level,
        "bwrap": attestation.bwrap,
        "features": attestation.features,
        "problems": attestation.problems,
    }

    @router.get("/sandbox")
    async def sandbox(who: Principal = who_dep) -> dict[str, Any]:
        """What confinement this runner has (a token that may `service.read`)."""
        who.require("service.read")
        return report

    return router


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
    user = sandbox_user(settings.sandbox_uid, settings.sandbox_gid)
    attestation = attest(user)
    log.info("sandbox level %s (%s)", attestation.level, attestation.problems or "no problems")
    # Read-before-write revisions in PostgreSQL: a run's read on one replica counts for
    # its edit on another.
    revisions = StoredRevisions(service.engine)
    builtins = Builtins(settings, attestation, book=revisions)
    builtins.workspaces().prepare()
    registry = Registry(builtins.tools())
    thresholds = settings.offload_thresholds
    registry.add(
        make_retrieve_tool(
            service.bus, threshold=threshold_for("retrieve_output", thresholds)
        ).as_tool()
    )
    servers, server_routes = make_tenant_servers(service, settings, registry)
    executor = Executor(
        registry,
        default_timeout_s=settings.default_timeout_s,
        attestation=attestation,
        min_sandbox=settings.min_sandbox,
        tenant_tools=servers.registry_of,
    )
    ledger = EffectLedger(service.engine, replica_name(), lease_s=settings.effect_lease_s)
    staged = StagedStore(service.engine)
    stager = make_stager(settings, builtins, executor, staged, home=common.home)
    calls = Calls(
        service.bus,
        executor,
        sandbox_level=attestation.level,
        thresholds=thresholds,
        ledger=ledger,
        stager=stager,
    )

    mcp = McpHub(
        settings.mcp_servers,
        registry,
        refresh_s=settings.mcp_refresh_s,
        connect_timeout_s=settings.mcp_connect_timeout_s,
        max_attempts=settings.mcp_max_attempts,
    )

    async def catalog(req: CatalogRequest) -> Catalog:
        if req.tenant is not None:  # that tenant's own servers' tools, laid over the rest
            return Catalog(
                tools=servers.descriptors(req.tenant),
                sandbox_level=attestation.level,
                connecting=servers.connecting(req.tenant),
            )
        return Catalog(
            tools=registry.descriptors(),
            sandbox_level=attestation.level,
            connecting=mcp.connecting() + servers.connecting(None),
        )

    async def sweep() -> None:
        await ledger.sweep(settings.effects_retention_s)
        await revisions.sweep(settings.effects_retention_s)
        await staged.sweep(settings.effects_retention_s)

    async def on_start() -> None:
        await builtins.file_workers().start()
        await mcp.start()
        await servers.reload()
        service.background.start(
            "tool servers refresh",
            every(settings.tool_servers_refresh_s, servers.reload, FailureLog(log, "tool servers")),
        )
        await service.bus.listen(
            service.subjects.tool_servers_changed, ToolServersChanged, server_routes.on_changed
        )
        await service.bus.serve(service.subjects.tool_server_add, server_routes.add)
        await service.bus.serve(service.subjects.tool_server_list, server_routes.listing)
        await service.bus.serve(service.subjects.tool_server_remove, server_routes.remove)
        renewal = every(settings.effect_lease_s / 3, ledger.renew, FailureLog(log, "lease renewal"))
        service.background.start("lease renewal", renewal)
        service.background.start(
            "effects sweep", every(3600.0, sweep, FailureLog(log, "effects sweep"))
        )
        await service.bus.serve(service.subjects.tool_catalog, catalog)
        await service.bus.serve(service.subjects.tool_execute, calls.execute)
        await service.bus.serve(service.subjects.tool_stage, stager.stage)

    async def on_stop() -> None:
        # No call is in flight any more (Service.stop drained the bus first), so the MCP
        # sessions and file workers can go.
        await mcp.stop()
        await servers.stop()
        builtins.close()
        release_cgroups()

    # No identity tables here: tokens are verified over the bus (identity.verify).
    verifier = RemoteVerifier(service.bus)
    return service.app(
        title="Tether tools-runner",
        on_start=on_start,
        on_stop=on_stop,
        routers=[sandbox_router(attestation, verifier)],
        verifier=verifier,
    )
