"""Composition root of the brain: store, model and tool clients, the loop, the run
manager with its leases, the HTTP API and the same operations over NATS."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI

from tether_brain.acting import Actor
from tether_brain.api import runs_router
from tether_brain.loop import Loop
from tether_brain.model import ModelClient
from tether_brain.runs import RunManager
from tether_brain.settings import BrainSettings
from tether_brain.store import RunStore
from tether_brain.toolbox import Toolbox
from tether_common.messages.runs import GetRun, RunView, StopRun
from tether_common.service import Service
from tether_common.settings import CommonSettings

SERVICE = "brain"


def create_app(common: CommonSettings, settings: BrainSettings) -> FastAPI:
    service = Service(SERVICE, common, migrations=Path(__file__).parent / "migrations")
    bus, subjects = service.bus, service.subjects
    store = RunStore(service.engine)
    toolbox = Toolbox(bus, ttl_s=settings.catalog_ttl_s, timeout_s=settings.tool_timeout_s)
    loop = Loop(
        bus,
        store,
        ModelClient(bus, timeout_s=settings.model_timeout_s),
        Actor(toolbox, max_calls_per_step=settings.max_calls_per_step),
    )
    manager = RunManager(bus, store, loop, settings)

    async def get_run(req: GetRun) -> RunView:
        return await manager.get(req.run_id)

    async def on_start() -> None:
        await bus.serve(subjects.run_start, manager.start)
        await bus.serve(subjects.run_get, get_run)
        await bus.serve(subjects.run_stop, manager.stop)
        await bus.serve(subjects.run_message, manager.queue_message)
        await bus.listen(subjects.run_stopping, StopRun, manager.on_stop_broadcast)
        manager.begin_maintenance()

    return service.app(
        title="Tether brain",
        on_start=on_start,
        on_stop=manager.close,
        routers=[runs_router(manager, toolbox)],
    )
