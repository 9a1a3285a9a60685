"""The approvals service alone as a real process (real NATS and PostgreSQL), a bus and an
HTTP client on its prefix, and helpers that speak its contract."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from dbkit import new_database
from shipped import observe, one_service
from tether_approvals.testing import ApprovalsHarness
from tether_client.server.supervisor import Supervisor

OPERATOR_TOKEN = "test-operator-token"
RULES = [
    {"name": "auto-ok", "tool": "auto_ok*", "answer": "allow_once"},
    {"name": "no-rm", "tool": "*", "danger": ["destructive"], "answer": "deny"},
    {"name": "ask-people", "tool": "auto_*", "answer": "no_opinion"},
]
# Two keys for `two_keys_*` tools (tests/approvals/test_quorum.py); an automated allow
# for `auto_ok_two_keys` must not stand in for them.
QUORUM_RULES = [
    {"name": "two-keys", "tool": "two_keys_*", "quorum": {"needed": 2, "group": "sre"}},
    {"name": "auto-two", "tool": "auto_ok_two_keys", "quorum": {"needed": 2}},
]


@pytest.fixture(scope="session")
async def database_url(pg_server_url: str, database_template: str) -> str:
    """One database for this folder's modules: they share the approvals process below,
    whose tables their tests read."""
    return await new_database(pg_server_url, "approvals", template=database_template)


@pytest.fixture(scope="session")
async def approvals_processes(
    database_url: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Supervisor]:
    """The approvals service alone (one process; tests may add replicas or restart it),
    on a locked bus of its own as `tether up` starts it, with the rules these tests need."""
    env = {
        "TETHER_DB_POOL_SIZE": "10",
        "TETHER_APPROVALS_SWEEP_INTERVAL_S": "0.2",
        "TETHER_APPROVALS_PRESENCE_TTL_S": "3",
        "TETHER_APPROVALS_RULES": json.dumps(RULES),
        "TETHER_APPROVALS_QUORUM_RULES": json.dumps(QUORUM_RULES),
        "TETHER_APPROVALS_APPROVERS": json.dumps(["tether_approvals.testing:deny_forbidden_tools"]),
        "TETHER_APPROVALS_AUDIT_JSONL": str(tmp_path_factory.mktemp("audit") / "audit.jsonl"),
    }
    async with one_service(
        "approvals", database_url, operator_token=OPERATOR_TOKEN, extra_env=env
    ) as supervisor:
        yield supervisor


@pytest.fixture(scope="session")
async def approvals(approvals_processes: Supervisor) -> AsyncIterator[ApprovalsHarness]:
    env = approvals_processes.env
    url = approvals_processes.child("approvals").url
    jsonl = Path(env["TETHER_APPROVALS_AUDIT_JSONL"])
    async with (
        await observe(approvals_processes) as bus,
        httpx.AsyncClient(base_url=url, timeout=15) as http,
    ):
        yield ApprovalsHarness(bus, http, url, OPERATOR_TOKEN, jsonl)
