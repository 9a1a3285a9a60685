"""The brain's policy API over HTTP: what `/v1/policy/explain`, an agent's tool catalogue
and an operator's manual tool run take and answer. The brain serves these
models and the client reads them, so both sides share one definition."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from tether_common.messages.base import ErrorDetail, RequestModel
from tether_common.messages.runs import PermissionMode

GrantSource = Literal["grant", "scope", "mode", "allowlist"]


class _Body(RequestModel):  # storable text, finite numbers (messages.base)
    model_config = ConfigDict(extra="forbid")


class ExplainBody(_Body):
    tool: str = Field(min_length=1, max_length=200)
    args: dict[str, Any] = Field(default_factory=dict)
    agent: str | None = None
    mode: PermissionMode | None = None
    tainted: bool = False


class Explanation(BaseModel):
    """`decision` is `invalid` when validation refused the call (then `code` says why).
    `tainted` echoes what was asked; `output_trust` says whether this tool's own results
    would taint a run."""

    tool: str
    agent: str
    tainted: bool = False
    output_trust: str | None = None
    decision: Literal["allow", "ask", "deny", "invalid"]
    code: str | None
    reason: str
    reach: str | None = None
    danger: str | None = None
    grant: str | None = None
    waived: bool = False
    trail: list[str] = Field(default_factory=list)


class CatalogEntry(BaseModel):
    """`granted_by`: `grant` (see `grants`), `scope`, `mode` or `allowlist`; `blocked` is
    the gate code that refuses the tool whatever the arguments."""

    name: str
    scope: str
    reach: str
    effect: str
    output_trust: str
    needs_grant: bool
    granted: bool
    granted_by: GrantSource | None
    grants: list[str]
    rule: str | None
    conditional: bool
    waived: bool
    confirm: bool
    blocked: str | None


class AgentCatalog(BaseModel):
    agent: str
    owner: str | None
    mode: str
    tool_less: bool
    problems: list[str]
    tools: list[CatalogEntry]


class ManualRunBody(_Body):
    """An operator's manual tool run (`POST /v1/tools/run`); `approval_id` spends an
    approval granted for exactly this call."""

    tool: str = Field(min_length=1, max_length=200)
    args: dict[str, Any] = Field(default_factory=dict)
    agent: str | None = None
    approval_id: str | None = None


class ToolRunAsked(BaseModel):
    """A manual run the gates want approved first: the 403 body that names the approval
    request (`approval_id`) to decide, then send again with the run."""

    decision: Literal["ask"] = "ask"
    approval_id: str
    run_id: str
    error: ErrorDetail
