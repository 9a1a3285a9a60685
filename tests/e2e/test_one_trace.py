"""One run is one trace across brain, gateway and tools-runner: the services export
OTLP/HTTP to a small local receiver that decodes the protobuf wire format."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import uvicorn
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tether_client import TetherClient
from tether_common.embedded import free_port
from tether_common.supervisor import Supervisor
from tether_common.testing import Turn, call, say, write_script

pytestmark = pytest.mark.e2e


@dataclass(frozen=True)
class SpanRecord:
    service: str
    name: str
    trace_id: str
    span_id: str
    parent_id: str
    attributes: dict[str, object]


class Receiver:
    def __init__(self) -> None:
        self.spans: list[SpanRecord] = []
        self.port = free_port()

    async def traces(self, request: Request) -> Response:
        export = ExportTraceServiceRequest.FromString(await request.body())
        for resource_spans in export.resource_spans:
            attrs = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
            for scope in resource_spans.scope_spans:
                for span in scope.spans:
                    self.spans.append(
                        SpanRecord(
                            attrs.get("service.name", "?"),
                            span.name,
                            span.trace_id.hex(),
                            span.span_id.hex(),
                            span.parent_span_id.hex(),
                            {a.key: _value(a.value) for a in span.attributes},
                        )
                    )
        return Response(
            ExportTraceServiceResponse().SerializeToString(),
            media_type="application/x-protobuf",
        )


def _value(value: AnyValue) -> object:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    return getattr(value, kind) if kind else None


@pytest.fixture(scope="module")
def receiver() -> Receiver:
    return Receiver()


@pytest.fixture(scope="module")
async def receiver_server(receiver: Receiver) -> AsyncIterator[Receiver]:
    app = Starlette(routes=[Route("/v1/traces", receiver.traces, methods=["POST"])])
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=receiver.port, log_config=None, lifespan="off")
    )
    task = asyncio.create_task(server.serve())
    while not server.started:  # uvicorn offers no event for this  # noqa: ASYNC110
        await asyncio.sleep(0.02)
    try:
        yield receiver
    finally:
        server.should_exit = True
        await task


@pytest.fixture(scope="module")
def stack_extra_env(receiver: Receiver) -> dict[str, str]:
    return {
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{receiver.port}",
        "OTEL_BSP_SCHEDULE_DELAY": "100",
        "TETHER_BRAIN_AGENTS": json.dumps({"ops": {"grants": ["shell#noapproval"]}}),
    }


async def test_a_run_is_one_trace_across_services(
    receiver_server: Receiver, stack: Supervisor
) -> None:
    async with TetherClient(stack.child("brain").url) as client:
        accepted = await client.start_run("what time is it in Paris?")
        async for _ in client.events(accepted.run_id):
            pass

    def run_spans() -> list[SpanRecord]:
        runs = [s for s in receiver_server.spans if s.name == "run"]
        return [s for s in receiver_server.spans if s.trace_id == runs[-1].trace_id]

    deadline = time.monotonic() + 20
    services: set[str] = set()
    while time.monotonic() < deadline:
        await asyncio.sleep(0.2)
        if any(s.name == "run" for s in receiver_server.spans):
            services = {s.service for s in run_spans()}
            if {"tether-brain", "tether-gateway", "tether-tools-runner"} <= services:
                break
    assert {"tether-brain", "tether-gateway", "tether-tools-runner"} <= services

    spans = run_spans()
    by_id = {s.span_id: s for s in spans}
    # The trace starts at the HTTP request that started the run (FastAPI's server span).
    root = next(s for s in spans if not s.parent_id)
    assert root.service == "tether-brain"
    assert root.name.startswith("POST")
    run = next(s for s in spans if s.name == "run")
    for span in spans:
        if span is root:
            continue
        assert span.parent_id in by_id, f"{span.service}/{span.name} has a parent outside the trace"
        node = span
        while node.parent_id:
            node = by_id[node.parent_id]
        assert node is root
    gateway = next(s for s in spans if s.service == "tether-gateway" and "generate" in s.name)
    assert by_id[gateway.parent_id].service == "tether-brain"
    assert gateway.attributes["gen_ai.system"] == "rules"
    assert "gen_ai.usage.input_tokens" in gateway.attributes
    assert "generate" in by_id[gateway.parent_id].name
    runner = next(
        s for s in spans if s.service == "tether-tools-runner" and "tools.execute" in s.name
    )
    assert "tools.execute" in by_id[runner.parent_id].name
    assert runner.attributes["tether.tool.name"] == "current_time"
    assert runner.attributes["tether.tool.outcome"] == "ok"
    gates = [s for s in spans if s.name.startswith("gate ")]
    assert gates
    assert gates[0].attributes["tether.gate.decision"] == "run"
    steps = [s for s in spans if s.name == "step"]
    assert len(steps) == 2
    assert all(s.parent_id == run.span_id for s in steps)


async def test_the_shell_span_carries_the_exit_code(
    receiver_server: Receiver, stack: Supervisor, scripts_dir: Path
) -> None:
    marker = uuid.uuid4().hex
    turns: list[Turn] = [[call("shell", command=f"echo {marker}; exit 3")], say("it failed")]
    model = write_script(scripts_dir, turns)
    async with TetherClient(stack.child("brain").url) as client:
        accepted = await client.start_run("run it", provider="scripted", model=model, agent="ops")
        results = [e.data async for e in client.events(accepted.run_id) if e.kind == "tool.result"]
    assert results[0]["content"].startswith("exit code 3")

    def shell_spans() -> list[SpanRecord]:
        return [
            s
            for s in receiver_server.spans
            if s.service == "tether-tools-runner"
            and s.attributes.get("tether.tool.name") == "shell"
        ]

    deadline = time.monotonic() + 20
    while not shell_spans() and time.monotonic() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.2)  # the exporter sends in batches
    (span,) = shell_spans()
    assert span.attributes["process.exit.code"] == 3
    assert span.attributes["tether.shell.timed_out"] is False
    assert span.attributes["tether.tool.outcome"] == "ok"
