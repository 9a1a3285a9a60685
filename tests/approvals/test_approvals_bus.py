"""The new approval routes answer bad bodies with structured errors and keep serving."""

from __future__ import annotations

import json

import pytest

from tether_approvals.testing import ApprovalsHarness
from tether_common.errors import NotFoundError
from tether_common.messages.approvals import ConsumeApproval


@pytest.mark.parametrize("route_name", ["approval_decide", "approval_consume", "approval_presence"])
async def test_bad_bodies_get_structured_errors(
    approvals: ApprovalsHarness, route_name: str
) -> None:
    subject = getattr(approvals.bus.subjects, route_name).subject
    for code, body in (
        ("not_json", b"\xff{"),
        ("invalid_message", json.dumps({"unexpected": True}).encode()),
        ("unsupported_version", json.dumps({"version": 99}).encode()),
    ):
        reply = json.loads(await approvals.bus.request_raw(subject, body))
        assert reply["error"]["code"] == code


async def test_consuming_an_unknown_approval_is_not_found(approvals: ApprovalsHarness) -> None:
    route = approvals.bus.subjects.approval_consume
    with pytest.raises(NotFoundError):
        await approvals.bus.request(
            route, ConsumeApproval(approval_id="apr_nope", action_digest="x")
        )
