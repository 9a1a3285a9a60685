"""The approvals service in process: a request becomes a pending card here (built by the
same `Card` as the real request), a granted approval is spent once, for its sealed
action only, and the test decides; whether an operator is present is a switch."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tether_brain.clients.approval import Card, PendingApproval
from tether_brain.gates import Verdict
from tether_brain.state.run import RunState
from tether_common.messages.approvals import ApprovalDecided, ApprovalView
from tether_common.messages.gateway import CallRecord
from tether_common.messages.staging import StagedEffect
from tether_common.messages.tools import ToolDescriptor


class MemoryApprovals:
    """On the `clients.approval.ApprovalPort` protocol."""

    def __init__(self, *, expiry_s: float = 3600.0, present: bool = True) -> None:
        self.expiry_s = expiry_s
        self.present = present  # an operator who may decide is connected
        self.cards: dict[str, ApprovalView] = {}
        self.consumed: set[str] = set()
        self.withdrawn: set[str] = set()

    async def request(
        self,
        state: RunState,
        call: CallRecord,
        tool: ToolDescriptor,
        verdict: Verdict,
        owner: str | None = None,
        staging: StagedEffect | None = None,
    ) -> tuple[ApprovalView, PendingApproval]:
        card = Card.of(state, call, tool, verdict, owner, staging, expiry_s=self.expiry_s)
        now = datetime.now(UTC)
        approval_id = f"ap_{len(self.cards) + 1}"
        dropped = {"version", "expires_in_s", "quorum", "arguments_schema"}
        fields = card.body.model_dump(exclude=dropped)
        view = ApprovalView(
            **fields,
            approval_id=approval_id,
            status="pending",
            created_at=now,
            expires_at=now + timedelta(seconds=self.expiry_s),
        )
        self.cards[approval_id] = view
        return view, card.pending(approval_id)

    async def consume(self, approval_id: str, digest: str) -> bool:
        """True the first time only, and only for the sealed action it was asked for."""
        view = self.cards.get(approval_id)
        if view is None or view.action_digest != digest or approval_id in self.consumed:
            return False
        self.consumed.add(approval_id)
        return True

    async def withdraw(self, run_id: str, approval_id: str) -> None:
        self.withdrawn.add(approval_id)

    async def stored_decision(self, run_id: str, approval_id: str) -> ApprovalDecided | None:
        """No signed decisions in process: the test hands the loop its decision."""
        return None

    async def operator_present(self, agent: str | None, owner: str | None) -> bool:
        return self.present
