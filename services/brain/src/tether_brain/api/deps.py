"""What the brain's module-level routes depend on, read from `app.state`, where app.py
gives the service's parts to `Service.app` (`state=`): each part under one name here.
The caller is `tether_common.identity.http.Caller` (the same scheme and 401s as
`principal_dependency`)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, Request

from tether_brain.agents.quotas import Quotas
from tether_brain.agents.store import AgentStore
from tether_brain.hooks import Destinations, HookBook
from tether_brain.runs.kills import KillSwitch
from tether_brain.runs.manager import RunManager
from tether_brain.schedules.manager import ScheduleManager
from tether_brain.threads.manager import ThreadManager
from tether_brain.tools.documents import Documents
from tether_brain.tools.local import SkillLibrary
from tether_brain.tools.memory import Memory
from tether_brain.tools.toolbox import Toolbox
from tether_common.bus import Bus

__all__ = [
    "AGENT_STORE",
    "BUS",
    "DOCUMENTS",
    "HOOK_BOOK",
    "HOOK_DESTINATIONS",
    "KILL_SWITCH",
    "MEMORY",
    "POLICY",
    "QUOTAS",
    "REPLAY",
    "RUN_MANAGER",
    "SCHEDULES",
    "SKILLS",
    "THREAD_MANAGER",
    "TOOLBOX",
    "AgentStoreDep",
    "BusDep",
    "DestinationsDep",
    "DocumentsDep",
    "HookBookDep",
    "KillSwitchDep",
    "MemoryDep",
    "QuotasDep",
    "RunManagerDep",
    "ScheduleManagerDep",
    "SkillLibraryDep",
    "ThreadManagerDep",
    "ToolboxDep",
    "part",
]

# Names on `app.state`.
AGENT_STORE = "agent_store"
BUS = "bus"  # requests forwarded to the gateway and the tools-runner
DOCUMENTS = "documents"
HOOK_BOOK = "hook_book"
HOOK_DESTINATIONS = "hook_destinations"
KILL_SWITCH = "kill_switch"
MEMORY = "memory"
POLICY = "policy"  # api.policy.PolicyService
QUOTAS = "quotas"
REPLAY = "policy_replay"  # api.policy_replay.ReplayService
RUN_MANAGER = "run_manager"
SCHEDULES = "schedules"
SKILLS = "skills"
THREAD_MANAGER = "thread_manager"
TOOLBOX = "toolbox"


def part(name: str) -> Any:
    """`Annotated[T, part(NAME)]`: the part app.py put on `app.state` under `NAME`."""

    async def found(request: Request) -> Any:
        return getattr(request.app.state, name)

    found.__name__ = name
    return Depends(found)


AgentStoreDep = Annotated[AgentStore, part(AGENT_STORE)]
BusDep = Annotated[Bus, part(BUS)]
DestinationsDep = Annotated[Destinations, part(HOOK_DESTINATIONS)]
DocumentsDep = Annotated[Documents, part(DOCUMENTS)]
HookBookDep = Annotated[HookBook, part(HOOK_BOOK)]
KillSwitchDep = Annotated[KillSwitch, part(KILL_SWITCH)]
MemoryDep = Annotated[Memory, part(MEMORY)]
QuotasDep = Annotated[Quotas, part(QUOTAS)]
RunManagerDep = Annotated[RunManager, part(RUN_MANAGER)]
ScheduleManagerDep = Annotated[ScheduleManager, part(SCHEDULES)]
SkillLibraryDep = Annotated[SkillLibrary, part(SKILLS)]
ThreadManagerDep = Annotated[ThreadManager, part(THREAD_MANAGER)]
ToolboxDep = Annotated[Toolbox, part(TOOLBOX)]
