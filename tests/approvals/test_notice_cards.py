"""What a notice card says (webhooks and the `approval_notices` subject share it) of a call
whose words hold invisible or reordering code points: the card's text for people (title,
summary, tool, arguments, reason, note) shows each escaped, while the approvals API
keeps the request exact."""

from __future__ import annotations

import asyncio

from nats.aio.subscription import Subscription

from display_corpus import SERVICE_CORPUS
from tether_approvals.notices.cards import changes_text
from tether_approvals.testing import ApprovalsHarness, auth
from tether_common.display import INVISIBLE
from tether_common.messages.approvals import CARD_CHANGES_CHARS, ApprovalCard, ApprovalNotice
from tether_common.messages.base import decode
from tether_common.messages.staging import ChangeEntry, ChangeSet

NAMES = [name for name, _ in SERVICE_CORPUS]
SEEN = [seen for _, seen in SERVICE_CORPUS]


async def card_of(notices: Subscription, approval_id: str, kind: str) -> ApprovalCard:
    async with asyncio.timeout(30):
        while True:
            told = decode(ApprovalNotice, (await notices.next_msg(timeout=30)).data)
            if (told.card.approval_id, told.kind) == (approval_id, kind):
                return told.card


async def test_the_card_shows_invisible_code_points_escaped(approvals: ApprovalsHarness) -> None:
    args = {"path": NAMES[0], NAMES[3]: NAMES[1:12], "nested": {"k": NAMES[12]}}
    notices = await approvals.bus.subscribe_raw(approvals.bus.subjects.approval_notices)
    try:
        created = await approvals.create(
            tool="file_write", args=args, reason=f"writes {NAMES[0]}", agent="card-bot"
        )
        card = await card_of(notices, created.approval_id, "approval.requested")
        assert card.title == "Approval needed: file_write (card-bot)"
        assert card.summary.startswith("file_write: path=invoice⟨U+202E⟩gpj.sh, ")
        assert card.arguments == {
            "path": SEEN[0],
            SEEN[3]: SEEN[1:12],
            "nested": {"k": SEEN[12]},
        }
        assert card.reason == "writes invoice⟨U+202E⟩gpj.sh"
        assert INVISIBLE.search(card.model_dump_json()) is None
        decided = await approvals.decide(created.approval_id, "deny", note=f"not {NAMES[9]}")
        assert decided.status_code == 200, decided.text
        card = await card_of(notices, created.approval_id, "approval.decided")
        assert card.note == f"not {SEEN[9]}"
    finally:
        await notices.unsubscribe()
    # The request itself is kept exactly as it was asked.
    exact = await approvals.http.get(
        f"/v1/approvals/{created.approval_id}", headers=auth(approvals.admin_token)
    )
    assert exact.json()["args"] == args


async def test_a_staged_call_s_card_carries_its_diff(approvals: ApprovalsHarness) -> None:
    """Issue 29 (5): a webhook card left the change set out, so whoever decided from a
    chat tool approved a diff they never saw. The card carries it as text, the call's own
    words (paths, diff lines, the command's output) escaped like the rest of the card."""
    diff = f"--- a/{NAMES[0]}\n+++ b/{NAMES[0]}\n@@ -1 +1 @@\n-old\n+new {NAMES[1]}\n"
    changes = ChangeSet(
        digest="cd" * 32,
        tool="shell",
        entries=[
            ChangeEntry(
                path=NAMES[0], change="modified", type="text", base="c" * 64,
                digest="d" * 64, diff=diff,
            ),
            ChangeEntry(
                path="out/blob.bin", change="created", type="binary", base="absent",
                digest="e" * 64, size_after=9,
            ),
        ],
        output=f"exit code 0\n{NAMES[2]}",
    )  # fmt: skip
    notices = await approvals.bus.subscribe_raw(approvals.bus.subjects.approval_notices)
    try:
        created = await approvals.create(tool="shell", changes=changes, agent="card-bot")
        card = await card_of(notices, created.approval_id, "approval.requested")
    finally:
        await notices.unsubscribe()
    assert card.changes is not None
    assert card.changes.splitlines() == [
        "── approving applies exactly these changes (2; digest cdcdcdcdcdcd)",
        f"   modified {SEEN[0]}",
        f"     --- a/{SEEN[0]}",
        f"     +++ b/{SEEN[0]}",
        "     @@ -1 +1 @@",
        "     -old",
        f"     +new {SEEN[1]}",
        f"   created out/blob.bin (binary, - → 9 bytes, sha256 {'e' * 64})",
        "   the staged command said:",
        "     exit code 0",
        f"     {SEEN[2]}",
    ]
    assert INVISIBLE.search(card.model_dump_json()) is None


def test_a_long_change_set_is_cut_at_whole_lines() -> None:
    """A chat tool takes tens of kilobytes: the card keeps whole lines up to
    `CARD_CHANGES_CHARS` and says how many more the console has."""
    diff = "".join(f"+line {n:05d} {'x' * 90}\n" for n in range(600))
    entry = ChangeEntry(path="big.txt", change="created", type="text", base="absent", diff=diff)
    text = changes_text(ChangeSet(digest="ef" * 32, tool="file_write", entries=[entry]))
    assert text is not None
    lines = text.splitlines()
    assert len(text) <= CARD_CHANGES_CHARS + 100
    assert lines[-1] == f"… {602 - len(lines) + 1} more lines: the console shows them all"
    assert all(x.startswith("     +line ") and x.endswith("x") for x in lines[2:-1])
    assert changes_text(None) is None
