"""What the agents store keeps and records: a stored agent or policy document, the
policy trail's change records (digests before and after), and how a row still from the
settings follows this replica's own seeds."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from pydantic import ValidationError
from sqlalchemy import and_, select, text
from sqlalchemy.ext.asyncio import AsyncConnection

from tether_brain.agents.config import GLOBAL, AgentConfig, AgentKey, Agents
from tether_brain.agents.overrides import SETTINGS
from tether_brain.persistence import trail
from tether_brain.persistence.policy_tables import policy_documents
from tether_common import audit

log = logging.getLogger(__name__)

POLICY_TRAIL = "policy"  # one hash chain for every agent and policy change
SEEDED_BY = "settings"
# A tenant's quota (`agents.quotas`) and hooks (`hooks/`) are documents too, of their
# tenant's scope only.
Kind = Literal["guardrails", "allowlist", "quota", "hooks"]
KINDS: tuple[Kind, ...] = ("guardrails", "allowlist")  # the policy the gates read


def digest(value: Any) -> str:
    """sha256 of a resource's canonical JSON (the audit's before/after)."""
    return hashlib.sha256(audit.canonical(value).encode()).hexdigest()


def spec_of(config: AgentConfig) -> dict[str, Any]:
    return config.model_dump(mode="json")


@dataclass(frozen=True, slots=True)
class StoredAgent:
    agent_id: str
    config: AgentConfig
    version: int
    source: str
    changed_by: str
    changed_at: datetime

    @property
    def key(self) -> AgentKey:
        return (self.config.tenant, self.agent_id)


@dataclass(frozen=True, slots=True)
class StoredDocument:
    """A scope's guardrails (`dict` pattern -> rule) or allow-list (`list` of entries);
    version 0: never stored (the body is empty)."""

    kind: Kind
    scope: str
    body: Any
    version: int
    source: str | None
    changed_by: str | None
    changed_at: datetime | None


# The caller's rule for a change: given the agent as it stands (None: none), the new
# definition (None: delete it), or an exception (403/404/422) that stops the change.
Decide = Callable[[StoredAgent | None], AgentConfig | None]


def agent_of(row: Any) -> StoredAgent | None:
    try:
        config = AgentConfig.model_validate(row.spec)
    except ValidationError as exc:  # never in force half-read; the API shows it missing
        log.error("agent %s is stored in a shape this brain cannot read: %s", row.agent_id, exc)
        return None
    if config.tenant != row.tenant:  # the row's key is what the agent is found by
        config = config.model_copy(update={"tenant": row.tenant})
    return StoredAgent(
        row.agent_id, config, row.version, row.source, row.changed_by, row.changed_at
    )


def empty_body(kind: Kind) -> Any:
    return [] if kind == "allowlist" else {}


# A row still from the settings (never changed through the API) follows this
# replica's own settings: replicas configured alike agree anyway, and one started
# with other settings (a rolling restart, or another stack on a shared database)
# is never silently switched to its neighbour's seed.
def own_seed(agents: Agents, stored: StoredAgent) -> AgentConfig:
    if stored.source != SETTINGS:
        return stored.config
    return agents.seeds.get(stored.key, stored.config)


def own_body(agents: Agents, doc: Any) -> Any:
    if doc.source != SETTINGS or doc.scope != GLOBAL:
        return doc.body
    if doc.kind == "guardrails":
        return dict(agents.seed_guardrails)
    return list(agents.seed_allowlist)


async def record_change(
    conn: AsyncConnection,
    event: str,
    resource: str,
    before: Any,
    after: Any,
    who: str = SEEDED_BY,
    *,
    tenant: str | None = None,
    sink: audit.JsonlSink | None,
) -> None:
    """One record in the `policy` trail: who changed what (an agent's: in which tenant),
    with the digests of the resource before and after (None: it did not / no longer
    exists)."""
    if isinstance(after, AgentConfig):
        after = spec_of(after)
    data = {
        "resource": resource,
        "by": who,
        "before": None if before is None else digest(before),
        "after": None if after is None else digest(after),
    }
    if tenant is not None:
        data["tenant"] = tenant
    await trail.record(conn, POLICY_TRAIL, event, data, sink=sink)


async def document_row(conn: AsyncConnection, kind: Kind, scope: str) -> Any:
    return (
        await conn.execute(
            select(policy_documents).where(
                and_(policy_documents.c.kind == kind, policy_documents.c.scope == scope)
            )
        )
    ).first()


async def legacy_grants(conn: AsyncConnection) -> dict[str, list[str]]:
    """Grant changes kept by the brain before agents were stored (migration 0005)."""
    exists = await conn.scalar(text("SELECT to_regclass('agent_grants') IS NOT NULL"))
    if not exists:
        return {}
    rows = await conn.execute(text("SELECT agent_id, grants FROM agent_grants"))
    return {r.agent_id: list(r.grants) for r in rows}
