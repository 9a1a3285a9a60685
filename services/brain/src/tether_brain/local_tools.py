"""Tools the brain answers itself (they need the run, not a sandbox): `load_skill` now,
`run_agent` next. They pass the same gates as the runner's tools."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Protocol

from tether_brain.events import emit
from tether_brain.skills import LOAD_SKILL, Skill, SkillStore, load_skill, load_skill_descriptor
from tether_brain.state import RunState
from tether_common.messages.gateway import CallRecord
from tether_common.messages.tools import ToolDescriptor, ToolResult


class LocalTool(Protocol):
    name: str

    def descriptor(self) -> ToolDescriptor | None:
        """The descriptor, or None while the tool has nothing to offer."""

    async def run(self, state: RunState, call: CallRecord) -> ToolResult: ...


class SkillLibrary:
    """The stored skills, re-read at most every `ttl_s` (the folders are the truth)."""

    def __init__(self, store: SkillStore, *, ttl_s: float = 5.0) -> None:
        self.store = store
        self.ttl_s = ttl_s
        self._skills: dict[str, Skill] = {}
        self._read_at = float("-inf")

    def current(self) -> Mapping[str, Skill]:
        if time.monotonic() - self._read_at > self.ttl_s:
            self._skills = self.store.by_name()
            self._read_at = time.monotonic()
        return self._skills

    async def refresh(self) -> Mapping[str, Skill]:
        if time.monotonic() - self._read_at > self.ttl_s:
            self._skills = await asyncio.to_thread(self.store.by_name)
            self._read_at = time.monotonic()
        return self._skills


class SkillTool:
    name = LOAD_SKILL

    def __init__(self, library: SkillLibrary) -> None:
        self.library = library

    def descriptor(self) -> ToolDescriptor | None:
        names = sorted(self.library.current())
        if not names:
            return None
        # Skills are written by operators (the skills API, the skill folders): trusted.
        return load_skill_descriptor(names).model_copy(update={"output_trust": "trusted"})

    async def run(self, state: RunState, call: CallRecord) -> ToolResult:
        result = load_skill(await self.library.refresh(), call)
        if result.ok:
            emit(
                state,
                "skill.used",
                step=state.step,
                name=call.arguments.get("name"),
                via="load_skill",
            )
        return result
