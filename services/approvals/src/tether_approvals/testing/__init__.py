"""A test harness for the approvals contract (shipped with the service, like the gateway's
fakes): typed helpers over the bus, the operator HTTP API and the decisions stream, and an
example registered approver; `testing.receiver` is a webhook receiver for tests.

`tether_approvals.testing:deny_forbidden_tools` is a dotted path deployments and tests
put in `TETHER_APPROVALS_APPROVERS`: it stays here."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import httpx

from tether_common.bus import Bus
from tether_common.messages.approvals import ApprovalDecided, ApprovalView, CreateApproval
from tether_common.messages.base import decode
from tether_common.messages.identity import CreateToken, Role

__all__ = ["ApprovalsHarness", "DenyForbiddenTools", "auth", "deny_forbidden_tools"]


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@dataclass
class ApprovalsHarness:
    """A running approvals service and the ways a test talks to it: the bus (as the
    brain does), HTTP (as an operator does) and the JetStream decisions subject."""

    bus: Bus
    http: httpx.AsyncClient
    url: str
    admin_token: str
    audit_jsonl: Path | None = None

    async def create(self, **fields: Any) -> ApprovalView:
        body = {
            "run_id": f"run_{uuid.uuid4().hex[:12]}",
            "step": 1,
            "tool": "shell",
            "args": {"command": "ls -la /tmp"},
            "danger": "networked",
            "reason": "shell commands need approval",
            "reach": "instance",
            "action_digest": uuid.uuid4().hex,
            "expires_in_s": 60.0,
        } | fields
        return await self.bus.request(self.bus.subjects.approval_create, CreateApproval(**body))

    async def token(self, role: Role, **scope: Any) -> str:
        body = CreateToken(name=f"{role}-{uuid.uuid4().hex[:6]}", role=role, **scope)
        response = await self.http.post(
            "/v1/tokens",
            json=body.model_dump(exclude_none=True),
            headers=auth(self.admin_token),
        )
        assert response.status_code == 201, response.text
        plain: str = response.json()["token"]
        return plain

    async def decide(
        self, approval_id: str, decision: str, token: str | None = None, note: str | None = None
    ) -> httpx.Response:
        return await self.http.post(
            f"/v1/approvals/{approval_id}/decision",
            json={"decision": decision, "note": note},
            headers=auth(token or self.admin_token),
        )

    async def decided(self, approval_id: str, timeout: float = 15.0) -> ApprovalDecided:
        """The decision as the brain sees it: from the JetStream subject."""
        async with asyncio.timeout(timeout):
            async for data in self.bus.replay(self.bus.subjects.approval_decided, idle_s=0.5):
                if data is None:
                    continue
                message = decode(ApprovalDecided, data)
                if message.approval_id == approval_id:
                    return message
        raise AssertionError("unreachable")


class DenyForbiddenTools:
    """An example registered approver (`tether_approvals.testing:deny_forbidden_tools`):
    denies tools named `forbidden_*`, has no opinion on `ask_*`, ignores the rest."""

    name = "deny-forbidden"

    async def __call__(self, req: CreateApproval) -> Literal["deny", "no_opinion"] | None:
        if req.tool.startswith("forbidden_"):
            return "deny"
        return "no_opinion" if req.tool.startswith("ask_") else None


deny_forbidden_tools = DenyForbiddenTools()
