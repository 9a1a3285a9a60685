"""Effects keyed for exactly-once: the outcome of each non-idempotent call, by its key
(`run_id:call_id`), in PostgreSQL, shared by every runner replica.

A replica claims a key before it runs the call (one `INSERT … ON CONFLICT DO NOTHING`:
of two replicas given the same key at once, exactly one wins) and records the answer
before it replies. A repeat of the key then gets, without running anything:

- the recorded result, once there is one;
- a wait, while the claim's holder is alive (it renews a lease on its running claims);
- `in_doubt`, when the holder stopped renewing with no outcome recorded (it died mid-call):
  the effect may or may not have happened, and only an operator may run it again
  (`retry_in_doubt`, which takes the claim over with a new attempt);
- `key_conflict`, when the key comes with another tool or other arguments.

Times are the database's (`now()`), so replicas' clocks never disagree about a lease.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy import and_, delete, func, or_, select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncEngine

from tether_common.messages.tools import IN_DOUBT, ExecuteTool, ToolResult
from tether_tools_runner.tables import effects

log = logging.getLogger(__name__)

KEY_CONFLICT = "key_conflict"
POLL_S = 0.25  # between looks at a claim another replica is running


@dataclass(frozen=True, slots=True)
class Claimed:
    """This replica runs the call, as `attempt` of its key."""

    key: str
    attempt: int


@dataclass(frozen=True, slots=True)
class Recorded:
    result: ToolResult


@dataclass(frozen=True, slots=True)
class Withheld:
    """Not run, and no outcome to give: in doubt, or the key names another call."""

    code: str
    message: str


Claim = Claimed | Recorded | Withheld


@dataclass(frozen=True, slots=True)
class _Seen:
    digest: str
    attempt: int
    live: bool
    result: dict[str, Any] | None


def request_digest(name: str, args: dict[str, Any]) -> str:
    canonical = json.dumps([name, args], sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def _lease(seconds: float) -> Any:
    return func.now() + timedelta(seconds=seconds)


class EffectLedger:
    """Claims, outcomes and leases of keyed calls; `renew` is run every `lease_s / 3`."""

    def __init__(self, engine: AsyncEngine, replica: str, *, lease_s: float) -> None:
        self.engine = engine
        self.replica = replica
        self.lease_s = lease_s
        self._running: dict[str, int] = {}  # key → attempt, the claims this replica renews

    async def claim(self, call: ExecuteTool, key: str, *, wait_s: float) -> Claim:
        """Claim `key` for `call`, or say why not; waits up to `wait_s` for a claim that
        another live replica is running to be recorded."""
        digest = request_digest(call.name, call.args)
        deadline = time.monotonic() + wait_s
        while True:
            attempt = await self._insert(call, key, digest)
            if attempt is not None:
                return self._hold(key, attempt)
            seen = await self._read(key)
            if seen is None:
                continue  # swept between the two statements: claim it afresh
            if seen.digest != digest:
                return Withheld(KEY_CONFLICT, f"the key {key} was used for another call.")
            if seen.result is not None:
                return Recorded(ToolResult.model_validate(seen.result))
            if not seen.live:
                if not call.retry_in_doubt:
                    return in_doubt(key, running=False)
                taken = await self._take_over(key, seen.attempt)
                if taken is not None:
                    return self._hold(key, taken)
                continue  # another replica took it over first: look again
            if time.monotonic() >= deadline:
                return in_doubt(key, running=True)
            await asyncio.sleep(POLL_S)

    def _hold(self, key: str, attempt: int) -> Claimed:
        self._running[key] = attempt
        return Claimed(key, attempt)

    async def _insert(self, call: ExecuteTool, key: str, digest: str) -> int | None:
        statement = (
            insert(effects)
            .values(
                key=key,
                run_id=call.run_id,
                tool=call.name,
                digest=digest,
                attempt=1,
                replica=self.replica,
                lease_until=_lease(self.lease_s),
            )
            .on_conflict_do_nothing(index_elements=[effects.c.key])
            .returning(effects.c.attempt)
        )
        async with self.engine.begin() as conn:
            attempt: int | None = (await conn.execute(statement)).scalar_one_or_none()
        return attempt

    async def _read(self, key: str) -> _Seen | None:
        query = select(
            effects.c.digest,
            effects.c.attempt,
            (effects.c.lease_until > func.now()).label("live"),
            effects.c.result,
        ).where(effects.c.key == key)
        async with self.engine.connect() as conn:
            row = (await conn.execute(query)).one_or_none()
        return None if row is None else _Seen(row.digest, row.attempt, row.live, row.result)

    async def _take_over(self, key: str, attempt: int) -> int | None:
        statement = (
            update(effects)
            .where(
                effects.c.key == key,
                effects.c.attempt == attempt,
                effects.c.result.is_(None),
                effects.c.lease_until <= func.now(),
            )
            .values(
                attempt=attempt + 1,
                replica=self.replica,
                started_at=func.now(),
                lease_until=_lease(self.lease_s),
            )
            .returning(effects.c.attempt)
        )
        async with self.engine.begin() as conn:
            taken: int | None = (await conn.execute(statement)).scalar_one_or_none()
        return taken

    async def record(self, claim: Claimed, result: ToolResult) -> bool:
        """Write the outcome of `claim` (only while it is still this attempt's); False if
        it could not be written (the key then answers `in_doubt` once its lease lapses)."""
        statement = (
            update(effects)
            .where(
                effects.c.key == claim.key,
                effects.c.attempt == claim.attempt,
                effects.c.result.is_(None),
            )
            .values(result=result.model_dump(mode="json"), finished_at=func.now())
        )
        try:
            async with self.engine.begin() as conn:
                done = await conn.execute(statement)
        except Exception:  # the call has run: its answer still goes back to the brain
            log.exception("the outcome of %s could not be recorded", claim.key)
            return False
        if not done.rowcount:
            log.warning("the outcome of %s was not recorded: the claim was taken over", claim.key)
        return bool(done.rowcount)

    async def forget(self, claim: Claimed) -> None:
        """Drop `claim` with no outcome: the call took no effect (a staged change set found
        stale applies nothing), so its key may be claimed again by the next apply."""
        statement = delete(effects).where(
            effects.c.key == claim.key,
            effects.c.attempt == claim.attempt,
            effects.c.result.is_(None),
        )
        async with self.engine.begin() as conn:
            await conn.execute(statement)

    def release(self, claim: Claimed) -> None:
        """Stop renewing `claim` (recorded, or given up: its lease then lapses)."""
        if self._running.get(claim.key) == claim.attempt:
            del self._running[claim.key]

    async def renew(self) -> None:
        """Extend the lease of every claim this replica is running."""
        if not self._running:
            return
        held = [
            and_(effects.c.key == key, effects.c.attempt == attempt)
            for key, attempt in list(self._running.items())
        ]
        statement = (
            update(effects)
            .where(or_(*held), effects.c.replica == self.replica, effects.c.result.is_(None))
            .values(lease_until=_lease(self.lease_s))
        )
        async with self.engine.begin() as conn:
            await conn.execute(statement)

    async def sweep(self, older_than_s: float) -> int:
        """Drop keys older than `older_than_s` (their runs ended long ago); a claim still
        leased is kept whatever its age."""
        statement = delete(effects).where(
            effects.c.started_at < func.now() - timedelta(seconds=older_than_s),
            effects.c.lease_until < func.now(),
        )
        async with self.engine.begin() as conn:
            done = await conn.execute(statement)
        return int(done.rowcount or 0)


def in_doubt(key: str, *, running: bool) -> Withheld:
    if running:
        why = "is still running on another runner and did not finish in time"
    else:
        why = "was started by a runner that stopped before recording its outcome"
    return Withheld(
        IN_DOUBT,
        f"this call (key {key}) {why}, so it may or may not have taken effect; it was not "
        "run again. Check its effect before repeating it.",
    )


__all__ = [
    "KEY_CONFLICT",
    "Claim",
    "Claimed",
    "EffectLedger",
    "Recorded",
    "Withheld",
    "in_doubt",
    "request_digest",
]
