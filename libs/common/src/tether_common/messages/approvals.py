"""Approval requests between brain, approvals service and operators."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import Field

from tether_common.messages.base import WireModel

ApprovalStatus = Literal["pending", "granted", "denied", "expired", "consumed"]
Decision = Literal["allow_once", "allow_run", "allow_chat", "deny"]


class CreateApproval(WireModel):
    run_id: str
    step: int = Field(ge=0)
    tool: str
    args: dict[str, Any]
    danger: str = "unknown"
    reason: str
    reach: str = "external"
    action_digest: str
    expires_in_s: float = Field(default=180.0, gt=0, le=7 * 86400)


class ApprovalView(WireModel):
    approval_id: str
    run_id: str
    step: int
    tool: str
    args: dict[str, Any]
    danger: str
    reason: str
    reach: str
    action_digest: str
    status: ApprovalStatus
    decision: Decision | None = None
    note: str | None = None
    created_at: datetime
    expires_at: datetime


class ListApprovals(WireModel):
    status: ApprovalStatus | None = "pending"
    limit: int = Field(default=100, ge=1, le=1000)


class ApprovalList(WireModel):
    approvals: list[ApprovalView]
