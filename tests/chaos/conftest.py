"""Each chaos module's own world: its own nats-server and PostgreSQL (restarting them
disturbs no other test) and its own five services under a supervisor that restarts the
ones that die, plus the checks every chaos test makes on a run once it has ended.

The servers live in `tempfile.mkdtemp()` folders, not under pytest's basetemp: pytest
keeps that folder private (0700) and PostgreSQL runs as another user under root. Set
`TETHER_CHAOS_KEEP=1` to keep them (service logs in `logs/`) after the module ends.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from tether_client import TetherClient
from tether_client.server.embedded import EmbeddedPostgres, NatsServer
from tether_client.server.supervisor import Supervisor
from tether_common.errors import TetherError
from tether_common.messages.runs import TERMINAL_STATUSES, RunEvent, RunView
from tether_common.settings import async_database_url
from tether_common.testing import until

StartRun = Callable[..., Awaitable[str]]
Settle = Callable[[str], Awaitable[RunView]]
History = Callable[[str], Awaitable[list[RunEvent]]]
WaitFor = Callable[[str, str], Awaitable[RunEvent]]

# Silence the brain allows on a model stream or a tool call before it gives up: a
# service SIGKILLed mid-answer never replies, and the defaults (300 s, 130 s) would
# outlast the test.
MODEL_TIMEOUT_S = 8.0
TOOL_TIMEOUT_S = 8.0
# A short lease, so a run whose replica lost it is taken over quickly.
LEASE_S = 2.0
SETTLE_S = 30.0


@pytest.fixture(scope="module")
def chaos_dir() -> Iterator[Path]:
    base = Path(tempfile.mkdtemp(prefix="tether-chaos-"))
    try:
        yield base
    finally:
        if not os.environ.get("TETHER_CHAOS_KEEP"):
            shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def chaos_nats(chaos_dir: Path) -> Iterator[NatsServer]:
    """Stop and `start()` it again: same port, same JetStream store."""
    server = NatsServer(chaos_dir / "nats").start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def chaos_postgres(chaos_dir: Path) -> Iterator[EmbeddedPostgres]:
    """Stop (or kill) and `start()` it again: same port, same data folder."""
    server = EmbeddedPostgres(chaos_dir / "pg").start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def chaos_scripts(chaos_dir: Path) -> Path:
    scripts = chaos_dir / "scripts"
    scripts.mkdir()
    return scripts


@pytest.fixture(scope="module")
def chaos_extra_env() -> dict[str, str]:
    """Extra environment for this module's services (override in a test module)."""
    return {}


@pytest.fixture(scope="module")
def chaos_logs(chaos_dir: Path) -> Path:
    """The supervisor's log folder: one `<service>.log` per process, restarts appended."""
    return chaos_dir / "logs"


@pytest.fixture(scope="module")
async def chaos_stack(
    chaos_nats: NatsServer,
    chaos_postgres: EmbeddedPostgres,
    chaos_scripts: Path,
    chaos_extra_env: dict[str, str],
    chaos_logs: Path,
) -> AsyncIterator[Supervisor]:
    """The five services as real processes; one that dies is restarted."""
    logs = chaos_logs
    env = {
        "TETHER_NATS_URL": chaos_nats.url,
        "TETHER_DATABASE_URL": async_database_url(chaos_postgres.url),
        "TETHER_SUBJECT_PREFIX": f"c{uuid.uuid4().hex[:10]}",
        # The token the tests' clients send (TETHER_TOKEN, set by tests/conftest.py).
        "TETHER_OPERATOR_TOKEN": os.environ["TETHER_TOKEN"],
        "TETHER_LOG_LEVEL": "INFO",
        "TETHER_GATEWAY_SCRIPTS_DIR": str(chaos_scripts),
        "TETHER_DB_POOL_SIZE": "10",
        "TETHER_BRAIN_MODEL_TIMEOUT_S": str(MODEL_TIMEOUT_S),
        "TETHER_BRAIN_TOOL_TIMEOUT_S": str(TOOL_TIMEOUT_S),
        "TETHER_BRAIN_LEASE_S": str(LEASE_S),
        "TETHER_RUNNER_WORKSPACE": str(chaos_logs.parent / "workspace"),
    } | chaos_extra_env
    supervisor = Supervisor(env, restart=True, log_dir=logs)
    await supervisor.start()
    failed = False
    try:
        await supervisor.wait_ready(timeout=90)
        yield supervisor
    except BaseException:
        failed = True
        raise
    finally:
        await supervisor.stop()
        if failed:
            show_logs(logs)


def show_logs(logs: Path, lines: int = 40) -> None:
    """Each service's last log lines, one short line per JSON record (message and the
    last line of any traceback), for a failed chaos test's report."""
    for log_file in sorted(logs.glob("*.log")):
        print(f"--- {log_file.name}")  # noqa: T201
        for raw in log_file.read_text(errors="replace").splitlines()[-lines:]:
            print(condensed(raw))  # noqa: T201


def condensed(raw: str) -> str:
    try:
        entry = json.loads(raw)
    except ValueError:
        return raw[:300]
    if not isinstance(entry, dict):
        return raw[:300]
    text = f"{str(entry.get('ts', ''))[11:23]} {entry.get('level')} {entry.get('msg', '')}"[:300]
    if exc := str(entry.get("exc", "")).strip():
        text += f" | {exc.splitlines()[-1][:200]}"
    return text


@pytest.fixture
def start_run(chaos_stack: Supervisor) -> StartRun:
    """`start_run(model, prompt=..., **options)`: a scripted run started; its id."""

    async def start(model: str, prompt: str = "what time is it?", **options: Any) -> str:
        async with TetherClient(chaos_stack.child("brain").url) as client:
            accepted = await client.start_run(prompt, provider="scripted", model=model, **options)
        return accepted.run_id

    return start


@pytest.fixture
def wait_for(chaos_stack: Supervisor) -> WaitFor:
    """`wait_for(run_id, kind)`: the run's first event of that kind, as it happens."""

    async def wait(run_id: str, kind: str) -> RunEvent:
        async with TetherClient(chaos_stack.child("brain").url) as client:
            async with asyncio.timeout(30):
                async for event in client.events(run_id):
                    if event.kind == kind:
                        return event
        raise AssertionError(f"run {run_id} ended without a {kind} event")

    return wait


@pytest.fixture
def settle(chaos_stack: Supervisor, chaos_logs: Path) -> Settle:
    """`settle(run_id)`: the run once it is in a final state. Polled, not streamed: the
    servers under it may be down or restarting, and each failed read is just retried."""

    async def wait(run_id: str) -> RunView:
        async with TetherClient(chaos_stack.child("brain").url, timeout=5) as client:
            try:
                return await until(
                    lambda: client.get_run(run_id),
                    done=lambda run: run.status in TERMINAL_STATUSES,
                    timeout=SETTLE_S,
                    every=0.25,
                    what=f"run {run_id} to end",
                    ignoring=(httpx.HTTPError, TetherError),
                )
            except AssertionError:
                show_logs(chaos_logs)
                raise

    return wait


@pytest.fixture
def history(chaos_stack: Supervisor, chaos_postgres: EmbeddedPostgres) -> History:
    """`history(run_id)`: a finished run's events from the API, checked against its
    journal: numbered 1..n with no gap or repeat, one `run.end` last, and the same
    events as the journal rows in PostgreSQL."""

    async def read(run_id: str) -> list[RunEvent]:
        async with TetherClient(chaos_stack.child("brain").url) as client:
            async with asyncio.timeout(30):
                events = [e async for e in client.events(run_id)]
        seqs = [e.seq for e in events]
        assert seqs == list(range(1, len(seqs) + 1)), f"event seqs not contiguous: {seqs}"
        kinds = [e.kind for e in events]
        assert kinds[0] == "run.start"
        assert kinds[-1] == "run.end"
        assert kinds.count("run.end") == 1
        journal = await journal_events(chaos_postgres.url, run_id)
        assert [(j["seq"], j["kind"]) for j in journal] == [(e.seq, e.kind) for e in events]
        return events

    return read


async def journal_events(url: str, run_id: str) -> list[dict[str, Any]]:
    conn = await asyncpg.connect(url)
    try:
        rows = await conn.fetch(
            "SELECT data FROM run_journal WHERE run_id = $1 AND kind = 'event' ORDER BY seq",
            run_id,
        )
    finally:
        await conn.close()
    return [json.loads(r["data"]) if isinstance(r["data"], str) else r["data"] for r in rows]
