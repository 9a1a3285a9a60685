"""The policy API served for these tests: the brain's policy routes on a real port, in a
thread with its own event loop, wired to this module's stack (its tools-runner catalogue,
its approvals service, the shared PostgreSQL) with the agents below."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import pytest
import uvicorn
from fastapi import FastAPI

from shipped import OBSERVER, locked_bus
from tether_brain.agents.config import AgentConfig, Agents
from tether_brain.agents.overrides import GrantOverrides
from tether_brain.api import policy
from tether_brain.api.policy import policy_state
from tether_brain.api.static_verifier import StaticVerifier
from tether_brain.clients.approval import ApprovalClient
from tether_brain.clients.runner import BusRunner
from tether_brain.tools.toolbox import Toolbox
from tether_client.server.embedded import free_port
from tether_client.server.supervisor import Supervisor
from tether_common.bus import Bus
from tether_common.db import make_engine
from tether_common.http import install_error_handlers
from tether_common.subjects import Subjects

OPERATOR_TOKEN = "test-operator-token"  # tests/conftest.py: an admin token
CONFIRMED = "convert_time"
ORG_DENIED = "file_search"
GUARDRAILS: dict[str, Any] = {CONFIRMED: "confirm", ORG_DENIED: "deny"}
OWNER_TOKENS = {"alice": "alice-token", "bob": "bob-token"}
AGENTS = {
    "writer": AgentConfig(
        grants=["file_write?path=notes.txt#noapproval", "shell", "bad.*?x=1"], owner="alice"
    ),
    "waivers": AgentConfig(grants=["file_write#noapproval"], owner="alice"),
    "bobs": AgentConfig(grants=[], owner="bob"),
    "locked": AgentConfig(grants=["__none__"]),
}


@pytest.fixture(scope="module")
def stack_extra_env() -> dict[str, str]:
    """The stack's own brain confirms the same tool (for `tether run`'s inline card) and
    knows the same agents: it is a second replica beside the policy API served here."""
    agents = {name: config.model_dump() for name, config in AGENTS.items()}
    return {
        "TETHER_BRAIN_GUARDRAILS": json.dumps({CONFIRMED: "confirm"}),
        "TETHER_BRAIN_AGENTS": json.dumps(agents),
    }


class _Server(uvicorn.Server):
    """Tells the test thread when it listens."""

    def __init__(self, config: uvicorn.Config, listening: threading.Event) -> None:
        super().__init__(config)
        self.listening = listening

    async def startup(self, sockets: Any = None) -> None:
        await super().startup(sockets)
        self.listening.set()


@dataclass
class PolicyServer:
    """The thread serving the policy API; `url` is where it listens."""

    nats_url: str
    database_url: str
    prefix: str
    workspace: Path
    nats_user: str | None = None  # the stack's observer on its locked bus
    nats_password: str | None = None
    port: int = field(default_factory=free_port)
    listening: threading.Event = field(default_factory=threading.Event)
    server: _Server | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def app(self, bus: Bus, engine: Any) -> FastAPI:
        agents = Agents(dict(AGENTS), workspace=self.workspace, guardrails=GUARDRAILS, allowlist=[])
        toolbox = Toolbox(BusRunner(bus), ttl_s=60.0, timeout_s=30.0)
        app = FastAPI()
        install_error_handlers(app, "brain")
        parts = policy_state(
            agents,
            toolbox,
            ApprovalClient(bus, expiry_s=120.0),
            GrantOverrides(engine, agents, bus, refresh_s=3600),
            engine=engine,
        )
        for name, part in parts.items():
            setattr(app.state, name, part)
        app.state.verifier = StaticVerifier(OPERATOR_TOKEN, OWNER_TOKENS)
        app.include_router(policy.router)
        return app

    async def serve(self) -> None:
        subjects = Subjects(self.prefix)
        bus = await Bus.connect(
            self.nats_url,
            service="policy-test",
            subjects=subjects,
            user=self.nats_user,
            password=self.nats_password,
        )
        engine = make_engine(self.database_url, pool_size=2)
        try:
            config = uvicorn.Config(
                self.app(bus, engine),
                host="127.0.0.1",
                port=self.port,
                log_config=None,
                access_log=False,
                lifespan="off",
            )
            self.server = _Server(config, self.listening)
            await self.server.serve()
        finally:
            await engine.dispose()
            await bus.close()

    def run(self) -> None:
        asyncio.run(self.serve())


@pytest.fixture(scope="module")
async def policy_url(
    stack: Supervisor, database_url: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[str]:
    """Where the policy API listens (agents `writer`, `waivers`, `bobs`, `locked`;
    `convert_time` confirmed and `file_search` denied by the organisation)."""
    bus = locked_bus(stack)
    server = PolicyServer(
        bus.url,
        database_url,
        stack.env["TETHER_SUBJECT_PREFIX"],
        tmp_path_factory.mktemp("ws"),
        nats_user=OBSERVER,
        nats_password=bus.observers[OBSERVER],
    )
    thread = threading.Thread(target=server.run, name="policy-api", daemon=True)
    thread.start()
    try:
        assert await asyncio.to_thread(server.listening.wait, 30), "the policy API never listened"
        yield server.url
    finally:
        if server.server is not None:
            server.server.should_exit = True
        await asyncio.to_thread(thread.join, 30)


@pytest.fixture
def db_url(database_url: str) -> str:
    """The database as asyncpg spells it."""
    return database_url.replace("+asyncpg", "")


AuditRows = Callable[[str], Awaitable[list[dict[str, Any]]]]


@pytest.fixture
def audit_rows(db_url: str) -> AuditRows:
    """A trail's records as stored: seq, event and decoded data."""

    async def rows(trail: str) -> list[dict[str, Any]]:
        conn = await asyncpg.connect(db_url)
        try:
            found = await conn.fetch(
                "SELECT seq, event, data FROM audit_records WHERE run_id = $1 ORDER BY seq", trail
            )
        finally:
            await conn.close()
        return [
            {"seq": r["seq"], "event": r["event"], "data": json.loads(r["data"])} for r in found
        ]

    return rows


@pytest.fixture
def auth() -> dict[str, str]:
    """The operator token's header (an admin)."""
    return {"Authorization": f"Bearer {OPERATOR_TOKEN}"}
