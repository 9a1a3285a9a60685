"""Staging fixtures: the runner's staging and apply driven in-process (no runner
process): the real file workers (as the sandbox user when the tests run as root), real
bubblewrap for shell, the real database (migrated with the runner's own migrations) and
real NATS for the `Calls` that key the apply."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

import tether_tools_runner
from staged_runner import Runner
from tether_common.bus import Bus
from tether_common.db import migrate
from tether_tools_runner.app import make_stager
from tether_tools_runner.calls import Calls
from tether_tools_runner.effects import EffectLedger
from tether_tools_runner.executor import Executor
from tether_tools_runner.sandbox import (
    Attestation,
    attest,
    hand_over,
    release_cgroups,
    sandbox_user,
)
from tether_tools_runner.settings import RunnerSettings
from tether_tools_runner.staging.store import StagedStore
from tether_tools_runner.tool import Registry
from tether_tools_runner.tools import Builtins

MIGRATIONS = Path(tether_tools_runner.__file__).parent / "migrations"


@pytest.fixture(scope="session")
def attestation() -> Iterator[Attestation]:
    found = attest()
    if found.bwrap is None:
        pytest.fail(
            f"staging a shell call needs bubblewrap (apt package bubblewrap): {found.problems}"
        )
    try:
        yield found
    finally:
        release_cgroups()


@pytest.fixture(scope="module")
async def migrated(engine: AsyncEngine) -> AsyncEngine:
    await migrate(engine, MIGRATIONS, "alembic_tools_runner")
    return engine


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    hand_over(root, sandbox_user())
    return root


@pytest.fixture
async def runner(
    workspace: Path, attestation: Attestation, migrated: AsyncEngine, bus: Bus, tmp_path: Path
) -> AsyncIterator[Runner]:
    settings = RunnerSettings(workspace=workspace, staging_dir=tmp_path / "staging")
    builtins = Builtins(settings, attestation)
    executor = Executor(
        Registry(builtins.tools()),
        default_timeout_s=settings.default_timeout_s,
        attestation=attestation,
        min_sandbox=settings.min_sandbox,
    )
    stager = make_stager(settings, builtins, executor, StagedStore(migrated), home=tmp_path)
    ledger = EffectLedger(migrated, f"test-{uuid.uuid4().hex[:6]}", lease_s=10.0)
    calls = Calls(
        bus, executor, sandbox_level=attestation.level, thresholds={}, ledger=ledger, stager=stager
    )
    try:
        yield Runner(stager, calls, executor, f"run-{uuid.uuid4().hex[:10]}")
    finally:
        builtins.close()
