"""An operator's `edit` or `respond` is signed over what it says: the brain's check of a
decision (`clients.approval.decision_problem`) refuses every way of changing it between
the approvals service and the brain: new arguments, dropped or added ones, an edit made
for another tool, a decision flipped, a response changed or moved into an edit, and an
edit genuinely signed for another request replayed on this one."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from tether_brain.clients.approval import PendingApproval, decision_problem
from tether_brain.state.run import Limits, RunState
from tether_common.decisions import DecisionFacts, DecisionKey, payload_of
from tether_common.messages.approvals import ApprovalDecided

KEY = DecisionKey.generate()
TOOL = "file_write"
APPROVAL = "apr_" + "1" * 32
OTHER = "apr_" + "2" * 32
DIGEST = "d" * 64
EDITED = {"path": "notes.txt", "content": "edited\n"}
TS = datetime(2025, 5, 1, 12, 0, tzinfo=UTC)


def parked(tool: str | None = TOOL) -> RunState:
    state = RunState("run_p", "write it", "scripted", None, Limits(50), TS, TS)
    pending = PendingApproval(APPROVAL, "c1", DIGEST, 1, asks=("org_confirm",), tool=tool)
    state.counters.pending_approval = pending.to_json()
    return state


def signed(
    decision: str,
    *,
    arguments: dict[str, Any] | None = None,
    response: str | None = None,
    tool: str = TOOL,
    approval_id: str = APPROVAL,
) -> ApprovalDecided:
    """A decision as the approvals service signs it (`transitions._decision_values`)."""
    payload = payload_of(decision, tool, arguments, response)
    facts = DecisionFacts(approval_id, "run_p", DIGEST, decision, TS, payload)
    return ApprovalDecided(
        approval_id=approval_id,
        run_id="run_p",
        step=1,
        decision=decision,
        action_digest=DIGEST,
        decided_by="ops",
        ts=TS,
        proof=KEY.sign(facts),
        arguments=arguments,
        response=response,
    )


def changed(decided: ApprovalDecided, **update: Any) -> ApprovalDecided:
    return decided.model_copy(update=update)


@pytest.mark.parametrize(
    "decided",
    [
        signed("edit", arguments=EDITED),
        signed("respond", response="use the staging database"),
        signed("allow_once"),  # no payload: spelled as before edits existed
        signed("deny"),
    ],
    ids=["edit", "respond", "allow", "deny"],
)
def test_a_genuine_decision_resumes(decided: ApprovalDecided) -> None:
    assert decision_problem(KEY, parked(), decided) is None


EDIT = signed("edit", arguments=EDITED)
RESPOND = signed("respond", response="use the staging database")

TAMPERED = {
    "arguments_changed": changed(EDIT, arguments=EDITED | {"content": "rm -rf /\n"}),
    "argument_added": changed(EDIT, arguments=EDITED | {"mode": "append"}),
    "arguments_dropped": changed(EDIT, arguments=None),
    "arguments_emptied": changed(EDIT, arguments={}),
    "edit_made_an_allow": changed(EDIT, decision="allow_once"),
    "edit_made_an_allow_without_arguments": changed(EDIT, decision="allow_once", arguments=None),
    "edit_for_another_tool": signed("edit", arguments=EDITED, tool="shell"),
    "allow_given_arguments": changed(signed("allow_once"), arguments=EDITED),
    "response_changed": changed(RESPOND, response="run it anyway"),
    "response_dropped": changed(RESPOND, response=None),
    "response_made_an_edit": changed(RESPOND, decision="edit", arguments=EDITED, response=None),
    "respond_given_arguments": changed(RESPOND, arguments=EDITED),
    "deny_given_a_response": changed(signed("deny"), response="ok"),
    "edit_given_a_response": changed(EDIT, response="ok"),
    "edit_made_a_respond": changed(EDIT, decision="respond", response="x", arguments=None),
    "proof_removed": changed(EDIT, proof=None),
    "signed_by_another_key": changed(
        EDIT,
        proof=DecisionKey.generate().sign(
            DecisionFacts(
                APPROVAL, "run_p", DIGEST, "edit", TS, payload_of("edit", TOOL, EDITED, None)
            )
        ),
    ),
}


@pytest.mark.parametrize("decided", list(TAMPERED.values()), ids=list(TAMPERED))
def test_a_changed_answer_is_refused(decided: ApprovalDecided) -> None:
    assert decision_problem(KEY, parked(), decided) == "decision_unverified"


def test_an_edit_signed_for_another_request_is_not_this_ones() -> None:
    """Genuine, word for word, but about another request: the run waits on neither."""
    replayed = signed("edit", arguments=EDITED, approval_id=OTHER)
    assert decision_problem(KEY, parked(), replayed) == "decision_mismatch"


def test_a_request_parked_before_edits_takes_no_edit() -> None:
    """A run parked by an older brain kept no tool name: no edit can verify for it, while
    its allows and denies still do."""
    assert decision_problem(KEY, parked(tool=None), EDIT) == "decision_unverified"
    assert decision_problem(KEY, parked(tool=None), signed("allow_once")) is None
