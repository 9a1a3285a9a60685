"""Read-before-write revisions in PostgreSQL (`file_revisions`), shared by every replica:
a run's read on one replica counts for its edit on another."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import delete, func, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncEngine

from tether_tools_runner.tables import revisions


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


__all__ = ["StoredRevisions"]
