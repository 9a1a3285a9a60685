"""A small world of principals and resources in two tenants, made through the real
services, for the authorisation tests (`tests/identity/test_brain_authz.py`,
`tests/identity/test_authz_table.py`).

Tenant A holds alice's and amy's runs (clients), an operator `opa`, a skill only A's
runs see, an agent of its own, and an output of alice's run; tenant B holds bob (a client) and `opb`. Every
resource of A carries `world.mark_a` somewhere in its content, so "nothing of the other
tenant in the body" is one substring check.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tether_client.server.supervisor import Supervisor
from tether_common.bus import Bus
from tether_common.messages.outputs import PutOutput
from tether_common.subjects import Subjects

ADMIN_TOKEN = "test-operator-token"  # tests/conftest.py: the bootstrap admin
PRIVILEGED = "privileged"  # an agent a client's token does not list (shared: every tenant's)


def stack_env(skills: Path, shipped: Path) -> dict[str, str]:
    """The stack's extra environment: a writable skill folder of its own (then the shipped
    skills), and one agent a client may not choose."""
    return {
        "TETHER_BRAIN_SKILL_FOLDERS": json.dumps([str(skills), str(shipped)]),
        "TETHER_BRAIN_AGENTS": json.dumps({PRIVILEGED: {"mode": "allow-all", "shared": True}}),
    }


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@dataclass
class World:
    brain: str
    outputs: str
    approvals: str
    subjects: Subjects
    tenant_a: str
    tenant_b: str
    mark_a: str  # in every resource of tenant A
    mark_b: str
    tokens: dict[str, str] = field(default_factory=dict)  # alice amy bob opa opb admin
    runs: dict[str, str] = field(default_factory=dict)  # alice amy bob opa → run id
    skill_a: str = ""  # a skill of tenant A (name carries no mark: bodies do)
    output_a: str = ""  # an output of alice's run
    agent_a: str = ""  # an agent of tenant A (not shared), made by its operator

    def headers(self, who: str) -> dict[str, str]:
        return bearer(self.tokens[who]) if who != "anonymous" else {}


async def _token(http: httpx.AsyncClient, name: str, role: str, tenant: str) -> str:
    body = {"name": name, "role": role, "tenant": tenant}
    response = await http.post("/v1/tokens", json=body, headers=bearer(ADMIN_TOKEN))
    assert response.status_code == 201, response.text
    return str(response.json()["token"])


async def _finished_run(http: httpx.AsyncClient, token: str, prompt: str) -> str:
    """Start a run as `token`'s principal and follow its events to `run.end`."""
    started = await http.post("/v1/runs", json={"prompt": prompt}, headers=bearer(token))
    assert started.status_code == 201, started.text
    run_id = str(started.json()["run_id"])
    path = f"/v1/runs/{run_id}/events"
    async with http.stream("GET", path, headers=bearer(token), timeout=None) as events:
        async for line in events.aiter_lines():
            if line.strip() == "event: run.end":
                break
    return run_id


async def build_world(stack: Supervisor, bus: Bus) -> World:
    """Tenants, people, runs, a skill and an output on `stack`; `bus` may write outputs."""
    suffix = uuid.uuid4().hex[:8]
    world = World(
        brain=stack.child("brain").url,
        outputs=stack.child("output-store").url,
        approvals=stack.child("approvals").url,
        subjects=Subjects(stack.env["TETHER_SUBJECT_PREFIX"]),
        tenant_a=f"ta{suffix}",
        tenant_b=f"tb{suffix}",
        mark_a=f"ALICESECRET{suffix}",
        mark_b=f"BOBSECRET{suffix}",
    )
    people = {
        "alice": ("client", world.tenant_a),
        "amy": ("client", world.tenant_a),
        "opa": ("operator", world.tenant_a),
        "bob": ("client", world.tenant_b),
        "opb": ("operator", world.tenant_b),
    }
    async with httpx.AsyncClient(base_url=world.brain, timeout=30) as http:
        for name, (role, tenant) in people.items():
            world.tokens[name] = await _token(http, name, role, tenant)
        world.tokens["admin"] = ADMIN_TOKEN
        for name in ("alice", "amy", "opa"):
            prompt = f"{world.mark_a} {name}: what time is it in Tokyo?"
            world.runs[name] = await _finished_run(http, world.tokens[name], prompt)
        prompt = f"{world.mark_b} bob: what time is it in Tokyo?"
        world.runs["bob"] = await _finished_run(http, world.tokens["bob"], prompt)
        world.skill_a = f"a-only-{suffix}"
        skill = {
            "name": world.skill_a,
            "description": f"Tenant A's own practice {suffix}. Use when asked about zebras.",
            "body": f"- {world.mark_a}: never leave tenant A.",
        }
        created = await http.post("/v1/skills", json=skill, headers=world.headers("opa"))
        assert created.status_code == 201, created.text
        assert created.json()["tenant"] == world.tenant_a
        world.agent_a = f"a-agent-{suffix}"
        agent = {"id": world.agent_a, "tenant": world.tenant_a, "done": {"message": world.mark_a}}
        created = await http.post("/v1/agents", json=agent, headers=world.headers("opa"))
        assert created.status_code == 201, created.text
    put = PutOutput(run_id=world.runs["alice"], content=f"{world.mark_a} output\n" * 50)
    world.output_a = (await bus.request(world.subjects.output_put, put)).ref
    return world


def leaks(response: httpx.Response | bytes | str, mark: str) -> bool:
    """Whether a body shows anything carrying `mark`."""
    if isinstance(response, httpx.Response):
        return mark in response.text
    text = response.decode(errors="replace") if isinstance(response, bytes) else response
    return mark in text


def error_code(response: httpx.Response) -> Any:
    """Tether's error code of an answer: `error.code`, or under `error.data` in a JSON-RPC
    error (the MCP face's, whose `error.code` is JSON-RPC's number)."""
    try:
        error = response.json()["error"]
        return error["data"]["code"] if "jsonrpc" in response.json() else error["code"]
    except (ValueError, KeyError, TypeError):
        return None
