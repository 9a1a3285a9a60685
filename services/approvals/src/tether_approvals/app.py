"""Composition root of the approvals service: settings, bus, database, handlers, the
operator API and console, the webhooks API, the expiry sweeper, the run notices' consumer
of the run events stream, and the notice sender."""

from __future__ import annotations

import logging
import time
from pathlib import Path

from fastapi import FastAPI

from tether_approvals.api import approvals, audit_trail, console, webhooks
from tether_approvals.api.bus import serve_bus
from tether_approvals.api.deps import PARTS, Parts
from tether_approvals.auth import TokenStore
from tether_approvals.decisions.lifecycle import Lifecycle
from tether_approvals.decisions.rules import build_approvers
from tether_approvals.notices.outbox import Notices, Sender
from tether_approvals.notices.runs import CONSUMER, FORMER_CONSUMER, RunNotices
from tether_approvals.notices.webhooks import WebhookStore
from tether_approvals.persistence.pending import PendingGauge
from tether_approvals.persistence.presence import PresenceBoard
from tether_approvals.persistence.store import ApprovalStore
from tether_approvals.settings import ApprovalSettings
from tether_common import audit
from tether_common.background import FailureLog, every
from tether_common.decisions import required_key
from tether_common.identity import serve_verify, tokens_router
from tether_common.messages.approvals import ApprovalDecided, ApprovalNotice
from tether_common.messages.runs import RunEvent
from tether_common.service import Service
from tether_common.settings import CommonSettings

SERVICE = "approvals"

log = logging.getLogger(__name__)


PRUNE_EVERY_S = 60.0


async def sweep_forever(
    lifecycle: Lifecycle,
    store: ApprovalStore,
    board: PresenceBoard,
    settings: ApprovalSettings,
    pending: PendingGauge,
) -> None:
    """Expiry counts as denied even when nobody is watching, so it runs on a timer; the
    pending gauge is re-read on the same tick; old operator events and dead operator
    sessions are pruned now and then."""
    pruned = 0.0

    async def tick() -> None:
        nonlocal pruned
        await lifecycle.sweep(settings.republish_after_s)
        await pending.refresh()
        if time.monotonic() - pruned > PRUNE_EVERY_S:
            await store.prune_events(settings.event_retention_s)
            await board.prune()
            pruned = time.monotonic()

    await every(settings.sweep_interval_s, tick, FailureLog(log, "the approval sweep"))


def create_app(common: CommonSettings, settings: ApprovalSettings) -> FastAPI:
    service = Service(SERVICE, common, migrations=Path(__file__).parent / "migrations")
    sink = None if settings.audit_jsonl is None else audit.JsonlSink(settings.audit_jsonl)

    async def publish(decided: ApprovalDecided) -> None:
        subject = service.subjects.approval_decided
        await service.bus.js_publish(subject, decided, msg_id=f"{decided.approval_id}:decided")

    async def publish_notice(subject: str, told: ApprovalNotice) -> None:
        await service.bus.publish(subject, told)

    store = ApprovalStore(service.engine)
    tokens = TokenStore(
        service.engine,
        operator_token=common.operator_token,
        operator_token_sha256=common.operator_token_sha256,
        sink=sink,
    )
    board = PresenceBoard(service.engine, settings.presence_ttl_s)
    lifecycle = Lifecycle(
        service.engine,
        publish,
        default_expiry_s=settings.default_expiry_s,
        approvers=build_approvers(settings.rules, settings.approvers),
        sink=sink,
        key=required_key(common.decision_key),
        notices=Notices(settings.link_base(), settings.webhooks, service.subjects.approval_notices),
        quorum_rules=settings.quorum_rules,
    )
    sender = Sender(service.engine, settings.webhooks, publish_notice)
    pending = PendingGauge(service.engine)
    run_notices = RunNotices(
        service.engine, settings.webhooks, settings.link_base(), settings.console_url
    )

    async def on_start() -> None:
        await serve_bus(service.bus, store, lifecycle, tokens, board)
        await serve_verify(service.bus, tokens)
        # The run events that make notices, acknowledged once their notices are in the
        # outbox; from where the consumer of every run event before it had got to.
        await service.bus.consume(
            service.subjects.run_notable_all,
            durable=CONSUMER,
            model=RunEvent,
            handler=run_notices.on_event,
            new_only=True,
            takes_over=FORMER_CONSUMER,
        )
        sweep = sweep_forever(lifecycle, store, board, settings, pending)
        service.background.start("the approval sweep", sweep)
        service.background.start("the notice sender", sender.run_forever())

    async def on_stop() -> None:
        await sender.aclose()  # its loop has stopped: Service.stop ends background first

    routers = [
        approvals.router,
        tokens_router(tokens),
        audit_trail.router,
        webhooks.router,
        console.router,
    ]
    parts = Parts(
        engine=service.engine,
        store=store,
        lifecycle=lifecycle,
        board=board,
        webhooks=WebhookStore(service.engine, settings.webhooks),
        console_url=settings.console_url,
    )
    return service.app(
        title="Tether approvals",
        on_start=on_start,
        on_stop=on_stop,
        routers=routers,
        verifier=tokens,
        state={PARTS: parts},
    )
