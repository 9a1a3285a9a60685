"""Malformed input at every service's edge, over HTTP and over NATS, against the real
processes: each is a structured 4xx (`{"error": {"code", "message"}}`) or `ErrorReply`,
never a 500; bodies over a route's limit are cut while they stream in (413), and the
brain's memory stays bounded while a 300 MB body without Content-Length is refused."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from shipped import observe
from tether_client.server.supervisor import Supervisor
from tether_common.bus import Bus
from tether_common.http import DEFAULT_BODY_LIMIT, TEXT_BODY_LIMIT

pytestmark = pytest.mark.e2e

# JSON text (already escaped) that PostgreSQL or strict JSON cannot carry.
BAD_TEXT = [r"\u0000", r"a\u0000b", r"\ud800", r"x\udfff", r"\udc00\ud800", r"\ud83d"]
BAD_NUMBERS = ["Infinity", "-Infinity", "NaN", "1e999", "-1e999"]
HUGE_INTS = [str(10**30), "9" * 400, "9" * 5000]
BAD_IDS = ["run%00x", "%00", "a" * 201, "%ED%A0%80", "a%0Ab", "..%2F..%2Fetc", "-" + "9" * 5000]
CREATE = {"run_id": "r", "tool": "t", "reason": "r", "action_digest": "d", "step": "0"}
BAD_EVENT_IDS = ["9" * 5000, "9" * 19, "-1", "1e5", "abc", "0x10", "1 2"]


def body_with(fields: dict[str, str], raw_field: str, raw_value: str) -> bytes:
    """A JSON object with `fields` as strings and `raw_field` set to `raw_value` verbatim."""
    parts = [f"{json.dumps(k)}: {json.dumps(v)}" for k, v in fields.items() if k != raw_field]
    parts.append(f"{json.dumps(raw_field)}: {raw_value}")
    return ("{" + ", ".join(parts) + "}").encode()


def assert_structured(response: httpx.Response, status: int | None = None) -> dict[str, Any]:
    assert response.status_code < 500, (response.status_code, response.text[:300])
    assert response.status_code >= 400, (response.status_code, response.text[:300])
    if status is not None:
        assert response.status_code == status, (response.status_code, response.text[:300])
    error: dict[str, Any] = response.json()["error"]
    assert error["code"]
    assert error["message"]
    return error


@pytest.fixture(scope="module")
async def http(edge_stack: Supervisor) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=30) as client:
        yield client


def url(stack: Supervisor, service: str) -> str:
    return stack.child(service).url


JSON = {"Content-Type": "application/json"}

# (path, valid string fields of the body): every string field gets every bad text.
TEXT_ROUTES = [
    (
        "/v1/runs",
        {"prompt": "hello", "agent": "default", "provider": "rules", "model": "m"},
    ),
    ("/v1/runs/run_nope/messages", {"text": "more"}),
    (
        "/v1/skills",
        {"name": "edge-skill", "description": "Edges. Use when testing.", "body": "# B\n"},
    ),
    ("/v1/policy/explain", {"tool": "current_time", "agent": "default"}),
]


@pytest.mark.parametrize(("path", "fields"), TEXT_ROUTES, ids=[r[0] for r in TEXT_ROUTES])
async def test_bad_text_in_every_brain_string_field(
    edge_stack: Supervisor,
    http: httpx.AsyncClient,
    operator_auth: dict[str, str],
    path: str,
    fields: dict[str, str],
) -> None:
    brain = url(edge_stack, "brain")
    for field in fields:
        for bad in BAD_TEXT:
            raw = json.dumps(fields[field])[:-1] + bad + '"'
            response = await http.post(
                brain + path, content=body_with(fields, field, raw), headers=operator_auth | JSON
            )
            assert assert_structured(response, 422)["code"] == "invalid_request"


async def test_non_finite_and_huge_numbers_are_refused(
    edge_stack: Supervisor, http: httpx.AsyncClient, operator_auth: dict[str, str]
) -> None:
    brain = url(edge_stack, "brain")
    base = {"prompt": "hello"}
    for field in ("max_cost", "max_seconds", "max_steps", "max_tokens", "max_tool_calls"):
        for bad in BAD_NUMBERS + HUGE_INTS:
            response = await http.post(
                f"{brain}/v1/runs",
                content=body_with(base, field, bad),
                headers=operator_auth | JSON,
            )
            # 400 when JSON itself cannot hold it (over 4,300 digits), else 422.
            assert_structured(response)


async def test_bad_path_ids_and_event_ids(
    edge_stack: Supervisor, http: httpx.AsyncClient, operator_auth: dict[str, str]
) -> None:
    brain, approvals = url(edge_stack, "brain"), url(edge_stack, "approvals")
    outputs = url(edge_stack, "output-store")
    for bad in BAD_IDS:
        for method, target in [
            ("GET", f"{brain}/v1/runs/{bad}"),
            ("GET", f"{brain}/v1/runs/{bad}/events"),
            ("POST", f"{brain}/v1/runs/{bad}/stop"),
            ("GET", f"{brain}/v1/skills/{bad}"),
            ("DELETE", f"{brain}/v1/skills/{bad}"),
            ("GET", f"{approvals}/v1/approvals/{bad}"),
            ("DELETE", f"{approvals}/v1/tokens/{bad}"),
            ("GET", f"{approvals}/v1/audit/{bad}"),
            ("GET", f"{outputs}/v1/outputs/{bad}"),
        ]:
            response = await http.request(method, target, headers=operator_auth)
            assert_structured(response)
        response = await http.post(
            f"{brain}/v1/runs/{bad}/messages", json={"text": "hi"}, headers=operator_auth
        )
        assert_structured(response)
    for bad in BAD_EVENT_IDS:
        response = await http.get(
            f"{brain}/v1/runs/run_nope/events", headers=operator_auth | {"Last-Event-ID": bad}
        )
        assert assert_structured(response, 422)["code"] == "invalid_last_event_id"
        response = await http.get(
            f"{approvals}/v1/approvals/events", headers=operator_auth | {"Last-Event-ID": bad}
        )
        assert assert_structured(response, 422)["code"] == "invalid_last_event_id"
    # A well-formed id still reaches the run lookup.
    response = await http.get(
        f"{brain}/v1/runs/run_nope/events", headers=operator_auth | {"Last-Event-ID": "3"}
    )
    assert assert_structured(response, 404)["code"] == "not_found"


async def test_bad_text_at_the_approvals_service(
    edge_stack: Supervisor, http: httpx.AsyncClient, operator_auth: dict[str, str]
) -> None:
    approvals = url(edge_stack, "approvals")
    headers = operator_auth | JSON
    for bad in BAD_TEXT:
        text = f'"{bad}"'
        decision = body_with({"decision": "deny"}, "note", text)
        response = await http.post(
            f"{approvals}/v1/approvals/apr_nope/decision", content=decision, headers=headers
        )
        assert_structured(response, 422)
        for field in ("name", "agents", "owners"):
            value = f"[{text}]" if field != "name" else text
            token = body_with({"name": "n", "role": "viewer"}, field, value)
            response = await http.post(f"{approvals}/v1/tokens", content=token, headers=headers)
            assert_structured(response, 422)
    # In a query string a lone surrogate arrives as bytes that are not UTF-8, which the
    # server decodes to U+FFFD: harmless. NUL is refused.
    for param in ("run_id", "agent", "owner"):
        for bad_query in ("%00", "a%00b", "%ED%A0%80"):
            target = f"{approvals}/v1/approvals?{param}={bad_query}"
            response = await http.get(target, headers=operator_auth)
            assert response.status_code < 500, response.text
            if "%00" in bad_query:
                assert_structured(response, 422)


async def test_deeply_nested_json_is_refused(
    edge_stack: Supervisor, http: httpx.AsyncClient, operator_auth: dict[str, str]
) -> None:
    brain, approvals = url(edge_stack, "brain"), url(edge_stack, "approvals")
    for depth in (100, 1_000, 10_000, 100_000):
        nested = "[" * depth + "]" * depth
        for target, body in [
            (f"{brain}/v1/policy/explain", f'{{"tool": "calculate", "args": {{"x": {nested}}}}}'),
            (f"{brain}/v1/runs", f'{{"prompt": {nested}}}'),
            (f"{approvals}/v1/approvals/apr_x/decision", f'{{"decision": {nested}}}'),
        ]:
            response = await http.post(target, content=body, headers=operator_auth | JSON)
            assert_structured(response)


async def test_bodies_over_the_limit_are_413(
    edge_stack: Supervisor, http: httpx.AsyncClient, operator_auth: dict[str, str]
) -> None:
    brain, approvals = url(edge_stack, "brain"), url(edge_stack, "approvals")
    over_default = b'{"tool": "' + b"a" * DEFAULT_BODY_LIMIT + b'"}'
    over_text = b'{"prompt": "' + b"a" * TEXT_BODY_LIMIT + b'"}'

    async def chunked(data: bytes) -> AsyncIterator[bytes]:
        for start in range(0, len(data), 64 * 1024):
            yield data[start : start + 64 * 1024]

    for target, data in [
        (f"{brain}/v1/policy/explain", over_default),
        (f"{brain}/v1/runs", over_text),
        (f"{brain}/v1/runs/run_x/messages", over_text),
        (f"{brain}/v1/skills", over_text),
        (f"{approvals}/v1/approvals/apr_x/decision", over_default),
        (f"{approvals}/v1/tokens", over_default),
    ]:
        for content in (data, chunked(data)):  # with Content-Length, then chunked
            response = await http.post(target, content=content, headers=operator_auth | JSON)
            assert assert_structured(response, 413)["code"] == "body_too_large"
    # Under the text limit but over the default: a long prompt is read, then judged.
    long_prompt = {"prompt": "b" * 300_000}
    response = await http.post(f"{brain}/v1/runs", json=long_prompt, headers=operator_auth)
    assert assert_structured(response, 422)["code"] == "invalid_request"


def rss_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} for {pid}")


async def stream_without_length(host: str, port: int, path: str, total: int) -> bytes:
    """POST up to `total` bytes chunked (no Content-Length), stopping as soon as the
    server answers; returns the raw response head and body."""
    reader, writer = await asyncio.open_connection(host, port)
    head = f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
    writer.write((head + "Transfer-Encoding: chunked\r\n\r\n").encode())
    answer = asyncio.create_task(reader.read(64 * 1024))
    piece = b"a" * (1024 * 1024)
    frame = f"{len(piece):x}\r\n".encode() + piece + b"\r\n"
    opening = b'{"prompt": "'
    writer.write(f"{len(opening):x}\r\n".encode() + opening + b"\r\n")
    sent = 0
    try:
        while sent < total and not answer.done():
            writer.write(frame)
            await asyncio.wait_for(writer.drain(), timeout=30)  # a hang detector
            sent += len(piece)
    except (ConnectionResetError, BrokenPipeError):
        pass
    data = await asyncio.wait_for(answer, timeout=30)
    while b"\r\n\r\n" not in data or not data.rstrip().endswith(b"}"):
        more = await asyncio.wait_for(reader.read(64 * 1024), timeout=30)
        if not more:
            break
        data += more
    writer.close()
    return data


async def test_a_300_mb_body_without_length_is_cut_and_memory_stays_bounded(
    edge_stack: Supervisor,
) -> None:
    brain = edge_stack.child("brain")
    assert brain.proc is not None
    before = rss_kib(brain.proc.pid, "VmRSS")
    raw = await stream_without_length("127.0.0.1", brain.port, "/v1/runs", 300 * 1024 * 1024)
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413"), head[:200]
    assert json.loads(body)["error"]["code"] == "body_too_large"
    peak = rss_kib(brain.proc.pid, "VmHWM")
    # The body is cut at 3 MiB; far below the 1 GB the unbounded read reached.
    assert peak - before < 150 * 1024, (before, peak)


@pytest.fixture
async def ebus(edge_stack: Supervisor) -> AsyncIterator[Bus]:
    bus = await observe(edge_stack)
    try:
        yield bus
    finally:
        await bus.close()


async def test_the_same_inputs_over_nats_get_error_replies(ebus: Bus) -> None:
    s = ebus.subjects
    # (subject, valid string fields, the field to spoil)
    cases = [
        (s.run_start.subject, {"prompt": "hi"}, "prompt"),
        (s.run_start.subject, {"prompt": "hi", "agent": "default"}, "agent"),
        (s.run_get.subject, {"run_id": "run_x"}, "run_id"),
        (s.run_message.subject, {"run_id": "run_x", "text": "t"}, "text"),
        (s.approval_decide.subject, {"approval_id": "a", "decision": "deny", "token": "t"}, "note"),
        (s.approval_list.subject, {"status": "pending"}, "run_id"),
        (s.output_put.subject, {"run_id": "r", "content": "c"}, "run_id"),
        (s.output_query.subject, {"ref": "out_x", "run_id": "r"}, "ref"),
    ]
    for subject, fields, field in cases:
        for bad in BAD_TEXT:
            raw = f'"x{bad}"'
            reply = json.loads(
                await ebus.request_raw(subject, body_with(fields, field, raw), timeout=10)
            )
            assert reply["error"]["code"] == "invalid_message", (subject, field, bad, reply)
    for bad in BAD_NUMBERS:
        body = body_with({"prompt": "hi"}, "max_cost", bad)
        reply = json.loads(await ebus.request_raw(s.run_start.subject, body, timeout=10))
        assert reply["error"]["code"] in {"not_json", "invalid_message"}, (bad, reply)
    for depth in (70, 100_000):
        nested = "[" * depth + "]" * depth
        body = body_with(CREATE, "args", f'{{"x": {nested}}}')
        reply = json.loads(await ebus.request_raw(s.approval_create.subject, body, timeout=10))
        assert reply["error"]["code"] in {"not_json", "invalid_message"}, (depth, reply)
    # NUL in stored *content* is bytes, not text: still accepted there.
    reply = json.loads(
        await ebus.request_raw(s.output_put.subject, b'{"run_id": "r", "content": "a\\u0000b"}')
    )
    assert "error" not in reply, reply
