"""The stack the faces' tests run against: the scripted provider as the brain's own
(its default script answers plainly), a second agent only operators may run, a tool that
always asks (`convert_time`), and tokens for the callers the tests play."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from faces_support import ADMIN_TOKEN, ASKS, DEFAULT_ANSWER, DEFAULT_SCRIPT, PRIVILEGED, Callers
from tether_client.server.supervisor import Supervisor
from tether_common.testing import say


@pytest.fixture(scope="module")
def stack_extra_env(scripts_dir: Path) -> dict[str, str]:
    (scripts_dir / f"{DEFAULT_SCRIPT}.json").write_text(
        json.dumps({"turns": [say(DEFAULT_ANSWER)]})
    )
    return {
        "TETHER_BRAIN_PROVIDER": "scripted",
        "TETHER_BRAIN_MODEL": DEFAULT_SCRIPT,
        "TETHER_BRAIN_AGENTS": json.dumps({PRIVILEGED: {"mode": "allow-all"}}),
        "TETHER_BRAIN_GUARDRAILS": json.dumps({ASKS: "confirm"}),
    }


async def _token(http: httpx.AsyncClient, name: str, role: str) -> str:
    body = {"name": name, "role": role}
    made = await http.post(
        "/v1/tokens", json=body, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}
    )
    assert made.status_code == 201, made.text
    return str(made.json()["token"])


@pytest.fixture(scope="module")
async def callers(stack: Supervisor) -> Callers:
    brain = stack.child("brain").url
    async with httpx.AsyncClient(base_url=brain, timeout=60) as http:
        client = await _token(http, "facesclient", "client")
        viewer = await _token(http, "facesviewer", "viewer")
    return Callers(brain, stack.child("approvals").url, ADMIN_TOKEN, client, viewer)
