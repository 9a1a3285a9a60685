"""Tools the brain answers itself (they need the run, not a sandbox): `load_skill` now,
`run_agent` next. They pass the same gates as the runner's tools."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import Protocol

from tether_brain.skills import LOAD_SKILL, Skill, SkillStore, load_skill, load_skill_descriptor
from tether_brain.state.events import emit
from tether_brain.state.run import RunState
from tether_common.messages.events import SkillUsed
from tether_common.messages.gateway import CallRecord
from tether_common.messages.tools import ToolDescriptor, ToolResult

log = logging.getLogger(__name__)


class LocalTool(Protocol):
    name: str

    def descriptor(self) -> ToolDescriptor | None:
        """The descriptor, or None while the tool has nothing to offer."""

    async def run(self, state: RunState, call: CallRecord) -> ToolResult: ...


class SkillLibrary:
    """The stored skills as each tenant sees them, re-read at most every `ttl_s` (the
    folders are the truth). A run only ever gets its own tenant's view."""

    def __init__(self, store: SkillStore, *, ttl_s: float = 5.0) -> None:
        self.store = store
        self.ttl_s = ttl_s
        self._views: dict[str, tuple[float, dict[str, Skill]]] = {}
        self._any: tuple[float, bool] | None = None
        self._rereading: asyncio.Task[None] | None = None
        self._forgotten = 0  # `forget` calls so far: a read begun before one is stale

    def forget(self) -> None:
        """Re-read on next use (this replica wrote a skill; others within `ttl_s`)."""
        self._views.clear()
        self._any = None
        self._forgotten += 1

    def _fresh(self, tenant: str) -> Mapping[str, Skill] | None:
        found = self._views.get(tenant)
        if found is None or time.monotonic() - found[0] > self.ttl_s:
            return None
        return found[1]

    def current(self, tenant: str) -> Mapping[str, Skill]:
        view = self._fresh(tenant)
        if view is None:
            view = self.store.by_name(tenant)
            self._views[tenant] = (time.monotonic(), dict(view))
        return view

    async def refresh(self, tenant: str) -> Mapping[str, Skill]:
        view = self._fresh(tenant)
        if view is None:
            view = await asyncio.to_thread(self.store.by_name, tenant)
            self._views[tenant] = (time.monotonic(), dict(view))
        return view

    def any(self) -> bool:
        """Whether any scope holds a skill. Asked at every step, on the event loop, so
        reading the folders (every skill file, on a disk that may be busy) happens here
        only the first time and after `forget`; once the answer is older than `ttl_s`
        it is re-read in a thread and the last one stands meanwhile."""
        if self._any is None:
            self._any = (time.monotonic(), self._held())
        elif time.monotonic() - self._any[0] > self.ttl_s:
            self._reread()
        return self._any[1]

    def _held(self) -> bool:
        return bool(self.store.by_name(None)) or bool(self.store.every_tenant())

    def _reread(self) -> None:
        if self._rereading is not None and not self._rereading.done():
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop (a synchronous caller): read here
            self._any = (time.monotonic(), self._held())
            return
        self._rereading = loop.create_task(self._reread_in_thread())

    async def _reread_in_thread(self) -> None:
        forgotten = self._forgotten
        try:
            held = await asyncio.to_thread(self._held)
        except Exception:  # the folders could not be read: the last answer stands
            log.warning("skill folders could not be read again", exc_info=True)
            return
        if self._forgotten == forgotten:  # else a skill was written meanwhile: read again
            self._any = (time.monotonic(), held)


class SkillTool:
    name = LOAD_SKILL

    def __init__(self, library: SkillLibrary) -> None:
        self.library = library

    def descriptor(self) -> ToolDescriptor | None:
        if not self.library.any():
            return None
        # One descriptor for every run: it names no skill (the run's index does, and
        # `load_skill` checks the name against the run's tenant's view).
        # Skills are written by operators (the skills API, the skill folders): trusted.
        return load_skill_descriptor(None).model_copy(update={"output_trust": "trusted"})

    async def run(self, state: RunState, call: CallRecord) -> ToolResult:
        result = load_skill(await self.library.refresh(state.tenant), call)
        if result.ok:
            emit(
                state,
                SkillUsed(step=state.step, name=call.arguments.get("name"), via="load_skill"),
            )
        return result
