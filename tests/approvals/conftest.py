"""The approvals service alone as a real process (real NATS and PostgreSQL), a bus and an
HTTP client on its prefix, and helpers that speak its contract."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from tether_approvals.testing import ApprovalsHarness
from tether_common.bus import Bus
from tether_common.subjects import Subjects
from tether_common.supervisor import SERVICES, Supervisor

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
async def approvals_processes(
    nats_url: str, database_url: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Supervisor]:
    """The approvals service alone (one process; tests may add replicas or restart it)."""
    logs = tmp_path_factory.mktemp("approvals-logs")
    env = {
        "TETHER_NATS_URL": nats_url,
        "TETHER_DATABASE_URL": database_url,
        "TETHER_SUBJECT_PREFIX": f"a{uuid.uuid4().hex[:10]}",
        "TETHER_OPERATOR_TOKEN": OPERATOR_TOKEN,
        "TETHER_DB_POOL_SIZE": "10",
        "TETHER_APPROVALS_SWEEP_INTERVAL_S": "0.2",
        "TETHER_APPROVALS_PRESENCE_TTL_S": "3",
        "TETHER_APPROVALS_RULES": json.dumps(RULES),
        "TETHER_APPROVALS_QUORUM_RULES": json.dumps(QUORUM_RULES),
        "TETHER_APPROVALS_APPROVERS": json.dumps(["tether_approvals.testing:deny_forbidden_tools"]),
        "TETHER_APPROVALS_AUDIT_JSONL": str(logs / "audit.jsonl"),
    }
    spec = next(s for s in SERVICES if s.name == "approvals")
    supervisor = Supervisor(env, specs=(spec,), restart=False, log_dir=logs)
    await supervisor.start()
    try:
        await supervisor.wait_ready(timeout=60)
        yield supervisor
    except BaseException:
        for log_file in sorted(logs.glob("*.log")):
            print(f"--- {log_file.name}\n{log_file.read_text()[-4000:]}")  # noqa: T201
        raise
    finally:
        await supervisor.stop()


@pytest.fixture(scope="session")
async def approvals(
    approvals_processes: Supervisor, nats_url: str
) -> AsyncIterator[ApprovalsHarness]:
    env = approvals_processes.env
    subjects = Subjects(env["TETHER_SUBJECT_PREFIX"])
    url = approvals_processes.child("approvals").url
    jsonl = Path(env["TETHER_APPROVALS_AUDIT_JSONL"])
    async with (
        await Bus.connect(nats_url, service="test", subjects=subjects) as bus,
        httpx.AsyncClient(base_url=url, timeout=15) as http,
    ):
        yield ApprovalsHarness(bus, http, url, OPERATOR_TOKEN, jsonl)
