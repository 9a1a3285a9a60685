"""Where staged change sets wait for their approval: PostgreSQL, shared by every runner
replica (the call is staged on one and may be applied on another), keyed by the call's
effect key and the set's digest, with the bytes each created or modified file gets."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import delete, func, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncEngine

from tether_common.messages.staging import ChangeSet
from tether_tools_runner.staging.changes import Staged
from tether_tools_runner.tables import staged, staged_contents


class StagedStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    async def save(self, key: str, run_id: str, request: str, item: Staged) -> None:
        """Keep `item` for `key` (staging the same set again changes nothing)."""
        digest = item.changes.digest
        row = insert(staged).values(
            key=key,
            digest=digest,
            run_id=run_id,
            request=request,
            changes=item.changes.model_dump(mode="json"),
        )
        async with self.engine.begin() as conn:
            done = await conn.execute(row.on_conflict_do_nothing())
            if done.rowcount and item.contents:
                await conn.execute(
                    staged_contents.insert(),
                    [
                        {"key": key, "digest": digest, "path": path, "data": data}
                        for path, data in item.contents.items()
                    ],
                )

    async def load(self, key: str, digest: str, request: str) -> Staged | None:
        """The set staged for exactly this call (same key, same tool and arguments)."""
        async with self.engine.connect() as conn:
            row = (
                await conn.execute(
                    select(staged.c.changes, staged.c.request).where(
                        staged.c.key == key, staged.c.digest == digest
                    )
                )
            ).one_or_none()
            if row is None or row.request != request:
                return None
            files = await conn.execute(
                select(staged_contents.c.path, staged_contents.c.data).where(
                    staged_contents.c.key == key, staged_contents.c.digest == digest
                )
            )
            contents = {f.path: bytes(f.data) for f in files}
        return Staged(ChangeSet.model_validate(row.changes), contents)

    async def sweep(self, older_than_s: float) -> int:
        statement = delete(staged).where(
            staged.c.staged_at < func.now() - timedelta(seconds=older_than_s)
        )
        async with self.engine.begin() as conn:
            done = await conn.execute(statement)
        return int(done.rowcount or 0)


__all__ = ["StagedStore"]
