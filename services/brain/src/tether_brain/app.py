"""Composition root of the brain: store, model and tool clients, the loop, the run
manager with its leases, the HTTP API and the same operations over NATS.

Read top to bottom: `create_app` builds the parts (`build`: who calls and the agents, the
tools runs call, lifecycle hooks, the runs and their loop, threads and schedules), and
`Brain` says what starts before serving, what is served on the bus and over HTTP, which
parts the routes find on `app.state`, and what stops."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from fastapi import APIRouter, FastAPI

from tether_brain.agents.config import Agents
from tether_brain.agents.quotas import Quotas
from tether_brain.agents.store import AgentStore
from tether_brain.api import agents as agents_api
from tether_brain.api import deps
from tether_brain.api import documents as documents_api
from tether_brain.api import hooks as hooks_api
from tether_brain.api import kill as kill_api
from tether_brain.api import memory as memory_api
from tether_brain.api import models as models_api
from tether_brain.api import policy as policy_api
from tether_brain.api import quotas as quotas_api
from tether_brain.api import runs as runs_api
from tether_brain.api import schedules as schedules_api
from tether_brain.api import skills as skills_api
from tether_brain.api import threads as threads_api
from tether_brain.api import tool_servers as tool_servers_api
from tether_brain.clients.approval import ApprovalClient
from tether_brain.clients.model import ModelClient
from tether_brain.clients.runner import BusRunner
from tether_brain.console import api_router as console_api_router
from tether_brain.console import console_page_router, console_state
from tether_brain.context.profiles import Profiles
from tether_brain.faces import mcp as mcp_face_api
from tether_brain.faces import openai as openai_face_api
from tether_brain.faces.following import Follower
from tether_brain.faces.mcp import McpFace
from tether_brain.hooks import Caller, Destinations, HookBook, Hooks, output_keeper, run_builtin
from tether_brain.loop.acting import Actor
from tether_brain.loop.dispatch import Loop
from tether_brain.persistence.store import RunStore
from tether_brain.runs.advancing import Runner
from tether_brain.runs.handlers import serve_runs
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
from tether_common.identity import TokenStore, serve_verify, tokens_router
from tether_common.messages.approvals import ApprovalDecided
from tether_common.messages.deltas import DeltaAsk
from tether_common.messages.kills import KillsChanged
from tether_common.messages.runs import ChildEnded, GrantsChanged, StopRun
from tether_common.safety.urls import PrivateHosts
from tether_common.service import Service
from tether_common.settings import CommonSettings

SERVICE = "brain"


def create_app(common: CommonSettings, settings: BrainSettings) -> FastAPI:
    service = Service(SERVICE, common, migrations=Path(__file__).parent / "migrations")
    brain = build(service, common, settings)
    return service.app(
        title="Tether brain",
        on_start=brain.start,
        on_stop=brain.stop,
        routers=brain.routers(),
        verifier=brain.identity,
        state=brain.state(),
    )


# ---- the parts ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Tools:
    """What runs call: the tools-runner's tools and the brain's own, in one toolbox."""

    skills: SkillLibrary
    documents: Documents  # retrieval: `search_documents` reads them
    # What runs remember across threads: `memory_save`, `memory_search`, a thread's recall.
    memory: Memory
    toolbox: Toolbox


@dataclass(frozen=True, slots=True)
class HookParts:
    """Lifecycle hooks: each tenant's, kept beside its policy, asked by the loop."""

    book: HookBook
    destinations: Destinations
    hooks: Hooks


@dataclass(frozen=True, slots=True)
class Runs:
    """The runs and what keeps them going: the manager, the model client (which answers
    delta asks), the kill switch and the lease maintenance."""

    manager: RunManager
    model: ModelClient
    kill_switch: KillSwitch
    maintenance: Maintenance


def build(service: Service, common: CommonSettings, settings: BrainSettings) -> Brain:
    # Who calls: every route and request checks a principal from here (identity).
    identity = TokenStore(
        service.engine,
        operator_token=common.operator_token,
        operator_token_sha256=common.operator_token_sha256,
    )
    agents = Agents(
        settings.agents,
        workspace=settings.workspace,
        guardrails=settings.guardrails,
        allowlist=settings.allowlist,
    )
    tools = build_tools(service, settings, agents)
    # Agents and policy as stored resources; the settings above only seed them.
    overrides = AgentStore(service.engine, agents, service.bus, refresh_s=settings.grants_refresh_s)
    approvals = ApprovalClient(service.bus, expiry_s=settings.approval_expiry_s)
    hooks = build_hooks(service, settings, overrides)
    runs = build_runs(service, common, settings, agents, tools, hooks.hooks, approvals)
    manager = runs.manager
    schedule_store = ScheduleStore(service.engine)
    scheduler = Scheduler(
        schedule_store,
        manager,
        identity,
        poll_s=settings.schedule_poll_s,
        grace_s=settings.schedule_grace_s,
    )
    return Brain(
        service,
        settings,
        identity,
        agents,
        overrides,
        approvals,
        tools,
        hooks,
        runs,
        threads=ThreadManager(ThreadStore(service.engine), manager),
        schedules=ScheduleManager(schedule_store, manager),
        scheduler=scheduler,
        # Agents as the tools of an MCP server at /mcp (the SDK loaded on its first request).
        mcp_face=McpFace(manager),
    )


def build_tools(service: Service, settings: BrainSettings, agents: Agents) -> Tools:
    skills = SkillLibrary(FolderSkillStore(settings.skill_folders))
    documents = Documents(service.engine)
    memory = Memory(service.engine, agents)
    toolbox = Toolbox(
        BusRunner(service.bus),
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
    return Tools(skills, documents, memory, toolbox)


def build_hooks(service: Service, settings: BrainSettings, overrides: AgentStore) -> HookParts:
    book = HookBook(overrides, refresh_s=settings.hooks_refresh_s)
    destinations = Destinations(PrivateHosts.of(settings.hooks_private_hosts))
    caller = Caller(
        service.bus,
        run_builtin,
        destinations,
        max_reply_bytes=settings.hooks_max_reply_bytes,
        ca_file=settings.hooks_ca_file,
    )
    return HookParts(book, destinations, Hooks(book, caller.call, keep=output_keeper(service.bus)))


def build_runs(
    service: Service,
    common: CommonSettings,
    settings: BrainSettings,
    agents: Agents,
    tools: Tools,
    hooks: Hooks,
    approvals: ApprovalClient,
) -> Runs:
    bus, store = service.bus, RunStore(service.engine)
    tasks = RunTasks(
        store, Leases(settings.lease_s, settings.lease_margin), drain_s=settings.drain_s
    )

    async def launch(child: RunState) -> None:  # a helper run the loop starts
        await runner.launch_child(child)

    model = ModelClient(bus, timeout_s=settings.model_timeout_s)
    loop = build_loop(service, settings, store, model, agents, tools, hooks, approvals, launch)
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
    return Runs(manager, model, kill_switch, maintenance)


def build_loop(
    service: Service,
    settings: BrainSettings,
    store: RunStore,
    model: ModelClient,
    agents: Agents,
    tools: Tools,
    hooks: Hooks,
    approvals: ApprovalClient,
    launch: Callable[[RunState], Awaitable[None]],
) -> Loop:
    actor = Actor(
        tools.toolbox,
        agents,
        max_calls_per_step=settings.max_calls_per_step,
        tree_of=store.queries.children,
        service_wait_s=settings.service_wait_s,
        hooks=hooks,
    )
    profiles = Profiles(
        service.bus,
        ttl_s=settings.profile_ttl_s,
        overrides=settings.prompt_tiers,
        windows=settings.context_windows,
        default_window=settings.default_context_window,
    )
    return Loop(
        service.bus,
        store,
        model,
        actor,
        approvals,
        tools.skills,
        profiles,
        launch=launch,
        prices=settings.prices,
        quotas=Quotas(service.engine, agents),
        memory=tools.memory,
    )


# ---- what starts, what is served, what stops --------------------------------------------


@dataclass(frozen=True, slots=True)
class Brain:
    service: Service
    settings: BrainSettings
    identity: TokenStore
    agents: Agents
    overrides: AgentStore
    approvals: ApprovalClient
    tools: Tools
    hooks: HookParts
    runs: Runs
    threads: ThreadManager
    schedules: ScheduleManager
    scheduler: Scheduler
    mcp_face: McpFace

    async def start(self) -> None:
        await self.load()
        await self.follow_changes()
        await self.serve_bus()
        self.service.background.start("leases", self.runs.maintenance.run())
        self.service.background.start("scheduler", self.scheduler.run_forever())

    async def load(self) -> None:
        """Before serving: no run may be gated on grants a change has already replaced,
        nor start in scope of a kill (it survives restarts)."""
        await self.overrides.seed()
        await self.overrides.load()
        await serve_verify(self.service.bus, self.identity)
        await self.runs.kill_switch.refresh()
        await self.tools.documents.refresh()  # whether `search_documents` is offered

    async def follow_changes(self) -> None:
        """Kill switches and grants changed on another replica, and the grants re-read."""
        bus, subjects = self.service.bus, self.service.subjects
        await bus.listen(subjects.kills_changed, KillsChanged, self.runs.kill_switch.on_changed)
        await bus.listen(subjects.agent_grants_changed, GrantsChanged, self.overrides.on_changed)
        self.service.background.start("grants refresh", self.overrides.refresh_forever())

    async def serve_bus(self) -> None:
        """The client API over NATS (runs, threads), then what other replicas and
        services tell the runs."""
        bus, subjects, manager = self.service.bus, self.service.subjects, self.runs.manager
        await serve_runs(bus, manager, self.identity)
        await serve_threads(bus, self.threads, self.identity)
        await bus.listen(subjects.run_stopping, StopRun, manager.on_stop_broadcast)
        await bus.listen(subjects.run_child_ended, ChildEnded, manager.on_child_ended)
        await bus.listen(subjects.run_deltas_ask, DeltaAsk, self.runs.model.on_ask)
        await bus.consume(
            subjects.approval_decided,
            durable="brain_decisions",
            model=ApprovalDecided,
            handler=manager.on_decision,
        )

    # Shutdown (Service.stop): no message is taken any more, the handlers in flight finish,
    # the background loops stop; then every run is handed back while the bus and the
    # database are still open; then both close.
    async def stop(self) -> None:
        await self.mcp_face.stop()  # its calls in flight end; their runs go on
        await self.runs.manager.close()
        await self.hooks.hooks.close()  # run-end notices in flight

    def routers(self) -> list[APIRouter]:
        """Every HTTP route, in this order (paths and the OpenAPI document follow it)."""
        return [
            runs_api.router,
            kill_api.router,
            threads_api.router,
            schedules_api.router,
            tokens_router(self.identity),
            console_page_router(),
            console_api_router,
            agents_api.router,
            quotas_api.router,
            hooks_api.router,
            skills_api.router,
            documents_api.router,
            memory_api.router,
            models_api.router,
            tool_servers_api.router,
            openai_face_api.router,
            mcp_face_api.router,
            policy_api.router,
        ]

    def state(self) -> dict[str, object]:
        """The parts the routes read from `app.state`, each under its name."""
        manager = self.runs.manager
        policy = policy_api.policy_state(
            self.agents,
            self.tools.toolbox,
            self.approvals,
            self.overrides,
            engine=self.service.engine,
        )
        return {
            deps.AGENT_STORE: self.overrides,
            deps.BUS: self.service.bus,
            deps.DOCUMENTS: self.tools.documents,
            deps.HOOK_BOOK: self.hooks.book,
            deps.HOOK_DESTINATIONS: self.hooks.destinations,
            deps.KILL_SWITCH: self.runs.kill_switch,
            deps.MEMORY: self.tools.memory,
            deps.QUOTAS: manager.quotas,
            deps.RUN_MANAGER: manager,
            deps.SCHEDULES: self.schedules,
            deps.SKILLS: self.tools.skills,
            deps.THREAD_MANAGER: self.threads,
            deps.TOOLBOX: self.tools.toolbox,
            **policy,
            **console_state(manager, trace_url=self.settings.trace_url),
            openai_face_api.FOLLOWER: Follower(manager),
            mcp_face_api.MCP_FACE: self.mcp_face,
        }
