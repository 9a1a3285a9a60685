"""An operator's `edit` or `respond`, checked against the request before it is signed:
one person's answer (never on a request for a quorum or a named group: an edit decided by
one of N people would let one person approve what N must), and an edit's arguments valid for the tool's schema. The
brain gates the edited call again whatever is checked here; this is the operator's early,
clear refusal."""

from __future__ import annotations

from typing import Any

from tether_approvals.decisions.quorum import is_quorum
from tether_common.errors import ErrorCode, MessageError
from tether_common.messages.approvals import Answer, ApprovalView
from tether_common.typed_answers import violation_of

__all__ = ["check_answer"]


def check_answer(
    item: ApprovalView,
    decision: Answer,
    schema: dict[str, Any] | None,
    arguments: dict[str, Any] | None,
) -> None:
    """Refuse (422) an answer this request does not take."""
    if is_quorum(item):
        raise MessageError(
            "this request is decided by a quorum or a named group: it can be allowed or "
            f"denied by its people, not answered with `{decision}`",
            code=ErrorCode.ANSWER_REFUSED,
        )
    if decision != "edit" or arguments is None:
        return
    if schema is None:
        raise MessageError(
            "this request does not carry its tool's schema (it was made by an older brain): "
            "it can be allowed, denied or answered, not edited",
            code=ErrorCode.ANSWER_REFUSED,
        )
    if arguments == item.args:
        raise MessageError(
            "the edit changes nothing: allow the call as it is instead",
            code=ErrorCode.ARGUMENTS_INVALID,
        )
    if (problem := violation_of(arguments, schema)) is not None:
        raise MessageError(
            f"the edited arguments do not fit {item.tool}'s schema at {problem}",
            code=ErrorCode.ARGUMENTS_INVALID,
        )
