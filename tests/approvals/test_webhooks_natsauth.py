"""The approval notices on a locked-down bus: the approvals user announces them, the
`notifier` user (an in-house chat bridge or pager) hears them and can do nothing else,
and no other user who has no business with them may listen."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime

import nats
import pytest
from nats.aio.client import Client

from tether_approvals.notices.cards import notice
from tether_client.server.embedded import NatsServer
from tether_client.server.natsauth import generate_passwords, render_config, write_config
from tether_common.bus import Bus, settle
from tether_common.messages.approvals import ApprovalNotice, ApprovalView
from tether_common.messages.base import decode
from tether_common.subjects import Subjects, inbox_prefix

SUBJECTS = Subjects("nwebhookauth")  # fixed: test ids name it
# How long a delivery or a refusal may take: generous, as the suite's first minutes on two
# cores start every worker's servers at once (CI once waited out 5 s here).
WAIT_S = 30.0


@dataclass
class Conn:
    nc: Client
    errors: list[str] = field(default_factory=list)
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    async def refused(self) -> str:
        await settle(self.nc)
        await asyncio.wait_for(self.changed.wait(), WAIT_S)
        self.changed.clear()
        return self.errors[-1]


@dataclass
class Locked:
    url: str
    passwords: dict[str, str]

    async def raw(self, user: str) -> Conn:
        conn = Conn(Client())

        async def on_error(exc: Exception) -> None:
            conn.errors.append(str(exc))
            conn.changed.set()

        conn.nc = await nats.connect(
            self.url,
            user=user,
            password=self.passwords[user],
            error_cb=on_error,
            inbox_prefix=inbox_prefix(user),
        )
        return conn


@pytest.fixture(scope="module")
async def locked(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Locked]:
    base = tmp_path_factory.mktemp("notices-nats")
    passwords = generate_passwords()
    config = write_config(base / "nats.conf", render_config(SUBJECTS, passwords))
    server = NatsServer(base / "data", config_file=config).start()
    try:
        yield Locked(server.url, passwords)
    finally:
        server.stop()


def a_notice() -> ApprovalNotice:
    now = datetime.now(UTC)
    item = ApprovalView(
        approval_id="apr_1",
        run_id="run_1",
        step=1,
        tool="shell",
        args={"command": "ls"},
        danger="networked",
        reason="ask",
        reach="instance",
        action_digest="d" * 64,
        status="pending",
        created_at=now,
        expires_at=now,
    )
    return notice("approval.requested", item, "http://127.0.0.1:8701")


async def test_the_notifier_hears_what_approvals_announces(locked: Locked) -> None:
    notifier = await locked.raw("notifier")
    approvals = await Bus.connect(
        locked.url,
        service="approvals",
        subjects=SUBJECTS,
        user="approvals",
        password=locked.passwords["approvals"],
    )
    try:
        sub = await notifier.nc.subscribe(SUBJECTS.approval_notices)
        await settle(notifier.nc)
        told = a_notice()
        await approvals.publish(SUBJECTS.approval_notices, told)
        await approvals.settle()  # out of the client's buffer before the wait starts
        heard = decode(ApprovalNotice, (await sub.next_msg(timeout=WAIT_S)).data)
        assert heard == told
        assert not notifier.errors
    finally:
        await approvals.close()
        await notifier.nc.close()


@pytest.mark.parametrize(
    "subject",
    [
        SUBJECTS.approval_notices,  # it hears them; it does not make them
        SUBJECTS.approval_decide.subject,
        SUBJECTS.approval_create.subject,
        SUBJECTS.approval_withdraw.subject,
        SUBJECTS.approval_consume.subject,
        SUBJECTS.approval_decided,
        SUBJECTS.run_start.subject,
        SUBJECTS.run_stop.subject,
        SUBJECTS.run_events("r1"),
        SUBJECTS.tool_execute.subject,
        SUBJECTS.identity_verify.subject,
        "_INBOX_brain.reply",
        "$JS.API.STREAM.NAMES",
        "anything.else",
    ],
)
async def test_the_notifier_may_publish_nothing(locked: Locked, subject: str) -> None:
    notifier = await locked.raw("notifier")
    try:
        await notifier.nc.publish(subject, b"{}")
        error = await notifier.refused()
        assert "permissions violation for publish" in error.lower()
    finally:
        await notifier.nc.close()


@pytest.mark.parametrize(
    ("user", "subject"),
    [
        ("notifier", SUBJECTS.approval_decided),
        ("notifier", SUBJECTS.run_events_all),
        ("notifier", SUBJECTS.approval_create.subject),
        ("notifier", SUBJECTS.approval_decide.subject),
        ("notifier", SUBJECTS.tool_execute.subject),
        ("notifier", f"{inbox_prefix('approvals')}.>"),
        ("notifier", ">"),
        ("notifier", f"{SUBJECTS.prefix}.approvals.*"),
        ("client", SUBJECTS.approval_notices),
        ("gateway", SUBJECTS.approval_notices),
        ("tools-runner", SUBJECTS.approval_notices),
        ("output-store", SUBJECTS.approval_notices),
    ],
)
async def test_no_one_else_listens_and_the_notifier_hears_nothing_more(
    locked: Locked, user: str, subject: str
) -> None:
    conn = await locked.raw(user)
    try:
        await conn.nc.subscribe(subject)
        error = await conn.refused()
        assert "permissions violation for subscription" in error.lower()
    finally:
        await conn.nc.close()
