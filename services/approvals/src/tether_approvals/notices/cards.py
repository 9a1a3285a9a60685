"""What a notice says: the card a chat tool shows for one request (argument values cut
at 2,000 characters, as in run events) with its console and approve/deny links.

The card is text for people, so what the call's own words hold of invisible or reordering
code points (a path `invoice\\u202egpj.sh` that would read `invoicehs.jpg`) is written out
as `⟨U+202E⟩` (`tether_common.display`) in its title, summary, tool, arguments, reason,
note, change set, and an operator's edit or response; the exact request stays behind the
card's links (approve, deny, and the console's edit form and answer box).

A staged call's card carries its change set as text (`changes`: each path and its diff,
`tether_common.changetext`), so whoever decides from a chat tool sees what approving
applies, as the console and `tether approvals show` do."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from typing import Any

from tether_common.changetext import change_lines
from tether_common.display import shown, shown_data
from tether_common.excerpt import cut
from tether_common.messages.approvals import (
    CARD_CHANGES_CHARS,
    ApprovalCard,
    ApprovalNotice,
    ApprovalView,
    CardLinks,
    EventKind,
    NoticeKind,
)
from tether_common.messages.staging import ChangeSet

SUMMARY_AT = 300
VALUE_AT = 100

# Which operator events people are told of (a spent approval is nobody's news).
NOTICE_OF: dict[EventKind, NoticeKind | None] = {
    "created": "approval.requested",
    "voted": None,  # a partial approval: the card changes, nobody new is asked
    "escalated": "approval.escalated",
    "decided": "approval.decided",
    "expired": "approval.expired",
    "withdrawn": "approval.withdrawn",
    "consumed": None,
}

_TITLES: dict[NoticeKind, str] = {
    "approval.requested": "Approval needed",
    "approval.escalated": "Approval escalated to you",
    "approval.decided": "Approval decided",
    "approval.expired": "Approval expired",
    "approval.withdrawn": "Approval withdrawn",
}


def _short(value: Any) -> str:
    text = shown(value if isinstance(value, str) else json.dumps(value, ensure_ascii=False))
    return text if len(text) <= VALUE_AT else text[: VALUE_AT - 1] + "…"


def summary(tool: str, args: dict[str, Any]) -> str:
    """One readable line: `shell: command=ls -la /tmp` (each value shortened, so one long
    argument does not hide the others)."""
    said = ", ".join(f"{shown(key)}={_short(value)}" for key, value in args.items())
    line = " ".join(f"{shown(tool)}: {said}".split())
    return line if len(line) <= SUMMARY_AT else line[: SUMMARY_AT - 1] + "…"


def changes_text(changes: ChangeSet | None) -> str | None:
    """The change set as the card's text, each line made safe, whole lines kept up to
    `CARD_CHANGES_CHARS` and a last line saying how many more there are (None: the call
    was not staged)."""
    if changes is None:
        return None
    lines = [shown(line) for line in change_lines(changes)]
    kept: list[str] = []
    size = 0
    for line in lines:
        size += len(line) + 1
        if size > CARD_CHANGES_CHARS and kept:
            kept.append(f"… {len(lines) - len(kept)} more lines: the console shows them all")
            break
        kept.append(line)
    return "\n".join(kept)


def links(base: str, approval_id: str) -> CardLinks:
    page = f"{base}/?approval={approval_id}"
    return CardLinks(
        view=page,
        approve=f"{page}&decision=allow_once",
        deny=f"{page}&decision=deny",
        decision_api=f"{base}/v1/approvals/{approval_id}/decision",
        # The console's edit form and answer box on this request (signed in, confirmed).
        edit=f"{page}&decision=edit",
        respond=f"{page}&decision=respond",
    )


def notice(kind: NoticeKind, item: ApprovalView, base: str) -> ApprovalNotice:
    card = ApprovalCard(
        title=shown(f"{_TITLES[kind]}: {item.tool}" + (f" ({item.agent})" if item.agent else "")),
        summary=summary(item.tool, item.args),
        tool=shown(item.tool),
        arguments=shown_data(cut(item.args)),
        reason=shown(cut(item.reason)),
        danger=item.danger,
        reach=item.reach,
        approval_id=item.approval_id,
        run_id=item.run_id,
        step=item.step,
        agent=item.agent,
        requester=item.owner,
        tenant=item.tenant,
        status=item.status,
        decision=item.decision,
        decided_by=item.decided_by,
        note=None if item.note is None else shown(item.note),
        created_at=item.created_at,
        expires_at=item.expires_at,
        links=links(base, item.approval_id),
        group=item.group,
        needed=item.needed,
        approved_by=[v.by for v in item.approvals if v.decision != "deny"],
        changes=changes_text(item.changes),
        edited_arguments=None if item.edited_args is None else shown_data(cut(item.edited_args)),
        response=None if item.response is None else shown(cut(item.response)),
    )
    return ApprovalNotice(
        notice_id=f"ntc_{uuid.uuid4().hex}", kind=kind, ts=datetime.now(UTC), card=card
    )
