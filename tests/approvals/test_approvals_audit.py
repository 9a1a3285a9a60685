"""The hash-chained audit trail: appends, redaction, and every kind of tampering found."""

from __future__ import annotations

import asyncio
import hashlib
import json
import uuid
from datetime import timedelta

import pytest
from sqlalchemy import literal, select, text, update
from sqlalchemy.ext.asyncio import AsyncEngine

from tether_approvals.testing import ApprovalsHarness, auth
from tether_common import audit
from tether_common.messages.approvals import ConsumeApproval

records = audit.records


@pytest.fixture
async def trail(engine: AsyncEngine) -> tuple[str, str]:
    """A fresh five-record trail and its head."""
    async with engine.begin() as conn:
        await conn.run_sync(audit.create_table)
    run_id = f"run_{uuid.uuid4().hex[:12]}"
    head = ""
    for n in range(5):
        head = await audit.append(engine, run_id, f"event.{n}", {"n": n, "args": {"a": "x"}})
    return run_id, head


def kinds(problems: list[audit.Problem]) -> set[str]:
    return {p.kind for p in problems}


async def test_an_intact_trail_verifies(engine: AsyncEngine, trail: tuple[str, str]) -> None:
    run_id, head = trail
    assert await audit.verify(engine, run_id, head) == []
    async with engine.connect() as conn:
        rows = list(await conn.execute(select(records).where(records.c.run_id == run_id)))
    assert [r.seq for r in rows] == [0, 1, 2, 3, 4]
    assert rows[0].nonce
    assert rows[0].prev_digest is None
    assert all(r.nonce is None and r.prev_digest for r in rows[1:])


@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("event", "event.forged"),
        ("data", '{"n":99}'),
        ("prev_digest", "0" * 64),
        ("nonce", "f" * 32),
        ("digest", "1" * 64),
        ("run_id", None),
        ("seq", 7),
        ("ts", None),
    ],
)
async def test_changing_any_field_is_found(
    engine: AsyncEngine, trail: tuple[str, str], column: str, value: object
) -> None:
    run_id, head = trail
    target = 0 if column == "nonce" else 2
    if column == "run_id":
        value = f"{run_id}x"
    if column == "ts":
        value = records.c.ts + timedelta(seconds=1)
    async with engine.begin() as conn:
        await conn.execute(
            update(records)
            .where(records.c.run_id == run_id, records.c.seq == target)
            .values({column: value})
        )
    assert await audit.verify(engine, run_id, head), column


async def test_a_removed_record_is_found(engine: AsyncEngine, trail: tuple[str, str]) -> None:
    run_id, head = trail
    async with engine.begin() as conn:
        await conn.execute(records.delete().where(records.c.run_id == run_id, records.c.seq == 2))
    assert "removed" in kinds(await audit.verify(engine, run_id, head))


async def test_reordered_records_are_found(engine: AsyncEngine, trail: tuple[str, str]) -> None:
    run_id, head = trail
    where = (records.c.run_id == run_id,)
    async with engine.begin() as conn:
        await conn.execute(update(records).where(*where, records.c.seq == 1).values(seq=-1))
        await conn.execute(update(records).where(*where, records.c.seq == 2).values(seq=1))
        await conn.execute(update(records).where(*where, records.c.seq == -1).values(seq=2))
    assert "reordered" in kinds(await audit.verify(engine, run_id, head))


async def test_a_cut_tail_is_found(engine: AsyncEngine, trail: tuple[str, str]) -> None:
    run_id, head = trail
    async with engine.begin() as conn:
        await conn.execute(records.delete().where(records.c.run_id == run_id, records.c.seq == 4))
    assert kinds(await audit.verify(engine, run_id, head)) == {"cut"}
    async with engine.begin() as conn:
        await conn.execute(records.delete().where(records.c.run_id == run_id))
    assert kinds(await audit.verify(engine, run_id, head)) == {"cut"}


async def test_appends_are_serialised_per_trail(engine: AsyncEngine) -> None:
    run_id = f"run_{uuid.uuid4().hex[:12]}"
    heads = await asyncio.gather(*(audit.append(engine, run_id, "e", {"i": i}) for i in range(20)))
    problems = await audit.verify(engine, run_id, None)
    assert kinds(problems) == {"cut"}  # intact but for the head we did not pick
    async with engine.connect() as conn:
        last = (
            await conn.execute(
                select(records.c.digest).where(records.c.run_id == run_id, records.c.seq == 19)
            )
        ).scalar()
    assert last in heads
    assert await audit.verify(engine, run_id, last) == []


@pytest.mark.parametrize("trail", ["run_1", "approvals:run_abc", "_tokens", "ünï:✓ 𝛑", ""])
async def test_the_lock_key_is_the_same_computed_by_postgresql(
    engine: AsyncEngine, trail: str
) -> None:
    """A statement that learns its trail from a row it changes takes the lock every other
    append of that trail takes (`audit.append` computes the key in Python)."""
    async with engine.connect() as conn:
        found = (await conn.execute(select(audit.lock_key_sql(literal(trail))))).scalar_one()
    assert found == audit._lock_key(trail)


def test_redact_keeps_names_and_digests_only() -> None:
    args = {"command": "curl https://secret.example/?k=hunter2", "timeout": 30}
    redacted = audit.redact(args)
    assert set(redacted) == {"command", "timeout"}
    assert "hunter2" not in json.dumps(redacted)
    expected = hashlib.sha256(json.dumps(args["command"]).encode()).hexdigest()
    assert redacted["command"] == {"sha256": expected}


async def test_the_service_audits_decisions_without_argument_values(
    approvals: ApprovalsHarness, engine: AsyncEngine
) -> None:
    secret = f"rm -rf /tmp/{uuid.uuid4().hex}"
    created = await approvals.create(args={"command": secret})
    await approvals.decide(created.approval_id, "allow_once")
    route = approvals.bus.subjects.approval_consume
    body = ConsumeApproval(approval_id=created.approval_id, action_digest=created.action_digest)
    await approvals.bus.request(route, body)
    trail = f"approvals:{created.run_id}"
    async with engine.connect() as conn:
        rows = list(await conn.execute(select(records).where(records.c.run_id == trail)))
        head = (
            await conn.execute(text("SELECT head FROM audit_heads WHERE trail = :t"), {"t": trail})
        ).scalar()
    assert [r.event for r in rows] == ["approval.decided", "approval.consumed"]
    assert all(secret not in r.data for r in rows)
    assert json.loads(rows[0].data)["decided_by"] == "operator"
    assert await audit.verify(engine, trail, head) == []
    assert approvals.audit_jsonl is not None
    lines = approvals.audit_jsonl.read_text().splitlines()
    assert any(trail in line and "approval.consumed" in line for line in lines)
    assert all(secret not in line for line in lines)


async def test_operators_verify_a_trail_over_http(
    approvals: ApprovalsHarness, engine: AsyncEngine
) -> None:
    created = await approvals.create()
    await approvals.decide(created.approval_id, "deny", note="no")
    url = f"/v1/audit/{created.run_id}"
    report = (await approvals.http.get(url, headers=auth(approvals.admin_token))).json()
    assert report["intact"] is True
    assert report["head"]
    async with engine.begin() as conn:
        await conn.execute(
            update(records)
            .where(records.c.run_id == f"approvals:{created.run_id}")
            .values(data='{"decision":"allow_once"}')
        )
    report = (await approvals.http.get(url, headers=auth(approvals.admin_token))).json()
    assert report["intact"] is False
    assert {p["kind"] for p in report["problems"]} == {"changed"}
    viewer = await approvals.token("viewer")
    assert (await approvals.http.get(url, headers=auth(viewer))).status_code == 403


async def test_token_changes_are_audited(approvals: ApprovalsHarness) -> None:
    await approvals.token("viewer", owners=["audited-team"])
    report = (
        await approvals.http.get("/v1/audit/_tokens", headers=auth(approvals.admin_token))
    ).json()
    assert report["intact"] is True


async def test_automated_decisions_are_audited_with_the_approver(
    approvals: ApprovalsHarness, engine: AsyncEngine
) -> None:
    created = await approvals.create(tool="auto_ok_list")
    async with engine.connect() as conn:
        rows = list(
            await conn.execute(
                select(records).where(records.c.run_id == f"approvals:{created.run_id}")
            )
        )
    assert [r.event for r in rows] == ["approval.auto_decided"]
    assert json.loads(rows[0].data)["decided_by"] == "rule:auto-ok"
