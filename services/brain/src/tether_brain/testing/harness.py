"""A `Loop` built from the in-process parts (scripted model, memory store, local runner,
memory approvals, memory events, fake clock) and driven as the run manager drives the
real one: a run created leased, advanced to where it stops, parked runs resumed with a
decision, a parent resumed once its helpers have ended. No process, no socket: a rule of
the loop runs in milliseconds."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tether_brain.agents.config import BUDGET_FIELDS, Agents
from tether_brain.clients.approval import Decision
from tether_brain.context.profiles import Profiles
from tether_brain.hooks import Hooks
from tether_brain.loop.acting import Actor
from tether_brain.loop.dispatch import Loop
from tether_brain.settings import BrainSettings
from tether_brain.skills import FolderSkillStore
from tether_brain.state.control import Control
from tether_brain.state.options import RunOptions
from tether_brain.state.run import Limits, RunState
from tether_brain.testing.approvals import MemoryApprovals
from tether_brain.testing.clock import FakeClock
from tether_brain.testing.events import MemoryEvents
from tether_brain.testing.model import ScriptedModel
from tether_brain.testing.runner import LocalRunner, answering
from tether_brain.testing.store import MemoryStore
from tether_brain.tools.helpers import AgentTool
from tether_brain.tools.local import SkillLibrary, SkillTool
from tether_brain.tools.memory import Memory
from tether_brain.tools.remember import MEMORY_SAVE, MEMORY_SEARCH, MemoryTool
from tether_brain.tools.toolbox import Toolbox
from tether_common.messages.runs import RunEvent
from tether_common.testing.scripts import Turn

OWNER = "in-process"
LEASE_S = 3600.0


@dataclass(frozen=True, slots=True)
class Finished:
    """Where a run stands once the loop let go of it: as stored, and its events as a
    follower read them."""

    state: RunState
    events: list[RunEvent]

    def data(self, kind: str) -> list[dict[str, Any]]:
        """The data of every event of one kind, in order."""
        return [e.data for e in self.events if e.kind == kind]


class Harness:
    def __init__(
        self,
        runner: LocalRunner | None = None,
        *,
        settings: BrainSettings | None = None,
        workspace: Path | None = None,
        memory: Memory | None = None,
        hooks: Hooks | None = None,
        events: MemoryEvents | None = None,
    ) -> None:
        self.hooks = hooks  # the tenants' lifecycle hooks (None: none)
        self.memory = memory  # PostgreSQL's, for `memory_save`, `memory_search` and recall
        self.settings = settings or BrainSettings()
        self.clock = FakeClock()
        self.model = ScriptedModel(self.clock)
        self.store = MemoryStore(self.clock)
        self.events = events or MemoryEvents()
        self.approvals = MemoryApprovals()
        self.runner = runner or LocalRunner([], answering({}))
        self.agents = Agents(
            self.settings.agents,
            workspace=workspace or self.settings.workspace,
            guardrails=self.settings.guardrails,
            allowlist=self.settings.allowlist,
        )
        self.loop = self._loop()
        self._children: dict[str, list[asyncio.Task[Finished]]] = {}  # by parent

    def _loop(self) -> Loop:
        settings = self.settings
        skills = SkillLibrary(FolderSkillStore([]))
        toolbox = Toolbox(
            self.runner,
            ttl_s=settings.catalog_ttl_s,
            timeout_s=settings.tool_timeout_s,
            local=[SkillTool(skills), AgentTool(), *self._memory_tools()],
        )
        actor = Actor(
            toolbox, self.agents, max_calls_per_step=settings.max_calls_per_step, hooks=self.hooks
        )
        profiles = Profiles(
            None,  # no gateway: the settings' tiers and windows, else the defaults
            overrides=settings.prompt_tiers,
            windows=settings.context_windows,
            default_window=settings.default_context_window,
        )
        return Loop(
            self.events,
            self.store,
            self.model,
            actor,
            self.approvals,
            skills,
            profiles,
            launch=self._launch,
            prices=settings.prices,
            clock=self.clock,
            memory=self.memory,
        )

    def _memory_tools(self) -> list[MemoryTool]:
        if self.memory is None:
            return []
        return [MemoryTool(self.memory, MEMORY_SAVE), MemoryTool(self.memory, MEMORY_SEARCH)]

    def prepare(self, model: str, prompt: str, **options: Any) -> RunState:
        """A new run of `model` (a script's name), as `RunManager.prepare` makes one:
        the budget fields of `options` are its limits (the agent's defaults and ceilings
        applied), the rest its `RunOptions`."""
        asked = {k: options.pop(k) for k in BUDGET_FIELDS if k in options}
        run_options = RunOptions.model_validate(options)
        config = self.agents.of_run(run_options, "default")
        budget = self.agents.budgets(config, asked)
        steps = min(budget.pop("max_steps") or self.settings.max_steps, self.settings.step_ceiling)
        now = datetime.now(UTC)
        return RunState(
            run_id=f"run_{uuid.uuid4().hex}",
            prompt=prompt,
            provider="scripted",
            model=model,
            limits=Limits(max_steps=steps, **budget),
            created_at=now,
            updated_at=now,
            options=run_options,
            fence=1,
            owner="tester",
        )

    async def run(
        self,
        turns: list[Turn],
        prompt: str = "do the task",
        helpers: dict[str, list[Turn]] | None = None,
        **options: Any,
    ) -> Finished:
        """Run a script to where the loop lets go (ended, or parked for an operator), as
        the `run_script` fixture does through the real services."""
        state = self.prepare(self.model.add(turns, helpers), prompt, **options)
        await self.store.create(state, owner=OWNER, lease_s=LEASE_S)
        return await self.advance(state)

    async def advance(
        self, state: RunState, decision: Decision | None = None, control: Control | None = None
    ) -> Finished:
        await self.loop.run(state, control or Control(), decision)
        while state.status == "awaiting_agents":  # the helpers end, the parent resumes
            await asyncio.gather(*self._children.pop(state.run_id, []))
            state = await self._claim(state.run_id)
            await self.loop.run(state, Control(), helpers_done=True)
        return await self.finished(state.run_id)

    async def decide(
        self, run_id: str, decision: str = "allow_once", note: str | None = None
    ) -> Finished:
        """An operator's decision on the call `run_id` waits on; the run resumes with it
        (the decision's signature and claim are the run manager's, not tested here)."""
        state = await self._claim(run_id)
        pending = state.counters.pending_approval or {}
        chosen = Decision(str(pending.get("approval_id")), decision, note, "operator")
        return await self.advance(state, chosen)

    async def finished(self, run_id: str) -> Finished:
        return Finished(await self.store.load(run_id), self.events.of(run_id))

    async def _claim(self, run_id: str) -> RunState:
        """A parked run taken back by this replica, as a claim does (`leases.claim_parked`,
        `claim_waiting`): status running, a new fence, a lease."""
        run = self.store.runs[run_id]
        run.row["status"] = "running"
        run.row["fence"] += 1
        run.row["lease_owner"] = OWNER
        run.row["lease_expires_at"] = self.clock.monotonic() + LEASE_S
        return await self.store.load(run_id)

    async def _launch(self, child: RunState) -> None:
        """A helper the loop starts: created leased, advanced in a task of its own."""
        await self.store.create(child, owner=OWNER, lease_s=LEASE_S)
        assert child.parent_id is not None
        task = asyncio.ensure_future(self.advance(child))
        self._children.setdefault(child.parent_id, []).append(task)
