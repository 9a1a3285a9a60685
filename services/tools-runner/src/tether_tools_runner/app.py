"""Composition root of the tools-runner: catalogue and execution served on the bus."""

from __future__ import annotations

from fastapi import FastAPI

from tether_common.messages.tools import Catalog, CatalogRequest, ExecuteTool, ToolResult
from tether_common.service import Service
from tether_common.settings import CommonSettings
from tether_tools_runner.executor import Executor
from tether_tools_runner.settings import RunnerSettings
from tether_tools_runner.tool import Registry
from tether_tools_runner.tools import builtin_tools

SERVICE = "tools-runner"


def create_app(common: CommonSettings, settings: RunnerSettings) -> FastAPI:
    service = Service(SERVICE, common, uses_db=False)
    registry = Registry(builtin_tools())
    executor = Executor(registry, default_timeout_s=settings.default_timeout_s)

    async def catalog(_req: CatalogRequest) -> Catalog:
        return Catalog(tools=registry.descriptors())

    async def execute(call: ExecuteTool) -> ToolResult:
        return await executor.execute(call)

    async def on_start() -> None:
        await service.bus.serve(service.subjects.tool_catalog, catalog)
        await service.bus.serve(service.subjects.tool_execute, execute)

    return service.app(title="Tether tools-runner", on_start=on_start)
