"""What the faces' tests share beyond fixtures: the stack's names, the callers, and
deciding an approval as the admin."""

from __future__ import annotations

from dataclasses import dataclass

import httpx

ADMIN_TOKEN = "test-operator-token"  # tests/conftest.py: the bootstrap admin
DEFAULT_SCRIPT = "facesdefault"  # the brain's configured model (the scripted provider's script)
DEFAULT_ANSWER = "Hello from the default agent."
PRIVILEGED = "privileged"  # a client's token may not run it (not listed, not its own)
ASKS = "convert_time"  # a guardrail confirms every call of it: the run parks
ASK_ARGUMENTS = {"time": "09:00", "from_timezone": "UTC", "to_timezone": "Asia/Tokyo"}


@dataclass(frozen=True)
class Callers:
    brain: str
    approvals: str
    admin: str
    client: str  # a client of the default tenant
    viewer: str


async def decide(approvals: str, approval_id: str, decision: str = "allow_once") -> None:
    async with httpx.AsyncClient(timeout=30) as http:
        decided = await http.post(
            f"{approvals}/v1/approvals/{approval_id}/decision",
            json={"decision": decision, "note": "decided by a faces test"},
            headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
        )
    assert decided.status_code == 200, decided.text
