"""`RunOptions`: what a run was started with and what it has earned since (session grants),
one frozen model where a dict of string keys was. Stored as the run row's `options`
JSON with its unset fields left out, so rows written before keep loading."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from tether_common.messages.agents import ModelChoice
from tether_common.messages.gateway import CallRecord
from tether_common.messages.runs import PermissionMode


class RunOptions(BaseModel):
    # Frozen: a change is a new value (`with_grant`), committed with the step.
    model_config = ConfigDict(frozen=True, extra="ignore")

    agent: str | None = None  # None: the default agent
    # The tenant of the agent the run resolved at its start (its own tenant's, or a shared
    # one): every later lookup is of that agent exactly. None: a run stored before.
    agent_tenant: str | None = None
    mode: PermissionMode | None = None  # at most the agent's own mode
    allow_shell: bool | None = None  # False: the shell tool is switched off
    allow_web: bool | None = None  # False: network tools are switched off
    guide_only: bool = False  # no tool runs; the text is the answer
    research: bool = False  # an answer must rest on a retrieval
    interactive: bool = False  # ask an operator only while one is connected
    session_grants: tuple[str, ...] = ()  # tools an operator allowed for the whole run
    # A helper run's (sub-agent's) own: the tools it may use, its depth and shared folder.
    allowed_tools: tuple[str, ...] | None = None
    helper: bool = False
    depth: int = Field(default=0, ge=0)
    workspace: str | None = None
    # A thread's run: the thread, and how many messages of its earlier turns open the
    # history (they are context, not this run's own: no cache, no loop rule reads them).
    thread_id: str | None = None
    history: int = Field(default=0, ge=0)
    # How many of its owner's memories a thread's turn recalls into its prompt (0: none;
    # `tools/remember.py`). A helper never inherits it: its parent recalled already.
    recall: int = Field(default=0, ge=0)
    # Typed answers, pinned at the start (`runs/manager.py`): the agent's output schema
    # and the run's own (the answer must fit each), and how many answers that do not may
    # be sent back for repair. A helper run never inherits them: it answers its parent.
    output_schemas: tuple[dict[str, Any], ...] = ()
    output_repairs: int = Field(default=0, ge=0)
    # Who started the run, as (principal name, role): with the run's owner and tenant, the
    # reader `search_documents` retrieves for (its role only while it is the owner's).
    started_by: tuple[str, str] | None = None
    # The agent's fallback chain as the starter may use it (`runs/access.py`), pinned at
    # the start; each step still asks the agent in force (`clients/fallback.py`).
    fallback: tuple[ModelChoice, ...] = ()
    # The agent's instructions and prefetch calls, their template variables filled when
    # the run started (`agents/templated.py`): fixed for the run, so every step's prompt
    # prefix is the same and a step replayed after a takeover sees the same text.
    instructions: str | None = None
    prefetch: tuple[CallRecord, ...] = ()
    # The quota counters its usage adds to ('' its tenant's, '<agent tenant>/<agent>' its
    # agent's): those whose quota limited tokens or cost when it started (`agents.quotas`).
    metered: tuple[str, ...] = ()

    def stored(self) -> dict[str, Any]:
        """The run row's `options` JSON: only what was set."""
        return self.model_dump(mode="json", exclude_defaults=True)

    def with_grant(self, *tools: str) -> RunOptions:
        """These options with `tools` allowed for the rest of the run."""
        if not set(tools) - set(self.session_grants):
            return self
        return self.model_copy(
            update={"session_grants": tuple(sorted({*self.session_grants, *tools}))}
        )

    def inherited(self) -> dict[str, Any]:
        """What a helper run takes over from its parent."""
        keep = {
            "agent",
            "agent_tenant",
            "mode",
            "allow_shell",
            "allow_web",
            "session_grants",
            "interactive",
            "thread_id",
            "started_by",
            "fallback",
            "instructions",
            "metered",  # a helper's tokens are its tenant's too
        }
        return self.model_dump(include=keep, exclude_defaults=True)
