"""The collector: expired outputs lose their content (the row stays as a tombstone so the
ref answers `expired`), abandoned uploads are dropped, then chunks nobody uses, with their
objects when their bytes are in the JetStream object store; now and then, objects whose
writer died before its commit are found and dropped too.

It runs periodically in every replica, but each pass takes a PostgreSQL advisory lock
first, so replicas take turns instead of fighting over the same rows.
"""

from __future__ import annotations

import hashlib
import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from tether_common.background import FailureLog, every
from tether_common.errors import ErrorCode, NotFoundError, StoreError
from tether_output_store.objects import BlobBucket

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
# `touched_at` sits on the locked row itself, so a writer that reuses a chunk while this
# runs bumps it under the row lock and PostgreSQL re-checks it: the chunk survives. A row
# a writer holds right now is skipped, not waited for. The lock lasts until the rows are
# deleted, so their objects can be deleted first: a crash in between leaves rows whose
# objects are gone, which writers notice (they look for the object under the lock).
DOOMED_CHUNKS = text(
    "SELECT c.digest, c.data IS NULL AS external FROM output_chunks c "
    "WHERE c.touched_at < now() - :grace_s * interval '1 second' "
    "AND NOT EXISTS (SELECT 1 FROM outputs o WHERE o.chunk_digests @> ARRAY[c.digest]::varchar[]) "
    "AND NOT EXISTS (SELECT 1 FROM output_upload_parts p WHERE p.digest = c.digest) "
    "LIMIT :batch FOR UPDATE OF c SKIP LOCKED"
)
DROP_CHUNKS = text("DELETE FROM output_chunks WHERE digest = ANY(CAST(:digests AS varchar[]))")
# An object no row names (its writer died before committing) becomes an old row with no
# data, which the next drop removes with its object. A writer inserting that digest now
# holds its row, so this insert waits for it and then does nothing.
ADOPT_OBJECTS = text(
    "INSERT INTO output_chunks (digest, size, data, touched_at) "
    "SELECT d, s, NULL, 'epoch' FROM unnest(CAST(:digests AS varchar[]), "
    "CAST(:sizes AS integer[])) AS t(d, s) ON CONFLICT (digest) DO NOTHING"
)
# Chunks dropped per transaction: bounded lock sets and object deletes per commit.
DROP_BATCH = 500


async def _lock(conn: AsyncConnection, wait: bool) -> bool:
    """The collector's lock for this transaction: taken at once, or waited for."""
    if wait:
        await conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": LOCK_KEY})
        return True
    return bool(await conn.scalar(text("SELECT pg_try_advisory_xact_lock(:k)"), {"k": LOCK_KEY}))


@dataclass(frozen=True, slots=True)
class Collected:
    purged: int
    uploads: int
    chunks: int
    skipped: bool = False


class Collector:
    def __init__(
        self,
        engine: AsyncEngine,
        *,
        grace: timedelta,
        keep_tombstones: timedelta,
        objects: BlobBucket | None = None,
    ) -> None:
        self.engine = engine
        self.grace = grace
        self.keep_tombstones = keep_tombstones
        self.objects = objects

    async def collect(self, *, wait: bool = False) -> Collected:
        """One pass; `skipped` when another replica holds the lock, unless `wait`, which
        waits for that replica's pass to end instead (an operator's "collect now")."""
        async with self.engine.begin() as conn:
            if not await _lock(conn, wait):
                return Collected(0, 0, 0, skipped=True)
            purged = (await conn.execute(PURGE_EXPIRED)).rowcount
            await conn.execute(FORGET_TOMBSTONES, {"keep_s": self.keep_tombstones.total_seconds()})
            dropped = (await conn.execute(DROP_UPLOADS)).rowcount
        # Chunks in their own transactions: the purge above must be visible to the check.
        freed = 0
        while True:
            batch = await self._drop_chunks(wait)
            if batch is None:
                return Collected(purged, dropped, freed, skipped=True)
            freed += batch
            if batch < DROP_BATCH:
                return Collected(purged, dropped, freed)

    async def _drop_chunks(self, wait: bool) -> int | None:
        """One batch of unused chunks, objects first; None when another replica collects."""
        async with self.engine.begin() as conn:
            if not await _lock(conn, wait):
                return None
            rows = (
                await conn.execute(
                    DOOMED_CHUNKS, {"grace_s": self.grace.total_seconds(), "batch": DROP_BATCH}
                )
            ).all()
            outside = [r.digest for r in rows if r.external]
            if outside:
                if self.objects is None:
                    raise StoreError(
                        f"{len(outside)} unused chunks are in the JetStream object store, "
                        "which this collector has not been given",
                        code=ErrorCode.STORE_UNAVAILABLE,
                    )
                await self.objects.delete(outside)
            await conn.execute(DROP_CHUNKS, {"digests": [r.digest for r in rows]})
        return len(rows)

    async def adopt_orphans(self) -> int:
        """Give every object no chunk row names (older than the grace) an old, empty row,
        so the next collection deletes it; then purge chunk messages no object names.
        Returns how many objects were adopted."""
        if self.objects is None:
            return 0
        try:
            blobs = await self.objects.list()
        except NotFoundError:  # no bucket: nothing was ever stored there
            return 0
        cutoff = datetime.now(UTC) - self.grace
        old = [b for b in blobs if b.written_at is None or b.written_at <= cutoff]
        adopted = 0
        async with self.engine.begin() as conn:
            for start in range(0, len(old), DROP_BATCH):
                part = old[start : start + DROP_BATCH]
                params = {"digests": [b.name for b in part], "sizes": [b.size for b in part]}
                adopted += (await conn.execute(ADOPT_OBJECTS, params)).rowcount
        await self.objects.sweep_unnamed(blobs)
        return adopted

    async def run_forever(self, interval_s: float, *, orphans_every_s: float) -> None:
        """Collect every `interval_s` until cancelled, looking for orphaned objects every
        `orphans_every_s`; a failed pass is logged, not fatal."""
        orphans_due = 0.0

        async def one_pass() -> None:
            nonlocal orphans_due
            if time.monotonic() >= orphans_due:
                adopted = await self.adopt_orphans()
                orphans_due = time.monotonic() + orphans_every_s
                if adopted:
                    log.info("adopted %d objects no chunk row named", adopted)
            done = await self.collect()
            if done.purged or done.uploads or done.chunks:
                log.info(
                    "collected %d outputs, %d uploads, %d chunks",
                    done.purged,
                    done.uploads,
                    done.chunks,
                )

        await every(interval_s, one_pass, FailureLog(log, "output collection"))
