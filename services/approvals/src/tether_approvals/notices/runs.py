"""Run notices: a run's end (`run.completed`, `run.failed`, `run.stopped`) and each of its
parks for an operator (`run.awaiting_approval`), told to the webhook endpoints of the
run's tenant that chose these kinds, through the notice outbox (signed, retried,
dead-lettered like every notice).

The brain already publishes every run event on JetStream; this service reads that stream
with a durable consumer (`approvals_run_notices`, shared by the replicas) and writes the
outbox rows of an event before acknowledging it, so no notice is lost when either
service restarts (an event not yet acknowledged is delivered again). Each row's id is
derived from the run, the event and the endpoint (`notice_id`: the run and the kind, and
the approval for a park), so an event delivered twice, or published twice by the brain,
writes its rows once: at least once to the receiver, never twice from the outbox.

Only top-level runs are told of (a helper's end is its parent's business). An endpoint
whose creator was limited to some agents hears of those agents' runs only; one limited to
some owners hears of parks only (a run's end does not say whose agent it ran).
"""

from __future__ import annotations

import hashlib
import logging
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from tether_approvals.notices.cards import links
from tether_approvals.persistence.statements import ENDPOINTS
from tether_approvals.persistence.tables import approvals, notice_outbox
from tether_approvals.settings import WebhookSettings
from tether_common.excerpt import cut
from tether_common.messages.runs import RunEvent
from tether_common.messages.webhooks import (
    RUN_ANSWER_CHARS,
    RunCard,
    RunNotice,
    RunNoticeKind,
    notice_kind,
)

__all__ = ["CONSUMER", "FORMER_CONSUMER", "RunNotices"]

log = logging.getLogger(__name__)

# The consumer of the notable run events (`Subjects.run_notable_all`); the one before it
# read every run event (`FORMER_CONSUMER`), and is left for this one to take over from.
CONSUMER = "approvals_run_notable"
FORMER_CONSUMER = "approvals_run_notices"


def _hex(*parts: str) -> str:
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:32]


class RunNotices:
    """Writes a run event's notices into the outbox (the durable consumer's handler)."""

    def __init__(
        self,
        engine: AsyncEngine,
        settings: WebhookSettings,
        link_base: str,
        console_url: str | None,
    ) -> None:
        self.engine = engine
        self.settings = settings
        self.link_base = link_base
        self.console_url = console_url

    async def on_event(self, event: RunEvent) -> None:
        kind = notice_kind(event)
        if kind is None or event.tenant is None:
            return
        approval_id = event.data.get("approval_id") if kind == "run.awaiting_approval" else None
        notice_id = "ntc_" + _hex(event.run_id, kind, str(approval_id or ""))
        async with self.engine.begin() as conn:
            scope = await self._scope(conn, event, approval_id)
            endpoints = await self._endpoints(conn, event.tenant, kind, scope)
            if not endpoints:
                return
            body = self._notice(notice_id, kind, event, scope)
            await conn.execute(
                insert(notice_outbox)
                .values(self._rows(notice_id, kind, event, approval_id, endpoints, body))
                .on_conflict_do_nothing(index_elements=["delivery_id"])
            )

    async def _scope(
        self, conn: AsyncConnection, event: RunEvent, approval_id: Any
    ) -> tuple[str | None, str | None, bool]:
        """The run's agent and its owner, and whether the owner is known (a park's request
        names both; a run's end names its agent only)."""
        if approval_id is None:
            agent = event.data.get("agent")
            return (None if agent is None else str(agent)), None, False
        found = (
            await conn.execute(
                select(approvals.c.agent, approvals.c.owner).where(
                    approvals.c.approval_id == str(approval_id),
                    approvals.c.run_id == event.run_id,
                )
            )
        ).first()
        if found is None:
            return None, None, False
        return found.agent, found.owner, True

    async def _endpoints(
        self,
        conn: AsyncConnection,
        tenant: str,
        kind: RunNoticeKind,
        scope: tuple[str | None, str | None, bool],
    ) -> list[str]:
        agent, owner, owner_known = scope
        # FOR KEY SHARE, as for approval notices: an endpoint being deleted is waited for.
        found = await conn.execute(ENDPOINTS, {"p_tenant": tenant, "p_kinds": [kind]})
        return [
            row.endpoint_id
            for row in found
            if (row.agents is None or agent in row.agents)
            and (row.owners is None or (owner_known and owner in row.owners))
        ]

    def _notice(
        self,
        notice_id: str,
        kind: RunNoticeKind,
        event: RunEvent,
        scope: tuple[str | None, str | None, bool],
    ) -> RunNotice:
        data = event.data
        parked = kind == "run.awaiting_approval"
        answer = data.get("answer")
        view = None
        if parked:
            view = links(self.link_base, str(data["approval_id"])).view
        elif self.console_url is not None:
            view = f"{self.console_url}#/runs/{event.run_id}"
        card = RunCard(
            run_id=event.run_id,
            tenant=str(event.tenant),
            status="awaiting_approval" if parked else str(data.get("status")),
            agent=scope[0],
            stop_reason=data.get("stop_reason"),
            answer=None if answer is None else str(answer)[:RUN_ANSWER_CHARS],
            steps=int(data.get("steps") or data.get("step") or 0),
            usage=cut(data.get("usage") or {}),
            approval_id=str(data["approval_id"]) if parked else None,
            tool=str(data.get("name")) if parked else None,
            view=view,
        )
        return RunNotice(notice_id=notice_id, kind=kind, ts=event.ts, run=card)

    def _rows(
        self,
        notice_id: str,
        kind: RunNoticeKind,
        event: RunEvent,
        approval_id: Any,
        endpoints: list[str],
        body: RunNotice,
    ) -> list[dict[str, Any]]:
        now = datetime.now(UTC)
        common = {
            "notice_id": notice_id,
            "tenant": event.tenant,
            "kind": kind,
            "approval_id": None if approval_id is None else str(approval_id),
            "run_id": event.run_id,
            "body": body.model_dump_json(),
            "status": "pending",
            "attempts": 0,
            "next_attempt_at": now,
            "give_up_at": now + timedelta(seconds=self.settings.max_age_s),
            "created_at": now,
            "sink": "webhook",
            "subject": None,
        }
        return [
            common | {"delivery_id": "dlv_" + _hex(notice_id, e), "endpoint_id": e}
            for e in endpoints
        ]
