"""A throw-away Tether for one benchmark: its own nats-server and PostgreSQL in a temporary
folder, the services as real processes, and plain-asyncpg access to the same database
for reading event timestamps (reading them from the journal costs the services nothing).

Nothing is shared with a running system and nothing is written under `~/.tether`.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import asyncpg

from bench.profiles import print_profiles, profile_env, restart_profiles
from tether_common.decisions import new_key
from tether_common.embedded import EmbeddedPostgres, NatsServer
from tether_common.supervisor import SERVICES, ServiceSpec, Supervisor

OPERATOR_TOKEN = "bench-operator-token"
TERMINAL = ("completed", "failed", "stopped")


@dataclass
class Stack:
    nats_url: str
    pg_url: str
    base: Path
    scripts: Path
    supervisor: Supervisor
    db: asyncpg.Pool
    server_pids: dict[str, int]

    @property
    def api_url(self) -> str:
        return self.supervisor.child("brain").url

    def brain_urls(self) -> list[str]:
        return [c.url for c in self.supervisor.children if c.spec.name == "brain"]

    async def wait_status(
        self, run_ids: list[str], statuses: tuple[str, ...] = TERMINAL, timeout: float = 300.0
    ) -> None:
        """Poll the runs table until every run is in one of `statuses`."""
        deadline = time.monotonic() + timeout
        while True:
            done = await self.db.fetchval(
                "SELECT count(*) FROM runs WHERE run_id = ANY($1) AND status = ANY($2)",
                run_ids,
                list(statuses),
            )
            if done == len(run_ids):
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"{done}/{len(run_ids)} runs reached {statuses}")
            await asyncio.sleep(0.05)

    async def event_times(self, run_ids: list[str], kind: str) -> dict[str, list[datetime]]:
        """Timestamps of one event kind per run, in order, from the journal."""
        rows = await self.db.fetch(
            "SELECT run_id, data->>'ts' AS ts FROM run_journal WHERE run_id = ANY($1) "
            "AND kind = 'event' AND data->>'kind' = $2 ORDER BY run_id, seq",
            run_ids,
            kind,
        )
        found: dict[str, list[datetime]] = {r: [] for r in run_ids}
        for row in rows:
            found[row["run_id"]].append(datetime.fromisoformat(row["ts"]))
        return found

    async def event_data(self, run_ids: list[str], kind: str) -> dict[str, dict[str, Any]]:
        """The first event of one kind per run: its data with its `ts`."""
        rows = await self.db.fetch(
            "SELECT DISTINCT ON (run_id) run_id, data FROM run_journal WHERE run_id = ANY($1) "
            "AND kind = 'event' AND data->>'kind' = $2 ORDER BY run_id, seq",
            run_ids,
            kind,
        )
        return {r["run_id"]: json.loads(r["data"]) for r in rows}


def stack_env(base: Path, nats_url: str, pg_url: str, scripts: Path) -> dict[str, str]:
    (base / "workspace").mkdir()
    (base / "skills").mkdir()
    return {
        "TETHER_NATS_URL": nats_url,
        "TETHER_DATABASE_URL": pg_url,
        "TETHER_HOME": str(base / "home"),
        "TETHER_RUNNER_WORKSPACE": str(base / "workspace"),
        "TETHER_BRAIN_SKILL_FOLDERS": json.dumps([str(base / "skills")]),
        "TETHER_GATEWAY_SCRIPTS_DIR": str(scripts),
        "TETHER_OPERATOR_TOKEN": OPERATOR_TOKEN,
        "TETHER_DECISION_KEY": new_key(),
        "TETHER_LOG_LEVEL": "WARNING",
    }


@asynccontextmanager
async def servers(prefix: str) -> AsyncIterator[tuple[Path, NatsServer, EmbeddedPostgres]]:
    """Embedded NATS and PostgreSQL in a temporary folder, stopped on the way out."""
    with tempfile.TemporaryDirectory(prefix=f"tether-bench-{prefix}-") as tmp:
        base = Path(tmp)
        base.chmod(0o755)
        nats = NatsServer(base / "nats").start()
        pg = EmbeddedPostgres(base / "pg").start()
        try:
            yield base, nats, pg
        finally:
            pg.stop()
            nats.stop()


@asynccontextmanager
async def services(
    servers: tuple[Path, NatsServer, EmbeddedPostgres],
    extra_env: Mapping[str, str] | None = None,
    specs: tuple[ServiceSpec, ...] = SERVICES,
    ready_timeout: float = 180.0,  # a busy machine (or one profiling) starts slowly
) -> AsyncIterator[Stack]:
    """The given services on running servers, ready; stopped on the way out."""
    base, nats, pg = servers
    scripts = base / "scripts"
    scripts.mkdir()
    env = stack_env(base, nats.url, pg.url, scripts) | dict(extra_env or {}) | profile_env(base)
    supervisor = Supervisor(env, specs=specs, restart=False, log_dir=base / "logs")
    db = await asyncpg.create_pool(pg.url, min_size=1, max_size=4)
    try:
        await supervisor.start()
        await supervisor.wait_ready(timeout=ready_timeout)
        restart_profiles([c.proc.pid for c in supervisor.children if c.proc is not None])
        pids = {"nats-server": nats.proc.pid if nats.proc else 0}
        pids["postgres"] = pg.postmaster_pid() or 0
        yield Stack(nats.url, pg.url, base, scripts, supervisor, db, pids)
    finally:
        await db.close()
        await supervisor.stop()
        print_profiles(base)  # written by the services as they stopped


@asynccontextmanager
async def stack(
    name: str,
    extra_env: Mapping[str, str] | None = None,
    specs: tuple[ServiceSpec, ...] = SERVICES,
) -> AsyncIterator[Stack]:
    """Servers plus the given services, ready; everything stopped on the way out."""
    async with servers(name) as started, services(started, extra_env, specs) as ready:
        yield ready
