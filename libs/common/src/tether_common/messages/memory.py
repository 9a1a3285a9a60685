"""Memory on the wire: `/v1/memory` (list, search, add, forget) and what the brain's
`memory_save` and `memory_search` tools keep.

A memory belongs to one tenant and one agent, and to one user of that tenant (its
`owner`: the runs of that user with that agent find it) or, with no owner, to the agent
as a whole (every user's runs with that agent find it; only operators write those)."""

from __future__ import annotations

from datetime import datetime

from pydantic import Field

from tether_common.messages.base import ID_PATTERN, WireModel, WireRequest

MAX_MEMORY_CHARS = 2_000  # one fact, not a document (documents are for those)
MAX_QUERY_CHARS = 500
MAX_RESULTS = 10
MAX_RECALL = 5  # memories a thread's turn may recall into its prompt
LISTED = 500  # memories in one listing


class AddMemory(WireRequest):
    """`POST /v1/memory`: a memory for `agent` (None: the default agent). `owner`: whose
    (None: the caller's own); `agent_wide`: the agent's, for every user (operators only;
    then no `owner`). `tenant`: whose, for an admin (others always their own)."""

    text: str = Field(min_length=1, max_length=MAX_MEMORY_CHARS)
    agent: str | None = Field(default=None, pattern=ID_PATTERN, max_length=200)
    owner: str | None = Field(default=None, pattern=ID_PATTERN, max_length=200)
    agent_wide: bool = False
    tenant: str | None = Field(default=None, pattern=ID_PATTERN, max_length=200)


class MemoryView(WireModel):
    """One memory. `owner` None: the agent's, for every user of the tenant."""

    memory_id: str
    tenant: str
    agent: str
    owner: str | None = None
    text: str
    created_by: str = Field(description="the principal, or `run:<run_id>` for memory_save")
    created_at: datetime
    rank: float | None = Field(default=None, description="a search's relevance; else None")


class MemoryList(WireModel):
    """Memories, newest first (a search's: best first)."""

    memories: list[MemoryView]


class MemoryForgotten(WireModel):
    """`DELETE /v1/memory`: how many memories were forgotten."""

    forgotten: int
