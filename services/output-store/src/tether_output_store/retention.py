"""The collector: expired outputs lose their content (the row stays as a tombstone so the
ref answers `expired`), abandoned uploads are dropped, then chunks nobody uses.

It runs periodically in every replica, but each pass takes a PostgreSQL advisory lock
first, so replicas take turns instead of fighting over the same rows.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

log = logging.getLogger(__name__)

LOCK_KEY = int.from_bytes(hashlib.sha256(b"tether-output-store-gc").digest()[:4], "big")

# Tombstones carry no content; they are kept this long after expiry, then forgotten.
PURGE_EXPIRED = text(
    "UPDATE outputs SET chunk_digests = '{}', chunk_lines = '{}', purged_at = now() "
    "WHERE expires_at <= now() AND purged_at IS NULL"
)
FORGET_TOMBSTONES = text(
    "DELETE FROM outputs WHERE purged_at < now() - :keep_s * interval '1 second'"
)
DROP_UPLOADS = text("DELETE FROM output_uploads WHERE expires_at <= now()")
# `touched_at` sits on the deleted row itself, so a writer that reuses a chunk while this
# runs bumps it under the row lock and PostgreSQL re-checks it: the chunk survives.
DROP_CHUNKS = text(
    "DELETE FROM output_chunks c WHERE c.touched_at < now() - :grace_s * interval '1 second' "
    "AND NOT EXISTS (SELECT 1 FROM outputs o WHERE o.chunk_digests @> ARRAY[c.digest]::varchar[]) "
    "AND NOT EXISTS (SELECT 1 FROM output_upload_parts p WHERE p.digest = c.digest)"
)


@dataclass(frozen=True, slots=True)
class Collected:
    purged: int
    uploads: int
    chunks: int
    skipped: bool = False


class Collector:
    def __init__(
        self, engine: AsyncEngine, *, grace: timedelta, keep_tombstones: timedelta
    ) -> None:
        self.engine = engine
        self.grace = grace
        self.keep_tombstones = keep_tombstones

    async def collect(self) -> Collected:
        """One pass; `skipped` when another replica holds the lock."""
        async with self.engine.begin() as conn:
            got = await conn.scalar(text("SELECT pg_try_advisory_xact_lock(:k)"), {"k": LOCK_KEY})
            if not got:
                return Collected(0, 0, 0, skipped=True)
            purged = (await conn.execute(PURGE_EXPIRED)).rowcount
            await conn.execute(FORGET_TOMBSTONES, {"keep_s": self.keep_tombstones.total_seconds()})
            dropped = (await conn.execute(DROP_UPLOADS)).rowcount
        # Chunks in their own transaction: the purge above must be visible to the check.
        async with self.engine.begin() as conn:
            if not await conn.scalar(text("SELECT pg_try_advisory_xact_lock(:k)"), {"k": LOCK_KEY}):
                return Collected(purged, dropped, 0, skipped=True)
            freed = (
                await conn.execute(DROP_CHUNKS, {"grace_s": self.grace.total_seconds()})
            ).rowcount
        return Collected(purged, dropped, freed)

    async def run_forever(self, interval_s: float) -> None:
        """Collect every `interval_s` until cancelled; a failed pass is logged, not fatal."""
        while True:
            try:
                done = await self.collect()
                if done.purged or done.uploads or done.chunks:
                    log.info(
                        "collected %d outputs, %d uploads, %d chunks",
                        done.purged,
                        done.uploads,
                        done.chunks,
                    )
            except Exception:
                log.exception("output collection failed; retrying next interval")
            await asyncio.sleep(interval_s)
