"""What runs remember, as the API and the tools manage it: add, list, search and forget
memories, each addition and each forgetting recorded in the `memory` audit trail in its
own transaction (a change that could not be audited is not made).

Who may: `memory.read` / `memory.write`. A user (`owner`, `client`) reaches only what
is kept about itself; an operator everything of its tenant, and only operators write an
agent's own memories (no owner: every user's runs with that agent find them); an admin
any tenant, naming it. A memory out of reach answers 404, exactly like a missing one.
What a run finds is not decided here but in the search's own query (`MemoryScope`)."""

from __future__ import annotations

import logging
import uuid
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from tether_brain.agents.config import Agents
from tether_brain.agents.records import digest
from tether_brain.persistence import trail
from tether_brain.persistence.memory import (
    MAX_MEMORIES_PER_OWNER,
    Filter,
    FullTextIndex,
    MemoryIndex,
    MemoryScope,
    MemoryStore,
    memory_id_of,
)
from tether_brain.tools.documents import scope_of
from tether_common.errors import AuthError, ErrorCode, MessageError, NotFoundError
from tether_common.identity import Action, Principal
from tether_common.messages.memory import (
    LISTED,
    MAX_RESULTS,
    AddMemory,
    MemoryForgotten,
    MemoryList,
    MemoryView,
)

log = logging.getLogger(__name__)

MEMORY_TRAIL = "memory"  # one hash chain for every memory kept and forgotten


def _resource(view: MemoryView) -> str:
    """How the audit trail names a memory (never its text: the digest covers that)."""
    return f"memory:{view.tenant}/{view.agent}/{view.owner or '*'}/{view.memory_id}"


async def _audit(
    conn: AsyncConnection, event: str, view: MemoryView, by: str, *, kept: bool
) -> None:
    record = view.model_dump(mode="json", exclude={"version", "rank"})
    data: dict[str, Any] = {
        "resource": _resource(view),
        "by": by,
        "tenant": view.tenant,
        "before": None if kept else digest(record),
        "after": digest(record) if kept else None,
    }
    await trail.record(conn, MEMORY_TRAIL, event, data)


class Memory:
    def __init__(
        self,
        engine: AsyncEngine,
        agents: Agents,
        *,
        index: MemoryIndex | None = None,
        most: int = MAX_MEMORIES_PER_OWNER,
    ) -> None:
        self.engine = engine
        self.agents = agents
        self.store = MemoryStore(engine, most=most)
        self.index: MemoryIndex = index or FullTextIndex(engine)

    # ---- what runs do -------------------------------------------------------------

    async def save(self, scope: MemoryScope, text: str, *, key: str, by: str) -> MemoryView:
        """Keep `text` in `scope`, once per `key` (a save sent again is the saved row)."""
        async with self.engine.begin() as conn:
            view, new = await self.store.add(
                conn, memory_id=memory_id_of(key), scope=scope, body=text, by=by
            )
            if new:
                await _audit(conn, "memory.saved", view, by, kept=True)
        return view

    async def find(
        self, scope: MemoryScope, query: str, limit: int, *, any_word: bool = False
    ) -> list[MemoryView]:
        return await self.index.search(scope, query, limit=limit, any_word=any_word)

    # ---- the API --------------------------------------------------------------------

    def _agent(self, tenant: str, agent: str | None) -> str:
        """The agent id `agent` names for `tenant` (404 for one it cannot use)."""
        return self.agents.resolve(tenant, agent)[0][1]

    async def add(self, body: AddMemory, who: Principal) -> MemoryView:
        tenant = scope_of(who, "memory.write", body.tenant) or who.tenant
        wide = who.reach_of("memory.write") != "own"  # an operator's or an admin's
        if body.agent_wide and not wide:
            raise AuthError("only operators keep an agent's own memories", code=ErrorCode.FORBIDDEN)
        if body.agent_wide and body.owner is not None:
            raise MessageError(
                "an agent's own memory has no owner: give agent_wide or owner, not both",
                code=ErrorCode.INVALID_REQUEST,
            )
        if not body.text.strip():
            raise MessageError(
                "the text is blank: say what to keep", code=ErrorCode.INVALID_REQUEST
            )
        owner = None if body.agent_wide else (body.owner or who.name)
        if owner != who.name and not body.agent_wide and not wide:
            raise AuthError("a user keeps memories only for itself", code=ErrorCode.FORBIDDEN)
        scope = MemoryScope(tenant, self._agent(tenant, body.agent), owner)
        key = f"api:{uuid.uuid4().hex}"
        view = await self.save(scope, body.text.strip(), key=key, by=who.label)
        log.info("memory %s kept in %s by %s", view.memory_id, tenant, who.label)
        return view

    def _filter(
        self,
        who: Principal,
        action: Action,
        tenant: str | None,
        owner: str | None,
        agent: str | None,
    ) -> Filter:
        """What `who` reaches for `action` among the memories it asks for: a user only
        its own (asking for another's is 404), an operator its tenant's."""
        scope = scope_of(who, action, tenant)
        if who.reach_of(action) == "own":
            if owner is not None and owner != who.name:
                raise NotFoundError("no such resource")
            owner = who.name
        return Filter(scope, owner=owner, agent=agent)

    async def listing(
        self,
        who: Principal,
        *,
        tenant: str | None = None,
        owner: str | None = None,
        agent: str | None = None,
        agent_wide: bool = False,
        limit: int = LISTED,
    ) -> MemoryList:
        scope = self._filter(who, "memory.read", tenant, owner, agent)
        if agent_wide:
            if who.reach_of("memory.read") == "own":
                raise NotFoundError("no such resource")
            scope = Filter(scope.tenant, agent=agent, agent_wide=True)
        return MemoryList(memories=await self.store.listing(scope, limit))

    async def search(
        self,
        who: Principal,
        query: str,
        *,
        agent: str | None = None,
        owner: str | None = None,
        tenant: str | None = None,
        limit: int = MAX_RESULTS,
    ) -> MemoryList:
        """What a run of `owner` (a user: itself) with `agent` would find for `query`."""
        scope = self._filter(who, "memory.read", tenant, owner, agent)
        home = scope.tenant or who.tenant
        if await self.index.words(query) == 0:
            raise MessageError(
                "the query holds no searchable words (only punctuation, operators or very "
                "common words)",
                code=ErrorCode.INVALID_REQUEST,
            )
        found = MemoryScope(home, self._agent(home, agent), scope.owner)
        return MemoryList(memories=await self.find(found, query, limit))

    async def forget(self, memory_id: str, who: Principal, tenant: str | None = None) -> None:
        """Forget one memory (404: none within reach)."""
        known = await self.store.get(memory_id, scope_of(who, "memory.write", tenant))
        if known is None or not who.sees("memory.write", known.tenant, known.owner):
            raise NotFoundError(f"no memory '{memory_id}'")
        await self._remove(Filter(known.tenant, owner=known.owner), who, [memory_id])

    async def forget_all(
        self,
        who: Principal,
        *,
        owner: str | None = None,
        agent: str | None = None,
        tenant: str | None = None,
    ) -> MemoryForgotten:
        """Forget everything kept about `owner` (a user: itself), with `agent` or all."""
        scope = self._filter(who, "memory.write", tenant, owner or who.name, agent)
        # One tenant's, always: an admin naming none means its own, never every tenant's.
        scope = Filter(scope.tenant or who.tenant, owner=scope.owner, agent=agent)
        return MemoryForgotten(forgotten=len(await self._remove(scope, who, None)))

    async def _remove(
        self, scope: Filter, who: Principal, memory_ids: list[str] | None
    ) -> list[MemoryView]:
        async with self.engine.begin() as conn:
            gone = await self.store.remove(conn, scope, memory_ids)
            for view in gone:
                await _audit(conn, "memory.forgotten", view, who.label, kept=False)
        log.info("%d memories forgotten by %s", len(gone), who.label)
        return gone
