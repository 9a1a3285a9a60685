"""A throw-away Tether for one benchmark: its own nats-server and PostgreSQL in a temporary
folder, the services as real processes, and plain-asyncpg access to the same database
for reading event timestamps (reading them from the journal costs the services nothing).

Nothing is shared with a running system and nothing is written under `~/.tether`.
"""

from __future__ import annotations

import json
import secrets
import tempfile
from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import asyncpg

from bench.profiles import print_profiles, profile_env, restart_profiles
from tether_client.server.embedded import EmbeddedPostgres
from tether_client.server.supervisor import SERVICES, ServiceSpec, Supervisor
from tether_client.system import LockedBus, start_locked_nats, system_env, system_supervisor
from tether_common.decisions import new_key
from tether_common.testing import until

OPERATOR_TOKEN = "bench-operator-token"
OBSERVER = "bench"  # the bench's own all-rights NATS user (never a shipped one)
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

        async def reached() -> int:
            return int(
                await self.db.fetchval(
                    "SELECT count(*) FROM runs WHERE run_id = ANY($1) AND status = ANY($2)",
                    run_ids,
                    list(statuses),
                )
            )

        try:
            await until(
                reached,
                timeout=timeout,
                what=f"{len(run_ids)} runs reaching {statuses}",
                done=lambda count: count == len(run_ids),
            )
        except AssertionError as exc:  # `until`'s time-out; callers here expect this one
            raise TimeoutError(str(exc)) from None

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


@dataclass
class Servers:
    """A benchmark's NATS (locked as `tether up` locks it) and PostgreSQL. `nats.url` is
    the bench's own all-rights client (the observer's credentials in the URL); the
    services connect as their own users to `bus.url`."""

    base: Path
    bus: LockedBus
    pg: EmbeddedPostgres

    @property
    def nats_url(self) -> str:
        password = self.bus.observers[OBSERVER]
        return self.bus.url.replace("://", f"://{OBSERVER}:{password}@", 1)


def stack_env(base: Path, nats_url: str, pg_url: str, scripts: Path) -> dict[str, str]:
    """`tether up`'s environment (`tether_client.system`), with the bench's own folders."""
    (base / "workspace").mkdir()
    (base / "skills").mkdir()
    env = system_env(
        base / "home",
        nats_url=nats_url,
        database_url=pg_url,
        operator_token=OPERATOR_TOKEN,
        decision_key=new_key(),
        workspace=base / "workspace",
    )
    return env | {
        "TETHER_BRAIN_SKILL_FOLDERS": json.dumps([str(base / "skills")]),
        "TETHER_GATEWAY_SCRIPTS_DIR": str(scripts),
        "TETHER_LOG_LEVEL": "WARNING",
    }


@asynccontextmanager
async def servers(prefix: str) -> AsyncIterator[Servers]:
    """Embedded NATS (locked by the generated configuration) and PostgreSQL in a temporary
    folder, stopped on the way out."""
    with tempfile.TemporaryDirectory(prefix=f"tether-bench-{prefix}-") as tmp:
        base = Path(tmp)
        base.chmod(0o755)
        async with AsyncExitStack() as stack:
            bus = start_locked_nats(base, stack, observers={OBSERVER: secrets.token_urlsafe(24)})
            pg = EmbeddedPostgres(base / "pg").start()
            stack.callback(pg.stop)
            yield Servers(base, bus, pg)


@asynccontextmanager
async def services(
    servers: Servers,
    extra_env: Mapping[str, str] | None = None,
    specs: tuple[ServiceSpec, ...] = SERVICES,
    ready_timeout: float = 180.0,  # a busy machine (or one profiling) starts slowly
) -> AsyncIterator[Stack]:
    """The given services on running servers, as `tether up` starts them, ready; stopped
    on the way out."""
    base, pg = servers.base, servers.pg
    scripts = base / "scripts"
    scripts.mkdir()
    env = stack_env(base, servers.bus.url, pg.url, scripts)
    env |= dict(extra_env or {}) | profile_env(base)
    supervisor = system_supervisor(
        env, servers.bus.passwords, restart=False, log_dir=base / "logs", specs=specs
    )
    db = await asyncpg.create_pool(pg.url, min_size=1, max_size=4)
    try:
        await supervisor.start()
        await supervisor.wait_ready(timeout=ready_timeout)
        restart_profiles([c.proc.pid for c in supervisor.children if c.proc is not None])
        nats = servers.bus.server
        pids = {"nats-server": nats.proc.pid if nats.proc else 0}
        pids["postgres"] = pg.postmaster_pid() or 0
        yield Stack(servers.nats_url, pg.url, base, scripts, supervisor, db, pids)
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
