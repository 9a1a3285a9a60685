"""The kill switch on the wire: `POST /v1/kill` and `POST /v1/kill/lift` (admins),
`GET /v1/kill`, and the `kills.changed` notice every brain replica hears.

A kill's scope is `all` (every run), `tenant` (the runs of one tenant) or `agent` (the
runs of one agent; agent ids are per tenant, so an agent kill names its tenant too)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal, Self

from pydantic import Field, model_validator

from tether_common.messages.base import ID_PATTERN, WireModel, WireRequest

KillScope = Literal["all", "tenant", "agent"]
KILL_SCOPES: tuple[KillScope, ...] = ("all", "tenant", "agent")
MAX_REASON = 1000


class KillTarget(WireRequest):
    """What a kill stops: `all`; `tenant` with `tenant`; `agent` with `agent` and the
    agent's `tenant` (left out: the caller's own tenant)."""

    scope: KillScope
    tenant: str | None = Field(default=None, pattern=ID_PATTERN, max_length=200)
    agent: str | None = Field(default=None, pattern=ID_PATTERN, max_length=200)

    @model_validator(mode="after")
    def _fits_scope(self) -> Self:
        if self.scope == "all" and (self.tenant is not None or self.agent is not None):
            raise ValueError("a kill of `all` names no tenant and no agent")
        if self.scope == "tenant" and (self.tenant is None or self.agent is not None):
            raise ValueError("a kill of a `tenant` names the tenant and no agent")
        if self.scope == "agent" and self.agent is None:
            raise ValueError("a kill of an `agent` names the agent (and its tenant)")
        return self


class KillRequest(KillTarget):
    """`POST /v1/kill`: stop every running run in scope and refuse new ones until lifted."""

    reason: str | None = Field(default=None, max_length=MAX_REASON)


class LiftRequest(KillTarget):
    """`POST /v1/kill/lift`: end the kill in force on exactly this target."""

    reason: str | None = Field(default=None, max_length=MAX_REASON)


class KillView(WireModel):
    """One kill, in force (`lifted_at` None) or lifted (kept for the record)."""

    kill_id: int
    scope: KillScope
    tenant: str | None
    agent: str | None
    reason: str | None
    killed_by: str
    killed_at: datetime
    lifted_by: str | None = None
    lifted_at: datetime | None = None
    lift_reason: str | None = None


class KillList(WireModel):
    """`GET /v1/kill`: newest first; a non-admin sees only the kills that apply to its
    tenant."""

    kills: list[KillView]


class KillsChanged(WireRequest):
    """Broadcast: a kill was set or lifted; every brain replica re-reads the kills."""

    kill_id: int = Field(ge=1)
