"""Which revision of which file each run has read: the read-before-write check of `file_edit`.

`StoredRevisions` keeps them in PostgreSQL, so a run whose read landed on one replica can
edit through another; `RevisionBook` is the in-memory one (a single runner without a
database, and tests), bounded on both axes (runs, then paths per run), least recently
used first out."""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from datetime import timedelta
from typing import Protocol

from sqlalchemy import delete, func, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncEngine

from tether_tools_runner.tables import revisions


def revision_of(content: bytes) -> str:
    return "sha256:" + hashlib.sha256(content).hexdigest()


class Revisions(Protocol):
    async def record(self, run_id: str, path: str, revision: str) -> None: ...

    async def seen(self, run_id: str, path: str) -> str | None: ...


class RevisionBook:
    def __init__(self, *, max_runs: int = 1000, max_paths: int = 500) -> None:
        self._runs: OrderedDict[str, OrderedDict[str, str]] = OrderedDict()
        self.max_runs = max_runs
        self.max_paths = max_paths

    async def record(self, run_id: str, path: str, revision: str) -> None:
        paths = self._runs.pop(run_id, None) or OrderedDict()
        paths.pop(path, None)
        paths[path] = revision
        while len(paths) > self.max_paths:
            paths.popitem(last=False)
        self._runs[run_id] = paths
        while len(self._runs) > self.max_runs:
            self._runs.popitem(last=False)

    async def seen(self, run_id: str, path: str) -> str | None:
        paths = self._runs.get(run_id)
        if paths is None:
            return None
        self._runs.move_to_end(run_id)
        return paths.get(path)


class StoredRevisions:
    """The revisions in `file_revisions`, one row per (run, path), shared by replicas."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    async def record(self, run_id: str, path: str, revision: str) -> None:
        row = {"run_id": run_id, "path": path, "revision": revision}
        statement = insert(revisions).values(row)
        statement = statement.on_conflict_do_update(
            index_elements=[revisions.c.run_id, revisions.c.path],
            set_={"revision": statement.excluded.revision, "seen_at": func.now()},
        )
        async with self.engine.begin() as conn:
            await conn.execute(statement)

    async def seen(self, run_id: str, path: str) -> str | None:
        query = select(revisions.c.revision).where(
            revisions.c.run_id == run_id, revisions.c.path == path
        )
        async with self.engine.connect() as conn:
            found: str | None = (await conn.execute(query)).scalar_one_or_none()
        return found

    async def sweep(self, older_than_s: float) -> int:
        """Forget reads older than `older_than_s` (their runs ended long ago)."""
        cutoff = func.now() - timedelta(seconds=older_than_s)
        async with self.engine.begin() as conn:
            done = await conn.execute(delete(revisions).where(revisions.c.seen_at < cutoff))
        return int(done.rowcount or 0)


__all__ = ["RevisionBook", "Revisions", "StoredRevisions", "revision_of"]
