"""Every service answers a bad body with a structured error reply and keeps serving."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from pydantic import BaseModel

from tether_common.bus import Bus
from tether_common.identity import bearer_headers
from tether_common.messages.base import ErrorReply, decode
from tether_common.subjects import Route, Subjects

pytestmark = pytest.mark.e2e
ADMIN_TOKEN = "test-operator-token"  # tests/conftest.py

# (service, route of the stack's subjects, a valid body)
CASES: list[tuple[str, Callable[[Subjects], Route[Any, Any]], dict[str, Any]]] = [
    ("brain", lambda s: s.run_get, {"run_id": "run_nope"}),
    (
        "gateway",
        lambda s: s.generate("rules"),
        {"run_id": "r", "provider": "rules", "messages": []},
    ),
    (
        "tools-runner",
        lambda s: s.tool_execute,
        {"run_id": "r", "call_id": "c", "name": "current_time", "args": {}},
    ),
    ("approvals", lambda s: s.approval_list, {"status": "pending"}),
    ("output-store", lambda s: s.output_put, {"run_id": "r", "content": "hello"}),
]


async def ask(bus: Bus, subject: str, data: bytes) -> dict[str, Any]:
    """Ask as the fixtures' bootstrap admin (the brain's client subjects need a token)."""
    raw = await bus.request_raw(subject, data, timeout=10, headers=bearer_headers(ADMIN_TOKEN))
    reply: dict[str, Any] = json.loads(raw)
    return reply


@pytest.mark.parametrize(("service", "route_of", "valid"), CASES, ids=[c[0] for c in CASES])
async def test_bad_bodies_get_structured_errors(
    stack_bus: Bus,
    service: str,
    route_of: Callable[[Subjects], Route[Any, Any]],
    valid: dict[str, Any],
) -> None:
    subject = route_of(stack_bus.subjects).subject
    bad = {
        "not_json": b"\xff not json {",
        "invalid_message": json.dumps({"unexpected": True}).encode(),
        "unsupported_version": json.dumps(valid | {"version": 99}).encode(),
    }
    for code, body in bad.items():
        reply = await ask(stack_bus, subject, body)
        error = ErrorReply.model_validate(reply).error
        assert error.code == code, (service, reply)
        assert error.message
    still = await ask(stack_bus, subject, json.dumps(valid).encode())
    if service == "brain":  # a valid request for a run that does not exist
        assert still["error"]["code"] == "not_found"
    else:
        assert "error" not in still, still


async def test_a_json_array_is_refused(stack_bus: Bus) -> None:
    reply = await ask(stack_bus, stack_bus.subjects.run_start.subject, b"[1, 2]")
    assert reply["error"]["code"] == "invalid_message"


def test_decode_names_the_failing_field() -> None:
    class Body(BaseModel):
        count: int

    with pytest.raises(Exception, match="count"):
        decode(Body, b'{"count": "many"}')
