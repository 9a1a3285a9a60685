"""Composition root of the brain: store, model and tool clients, the loop, the run
manager with its leases, the HTTP API and the same operations over NATS."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

from fastapi import FastAPI

from tether_brain.agents.config import Agents
from tether_brain.agents.quotas import Quotas
from tether_brain.agents.store import AgentStore
from tether_brain.api import agents as agents_api
from tether_brain.api import runs as runs_api
from tether_brain.api import threads as threads_api
from tether_brain.api.deps import AGENT_STORE, RUN_MANAGER, THREAD_MANAGER, TOOLBOX
from tether_brain.api.documents import documents_router
from tether_brain.api.hooks import hooks_router
from tether_brain.api.kill import kill_router
from tether_brain.api.memory import memory_router
from tether_brain.api.models import models_router
from tether_brain.api.policy import policy_router
from tether_brain.api.quotas import quotas_router
from tether_brain.api.schedules import schedules_router
from tether_brain.api.skills import skills_router
from tether_brain.api.tool_servers import tool_servers_router
from tether_brain.clients.approval import ApprovalClient
from tether_brain.clients.model import ModelClient
from tether_brain.clients.runner import BusRunner
from tether_brain.console import console_api_router, console_page_router
from tether_brain.context.profiles import Profiles
from tether_brain.faces.mcp import McpFace
from tether_brain.faces.openai import openai_router
from tether_brain.hooks import Caller, Destinations, HookBook, Hooks, output_keeper, run_builtin
from tether_brain.loop.acting import Actor
from tether_brain.loop.dispatch import Loop
from tether_brain.persistence.store import RunStore
from tether_brain.runs.advancing import Runner
from tether_brain.runs.kills import KillSwitch
from tether_brain.runs.leases import Leases
from tether_brain.runs.maintenance import Maintenance
from tether_brain.runs.manager import RunManager
from tether_brain.runs.tasks import RunTasks
from tether_brain.schedules import ScheduleManager, Scheduler, ScheduleStore
from tether_brain.settings import BrainSettings
from tether_brain.skills import FolderSkillStore
from tether_brain.state.kills import Kills
from tether_brain.state.run import RunState
from tether_brain.threads import ThreadManager, ThreadStore
from tether_brain.threads.handlers import serve_threads
from tether_brain.tools.documents import Documents
from tether_brain.tools.helpers import AgentTool
from tether_brain.tools.local import SkillLibrary, SkillTool
from tether_brain.tools.memory import Memory
from tether_brain.tools.remember import MEMORY_SAVE, MEMORY_SEARCH, MemoryTool
from tether_brain.tools.search import SearchTool
from tether_brain.tools.toolbox import Toolbox
from tether_common.decisions import required_key
from tether_common.identity import TokenStore, bus_principal, serve_verify, tokens_router
from tether_common.messages.approvals import ApprovalDecided
from tether_common.messages.deltas import DeltaAsk, RunDelta
from tether_common.messages.kills import KillsChanged
from tether_common.messages.runs import (
    TERMINAL_STATUSES,
    ChildEnded,
    FollowRun,
    GetRun,
    GrantsChanged,
    ListRuns,
    QueueMessage,
    RunAccepted,
    RunEventFrame,
    RunList,
    RunView,
    StartRun,
    StopRun,
)
from tether_common.safety.urls import PrivateHosts
from tether_common.service import Service
from tether_common.settings import CommonSettings

SERVICE = "brain"


def create_app(common: CommonSettings, settings: BrainSettings) -> FastAPI:
    service = Service(SERVICE, common, migrations=Path(__file__).parent / "migrations")
    bus, subjects = service.bus, service.subjects
    store = RunStore(service.engine)
    # Who calls: every route and request checks a principal from here (identity).
    identity = TokenStore(
        service.engine,
        operator_token=common.operator_token,
        operator_token_sha256=common.operator_token_sha256,
    )
    skills = SkillLibrary(FolderSkillStore(settings.skill_folders))
    documents = Documents(service.engine)  # retrieval: `search_documents` reads them
    agents = Agents(
        settings.agents,
        workspace=settings.workspace,
        guardrails=settings.guardrails,
        allowlist=settings.allowlist,
    )
    # What runs remember across threads: `memory_save`, `memory_search`, a thread's recall.
    memory = Memory(service.engine, agents)
    toolbox = Toolbox(
        BusRunner(bus),
        ttl_s=settings.catalog_ttl_s,
        timeout_s=settings.tool_timeout_s,
        local=[
            SkillTool(skills),
            AgentTool(),
            SearchTool(documents),
            MemoryTool(memory, MEMORY_SAVE),
            MemoryTool(memory, MEMORY_SEARCH),
        ],
        heartbeat_s=settings.tool_heartbeat_s or None,
    )
    # Agents and policy as stored resources; the settings above only seed them.
    overrides = AgentStore(service.engine, agents, bus, refresh_s=settings.grants_refresh_s)
    approvals = ApprovalClient(bus, expiry_s=settings.approval_expiry_s)
    # Lifecycle hooks: each tenant's, kept beside its policy, asked by the loop.
    hook_book = HookBook(overrides, refresh_s=settings.hooks_refresh_s)
    hook_destinations = Destinations(PrivateHosts.of(settings.hooks_private_hosts))
    hook_caller = Caller(
        bus,
        run_builtin,
        hook_destinations,
        max_reply_bytes=settings.hooks_max_reply_bytes,
        ca_file=settings.hooks_ca_file,
    )
    hooks = Hooks(hook_book, hook_caller.call, keep=output_keeper(bus))
    actor = Actor(
        toolbox,
        agents,
        max_calls_per_step=settings.max_calls_per_step,
        tree_of=store.queries.children,
        service_wait_s=settings.service_wait_s,
        hooks=hooks,
    )
    tasks = RunTasks(
        store, Leases(settings.lease_s, settings.lease_margin), drain_s=settings.drain_s
    )

    async def launch(child: RunState) -> None:  # a helper run the loop starts
        await runner.launch_child(child)

    model = ModelClient(bus, timeout_s=settings.model_timeout_s)
    loop = Loop(
        bus,
        store,
        model,
        actor,
        approvals,
        skills,
        Profiles(
            bus,
            ttl_s=settings.profile_ttl_s,
            overrides=settings.prompt_tiers,
            windows=settings.context_windows,
            default_window=settings.default_context_window,
        ),
        launch=launch,
        prices=settings.prices,
        quotas=Quotas(service.engine, agents),
        memory=memory,
    )
    # The kill switches in force here: read before serving, then kept current.
    kills = Kills()
    runner = Runner(
        store,
        tasks,
        loop,
        approvals,
        lease_s=settings.lease_s,
        decision_key=required_key(common.decision_key),
        kills=kills,
    )
    kill_switch = KillSwitch(
        service.engine, bus, agents, kills, store, tasks, runner, lease_s=settings.lease_s
    )
    maintenance = Maintenance(
        bus,
        store,
        tasks,
        runner,
        kill_switch,
        lease_s=settings.lease_s,
        lease_margin=settings.lease_margin,
        bus_loss_s=settings.bus_loss_s,
    )
    manager = RunManager(bus, store, agents, tasks, runner, settings)
    # Agents as the tools of an MCP server at /mcp (the SDK loaded on its first request).
    mcp_face = McpFace(manager)
    threads = ThreadManager(ThreadStore(service.engine), manager)
    schedule_store = ScheduleStore(service.engine)
    schedules = ScheduleManager(schedule_store, manager)
    scheduler = Scheduler(
        schedule_store,
        manager,
        identity,
        poll_s=settings.schedule_poll_s,
        grace_s=settings.schedule_grace_s,
    )

    # The client API over NATS: each handler reads its caller from the `Authorization`
    # header and calls the same `RunManager` method as the HTTP route, under the same rules.
    async def start_run(req: StartRun) -> RunAccepted:
        return await manager.start(req, await bus_principal(identity))

    async def get_run(req: GetRun) -> RunView:
        return await manager.get(req.run_id, await bus_principal(identity))

    async def list_runs(req: ListRuns) -> RunList:
        return await manager.list_runs(req, await bus_principal(identity))

    async def stop_run(req: StopRun) -> RunAccepted:
        return await manager.stop(req, await bus_principal(identity))

    async def queue_message(req: QueueMessage) -> RunAccepted:
        return await manager.queue_message(req, await bus_principal(identity))

    async def follow_run(req: FollowRun) -> AsyncIterator[RunEventFrame]:
        # As the HTTP event stream: `follow` refuses (401/404) before any event is sent.
        await manager.follow(req.run_id, await bus_principal(identity))
        last, ended = req.after_seq, False
        live = manager.live(req.run_id, req.after_seq, deltas=req.deltas, idle_s=req.idle_s)
        async for item in live:
            if isinstance(item, RunDelta):
                yield RunEventFrame(delta=item)
                continue
            last, ended = item.seq, item.kind == "run.end"
            yield RunEventFrame(event=item)
        if not ended:  # a caller already past `run.end` met none, nor one from the journal
            status, _ = await store.queries.status(req.run_id)
            ended = status in TERMINAL_STATUSES
        yield RunEventFrame(end="run_end" if ended else "idle", last_seq=last)

    async def on_start() -> None:
        # Before serving: no run may be gated on grants a change has already replaced.
        await overrides.seed()
        await overrides.load()
        await serve_verify(bus, identity)
        # Before serving: no run in scope of a kill may start (it survives restarts).
        await kill_switch.refresh()
        await documents.refresh()  # whether `search_documents` is offered
        await bus.listen(subjects.kills_changed, KillsChanged, kill_switch.on_changed)
        await bus.listen(subjects.agent_grants_changed, GrantsChanged, overrides.on_changed)
        service.background.start("grants refresh", overrides.refresh_forever())
        await bus.serve(subjects.run_start, start_run)
        await bus.serve(subjects.run_get, get_run)
        await bus.serve(subjects.run_list, list_runs)
        await bus.serve(subjects.run_stop, stop_run)
        await bus.serve(subjects.run_message, queue_message)
        await bus.serve_stream(subjects.run_follow, follow_run)
        await serve_threads(bus, threads, identity)
        await bus.listen(subjects.run_stopping, StopRun, manager.on_stop_broadcast)
        await bus.listen(subjects.run_child_ended, ChildEnded, manager.on_child_ended)
        await bus.listen(subjects.run_deltas_ask, DeltaAsk, model.on_ask)
        await bus.consume(
            subjects.approval_decided,
            durable="brain_decisions",
            model=ApprovalDecided,
            handler=manager.on_decision,
        )
        service.background.start("leases", maintenance.run())
        service.background.start("scheduler", scheduler.run_forever())

    # Shutdown (Service.stop): no message is taken any more, the handlers in flight finish,
    # the background loops stop; then every run is handed back while the bus and the
    # database are still open; then both close.
    async def on_stop() -> None:
        await mcp_face.stop()  # its calls in flight end; their runs go on
        await manager.close()
        await hooks.close()  # run-end notices in flight

    return service.app(
        title="Tether brain",
        on_start=on_start,
        on_stop=on_stop,
        routers=[
            runs_api.router,
            kill_router(kill_switch, identity),
            threads_api.router,
            schedules_router(schedules, identity),
            tokens_router(identity),
            console_page_router(),
            console_api_router(manager, identity, trace_url=settings.trace_url),
            agents_api.router,
            quotas_router(overrides, manager.quotas, identity),
            hooks_router(hook_book, hook_destinations, identity),
            skills_router(skills.store, identity, on_change=skills.forget),
            documents_router(documents, identity),
            memory_router(memory, identity),
            models_router(service.bus, identity),
            tool_servers_router(service.bus, identity),
            openai_router(manager, identity),
            mcp_face.router(identity),
            policy_router(
                agents,
                toolbox,
                approvals,
                overrides,
                engine=service.engine,
                verifier=identity,
            ),
        ],
        verifier=identity,
        state={
            AGENT_STORE: overrides,
            RUN_MANAGER: manager,
            THREAD_MANAGER: threads,
            TOOLBOX: toolbox,
        },
    )
