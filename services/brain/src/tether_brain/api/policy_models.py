"""The policy API's bodies and views: what `/v1/policy/explain`, an agent's tool
catalogue, a grant change and an audit check take and answer. The views the client reads
live in `tether_common.messages.policy` (one definition for both sides); a grant change
is the brain's alone."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from tether_common.messages.audit import AuditProblem, AuditReport
from tether_common.messages.base import RequestModel
from tether_common.messages.policy import (
    AgentCatalog,
    CatalogEntry,
    ExplainBody,
    Explanation,
    GrantSource,
)

__all__ = [
    "AgentCatalog",
    "AuditProblem",
    "AuditReport",
    "CatalogEntry",
    "ExplainBody",
    "Explanation",
    "GrantSource",
    "GrantsBody",
    "GrantsView",
]


class _Body(RequestModel):  # storable text, finite numbers (messages.base)
    model_config = ConfigDict(extra="forbid")


class GrantsBody(_Body):
    grants: list[str] = Field(max_length=500)


class GrantsView(BaseModel):
    agent: str
    grants: list[str]
    added: list[str]
    removed: list[str]
    waivers_added: list[str]
    waivers_removed: list[str]
