"""What the brain's module-level routes depend on, read from `app.state`, where app.py
gives the service's parts to `Service.app` (`state=`): each part under one name here.
The caller is `tether_common.identity.http.Caller` (the same scheme and 401s as
`principal_dependency`)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from tether_brain.agents.store import AgentStore
from tether_brain.runs.manager import RunManager
from tether_brain.threads.manager import ThreadManager
from tether_brain.tools.toolbox import Toolbox

__all__ = [
    "AGENT_STORE",
    "RUN_MANAGER",
    "THREAD_MANAGER",
    "TOOLBOX",
    "AgentStoreDep",
    "RunManagerDep",
    "ThreadManagerDep",
    "ToolboxDep",
]

# Names on `app.state`.
AGENT_STORE = "agent_store"
RUN_MANAGER = "run_manager"
THREAD_MANAGER = "thread_manager"
TOOLBOX = "toolbox"


def agent_store(request: Request) -> AgentStore:
    found: AgentStore = getattr(request.app.state, AGENT_STORE)
    return found


def run_manager(request: Request) -> RunManager:
    found: RunManager = getattr(request.app.state, RUN_MANAGER)
    return found


def thread_manager(request: Request) -> ThreadManager:
    found: ThreadManager = getattr(request.app.state, THREAD_MANAGER)
    return found


def toolbox(request: Request) -> Toolbox:
    found: Toolbox = getattr(request.app.state, TOOLBOX)
    return found


AgentStoreDep = Annotated[AgentStore, Depends(agent_store)]
RunManagerDep = Annotated[RunManager, Depends(run_manager)]
ThreadManagerDep = Annotated[ThreadManager, Depends(thread_manager)]
ToolboxDep = Annotated[Toolbox, Depends(toolbox)]
