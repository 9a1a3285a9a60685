"""One stack of the five services for the whole package (quorum hook, policy replay,
suggestions): starting one costs far more than these tests, so the modules share it.
Its brain knows the agents below; `desk` (tests/replay_desk.py) acts through it.

A package-scoped stack outlives the package here (no `__init__.py`: it lasts the session),
so it has a database of its own: on the session's shared one its brain adopted other
modules' runs whose lease lapsed (a killed brain's thread turn, run by this stack's
gateway, failed with "no script named …"), and their services swept its approvals."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from dbkit import new_database
from replay_desk import OPERATOR_TOKEN, Desk
from shipped import shipped_stack
from tether_client.server.supervisor import Supervisor

# `guarded`: file writes are granted, but need two people of `ops` (never the requester).
# `day`: the agent whose recorded day the replay and suggestion tests read.
AGENTS: dict[str, Any] = {
    "guarded": {
        "grants": ["file_write"],
        "quorum": {"category:write_files": {"needed": 2, "group": "ops"}},
    },
    "day": {"grants": ["file_write?path=notes.txt", "web_fetch"]},
    "other": {"grants": [], "tenant": "elsewhere"},
}
GUARDRAILS = {"convert_time": "confirm"}


@pytest.fixture(scope="package")
def scripts_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("scripts")


@pytest.fixture(scope="package")
async def stack(pg_server_url: str, scripts_dir: Path) -> AsyncIterator[Supervisor]:
    """As `tether up` starts it (a locked bus of its own), with the agents above."""
    env = {
        "TETHER_GATEWAY_SCRIPTS_DIR": str(scripts_dir),
        "TETHER_DB_POOL_SIZE": "10",
        "TETHER_BRAIN_AGENTS": json.dumps(AGENTS),
        "TETHER_BRAIN_GUARDRAILS": json.dumps(GUARDRAILS),
    }
    database = await new_database(pg_server_url, "replay")
    async with shipped_stack(
        None, database, operator_token=OPERATOR_TOKEN, extra_env=env, ready_s=120
    ) as supervisor:
        yield supervisor


@pytest.fixture(scope="package")
def desk(stack: Supervisor, scripts_dir: Path) -> Desk:
    return Desk(stack, scripts_dir)
