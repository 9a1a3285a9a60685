"""Composition root of the tools-runner: catalogue and execution served on the bus."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import APIRouter, FastAPI
from opentelemetry import trace

from tether_common.identity import Principal, RemoteVerifier, Verifier, principal_dependency
from tether_common.messages.tools import Catalog, CatalogRequest, ExecuteTool, ToolResult
from tether_common.service import Service
from tether_common.settings import CommonSettings
from tether_tools_runner.executor import Executor
from tether_tools_runner.mcp_tools import McpHub
from tether_tools_runner.offload import maybe_offload, threshold_for
from tether_tools_runner.sandbox import (
    Attestation,
    attest,
    hand_over,
    release_cgroups,
    sandbox_user,
)
from tether_tools_runner.settings import RunnerSettings
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


def create_app(common: CommonSettings, settings: RunnerSettings) -> FastAPI:
    service = Service(SERVICE, common, uses_db=False)
    settings.workspace.mkdir(parents=True, exist_ok=True)
    user = sandbox_user(settings.sandbox_uid, settings.sandbox_gid)
    hand_over(settings.workspace, user)  # the sandbox user writes there, never root
    attestation = attest(user)
    log.info("sandbox level %s (%s)", attestation.level, attestation.problems or "no problems")
    builtins = Builtins(settings, attestation)
    registry = Registry(builtins.tools())
    thresholds = settings.offload_thresholds
    registry.add(
        make_retrieve_tool(
            service.bus, threshold=threshold_for("retrieve_output", thresholds)
        ).as_tool()
    )
    executor = Executor(
        registry,
        default_timeout_s=settings.default_timeout_s,
        attestation=attestation,
        min_sandbox=settings.min_sandbox,
    )

    async def catalog(_req: CatalogRequest) -> Catalog:
        return Catalog(tools=registry.descriptors(), sandbox_level=attestation.level)

    async def execute(call: ExecuteTool) -> ToolResult:
        """Run the call; a large result goes to the output-store before the reply, so
        only its digest and ref ride the bus."""
        span = trace.get_current_span()  # the bus's span for this call
        span.set_attribute("tether.tool.name", call.name)
        span.set_attribute("tether.sandbox.level", attestation.level)
        result = await executor.execute(call)
        span.set_attribute("tether.tool.duration_ms", result.duration_ms)
        span.set_attribute("tether.tool.outcome", result.error_code or "ok")
        span.set_attribute("tether.tool.bytes", len(result.content.encode()))
        stamped = {"sandbox_level": attestation.level}
        if not result.ok:
            return result.model_copy(update=stamped)
        threshold = threshold_for(call.name, thresholds)
        with tracer.start_as_current_span("offload") as offload:
            text, ref = await maybe_offload(
                service.bus, call.run_id, call.name, result.content, threshold=threshold
            )
            offload.set_attribute("tether.output.ref", ref or "")
        return result.model_copy(update=stamped | {"content": text, "output_ref": ref})

    mcp = McpHub(settings.mcp_servers, registry, refresh_s=settings.mcp_refresh_s)

    async def on_start() -> None:
        await builtins.file_workers().start()
        await mcp.start()
        await service.bus.serve(service.subjects.tool_catalog, catalog)
        await service.bus.serve(service.subjects.tool_execute, execute)

    async def on_stop() -> None:
        await mcp.stop()
        builtins.close()
        release_cgroups()

    return service.app(
        title="Tether tools-runner",
        on_start=on_start,
        on_stop=on_stop,
        # No identity tables here: tokens are verified over the bus (identity.verify).
        routers=[sandbox_router(attestation, RemoteVerifier(service.bus))],
    )
