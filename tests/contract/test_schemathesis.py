"""Schemathesis against every service's own OpenAPI, on the real processes (real NATS and
PostgreSQL), with the operator's bearer token: generated valid and invalid requests for
every operation; none may answer 5xx or drop the connection, every error body is the
structured `{"error": {"code", "message"}}`, and successful answers match their schema.

Examples are bounded per operation and mode so the whole file stays within ~60 s.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import Case, GenerationMode, Response
from schemathesis.checks import response_schema_conformance
from schemathesis.schemas import APIOperation

from tether_client.server.supervisor import Supervisor

pytestmark = pytest.mark.e2e

SERVICES = ["brain", "approvals", "output-store", "gateway", "tools-runner"]
EXAMPLES = 6  # per operation and generation mode
# Deterministic, no shrinking (failures are collected, not raised), no example database.
BOUNDED = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    derandomize=True,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=list(HealthCheck),
)


def judge(case: Case[Any], response: Response, failures: list[str]) -> None:
    label = f"{case.operation.label} {case.path_parameters} {str(case.body)[:120]}"
    status = response.status_code
    if status >= 500:
        failures.append(f"{label}: {status} {response.text[:200]}")
    elif status >= 400:
        error = response.json().get("error") if response.content else None
        if not (isinstance(error, dict) and error.get("code") and error.get("message")):
            failures.append(f"{label}: {status} without the error body: {response.text[:200]}")
    else:
        try:
            case.validate_response(response, checks=[response_schema_conformance])
        except AssertionError as exc:  # schemathesis' check failures are AssertionErrors
            failures.append(f"{label}: {status} does not match its schema: {str(exc)[:300]}")


def exercise(
    operation: APIOperation[Any, Any, Any, Any],
    mode: GenerationMode,
    base: str,
    headers: dict[str, str],
    failures: list[str],
) -> None:
    @BOUNDED
    @given(case=operation.as_strategy(generation_mode=mode))
    def one(case: Case[Any]) -> None:
        try:
            response = case.call(base_url=base, session=session, headers=headers, timeout=20)
        except requests.exceptions.InvalidHeader:
            return  # a generated header the client itself refuses to send
        except requests.exceptions.ConnectionError as exc:
            failures.append(f"{case.operation.label}: connection dropped: {exc}")
            return
        judge(case, response, failures)

    # One session of our own, closed here: a session left to the garbage collector is an
    # unclosed socket, which the suite turns into an error at its end.
    with requests.Session() as session:
        try:
            one()
        except Unsatisfiable:
            assert mode is GenerationMode.NEGATIVE  # nothing to spoil: no parameters, no body


@pytest.mark.parametrize("service", SERVICES)
async def test_generated_requests_never_fail_the_service(
    edge_stack: Supervisor, operator_auth: dict[str, str], service: str
) -> None:
    base = edge_stack.child(service).url
    schema = schemathesis.openapi.from_url(
        f"{base}/openapi.json", timeout=20, headers=operator_auth
    )
    failures: list[str] = []
    operations = [result.ok() for result in schema.get_all_operations()]  # type: ignore[union-attr]  # an Err (a broken operation) fails the test here
    assert operations, f"{service} documents no operation"
    # Event streams never end for a valid request; test_http_edges covers their inputs.
    operations = [op for op in operations if not op.path.endswith("/events")]
    for operation in operations:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            exercise(operation, mode, base, operator_auth, failures)
    assert not failures, "\n".join(failures[:20])
    async with httpx.AsyncClient(timeout=10) as client:
        assert (await client.get(f"{base}/healthz")).status_code == 200  # still serving
