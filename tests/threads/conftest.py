"""The threads tests' stack: one brain with a short lease (a killed brain's turn is taken
over soon after it is back), the runner's `per_tree` workspace in a folder of its own (a
thread's turns share one folder), and an HTTP client of the brain (helpers: `tests/threadkit.py`)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from tether_client.server.supervisor import Supervisor


@pytest.fixture(scope="module")
def workspace() -> Iterator[Path]:
    # Not under pytest's basetemp (0700): the runner's sandbox user must pass through.
    folder = Path(tempfile.mkdtemp(prefix="tether-threads-ws-"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def stack_extra_env(workspace: Path) -> dict[str, str]:
    return {
        "TETHER_BRAIN_LEASE_S": "1.0",
        "TETHER_RUNNER_WORKSPACE": str(workspace),
        "TETHER_BRAIN_WORKSPACE": str(workspace),
        "TETHER_RUNNER_WORKSPACE_LAYOUT": "per_tree",
    }


@pytest.fixture
async def http(stack: Supervisor) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=stack.child("brain").url, timeout=60) as client:
        yield client
