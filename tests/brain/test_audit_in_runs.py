"""Every gate decision and tool call of a run lands in its hash-chained audit trail, in the
step's own commit, without argument values; the trail verifies against the run's head."""

from __future__ import annotations

import asyncpg
import pytest

from tether_brain.persistence import trail
from tether_common.db import make_engine
from tether_common.testing import RunScript, call, say

pytestmark = pytest.mark.e2e


async def test_a_run_leaves_a_verifiable_trail(run_script: RunScript, database_url: str) -> None:
    run, _ = await run_script(
        [[call("current_time", timezone="Asia/Tokyo"), call("teleport")], say("done")]
    )
    assert run.status == "completed"
    conn = await asyncpg.connect(database_url.replace("+asyncpg", ""))
    try:
        rows = await conn.fetch(
            "SELECT event, data::text AS data FROM audit_records WHERE run_id = $1 ORDER BY seq",
            run.run_id,
        )
    finally:
        await conn.close()
    events = [r["event"] for r in rows]
    for needed in ("gate.decision", "gate.denied", "tool.call", "tool.result"):
        assert needed in events
    assert all("Asia/Tokyo" not in r["data"] for r in rows), "argument values leaked"
    engine = make_engine(database_url, pool_size=1)
    try:
        assert await trail.verify_run(engine, run.run_id) == []
    finally:
        await engine.dispose()
