"""Observability as shipped, on one stack whose services export OTLP/HTTP to a small local
receiver that decodes the protobuf wire format: one run is one trace across brain,
gateway, tools-runner, approvals and output-store, and stays one across a park for an
approval and a takeover by another replica; requests that only read (health probes,
`/metrics`, console pages and polls) start no trace; and every series a dashboard panel
reads has data in the services' own `/metrics` after a workload."""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import uvicorn
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from shipped import observe
from tether_client import TetherClient
from tether_client.server.embedded import free_port
from tether_client.server.supervisor import Supervisor
from tether_common.messages.base import decode
from tether_common.messages.gateway import GenerateRequest
from tether_common.metrics import SPECS
from tether_common.testing import Turn, call, say, until, write_script

pytestmark = pytest.mark.e2e

TOKEN = "test-operator-token"  # tests/conftest.py OPERATOR_TOKEN: an admin token
CONFIRMED_TOOL = "convert_time"  # asks an operator on this stack (an organisation confirm)
CONVERT = {"time": "09:00", "from_timezone": "UTC", "to_timezone": "Asia/Tokyo"}
LEASE_S = 1.0
SERVICE_NAMES = ("brain", "gateway", "tools-runner", "approvals", "output-store")
READ_METHODS = ("GET", "HEAD", "OPTIONS")
SPANS_S = 20.0  # for spans to arrive: exporters send them in batches


@dataclass(frozen=True)
class SpanRecord:
    service: str
    name: str
    trace_id: str
    span_id: str
    parent_id: str
    attributes: dict[str, object]
    links: tuple[str, ...] = ()  # the linked spans' ids


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
                            tuple(link.span_id.hex() for link in span.links),
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
    # Uvicorn offers no event for this. No bound before: 30 s, for a loaded machine.
    await until(lambda: server.started, timeout=30, every=0.02, what="the trace receiver")
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
        "TETHER_BRAIN_GUARDRAILS": json.dumps({CONFIRMED_TOOL: "confirm"}),
        # A killed replica's run is taken over within a few seconds (the takeover test).
        "TETHER_BRAIN_LEASE_S": str(LEASE_S),
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

    def services() -> set[str]:
        if not any(s.name == "run" for s in receiver_server.spans):
            return set()
        return {s.service for s in run_spans()}

    await until(
        services,
        done=lambda found: {"tether-brain", "tether-gateway", "tether-tools-runner"} <= found,
        timeout=20,
        every=0.2,
        what="the run's spans from the brain, the gateway and the runner",
    )

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

    # The exporter sends in batches.
    await until(shell_spans, timeout=20, every=0.2, what="the runner's shell span")
    (span,) = shell_spans()
    assert span.attributes["process.exit.code"] == 3
    assert span.attributes["tether.shell.timed_out"] is False
    assert span.attributes["tether.tool.outcome"] == "ok"


# ---- the shipped observability: one workload, then what the traces and scrapes show ----

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy/grafana/dashboards/tether.json"
# What consoles, probes and scrapers ask all day, on every service (and a page that is not).
POLLS = ("/healthz", "/readyz", "/metrics", "/", "/console", "/v1/runs", "/v1/approvals", "/nope")
USAGE = {"kind": "usage", "input_tokens": 120, "output_tokens": 30, "cost": 0.002}
# Series a quiet workload leaves at 0 (they exist from each service's start): nothing is
# fenced, and the one approval asked was decided before the scrape.
ZERO_IS_DATA = frozenset({"tether_runs_fenced_total", "tether_approvals_pending"})


@dataclass(frozen=True)
class Workload:
    run_id: str
    trace_id: str
    scrapes: dict[str, str]  # service → its `/metrics` text after the run


async def poll_everything(stack: Supervisor) -> None:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with httpx.AsyncClient(timeout=10, headers=headers) as client:
        for name in SERVICE_NAMES:
            for path in POLLS:
                for method in READ_METHODS:
                    await client.request(method, stack.child(name).url + path)


async def refused_on_the_bus(stack: Supervisor) -> None:
    """A body the gateway cannot read: it answers a structured error and counts it."""
    bus = await observe(stack)
    try:
        reply = await bus.request_raw(bus.subjects.generate("rules").subject, b"\xff{", timeout=10)
    finally:
        await bus.close()
    assert json.loads(reply)["error"]["code"] == "not_json"


async def an_unanswered_hook(stack: Supervisor) -> None:
    """A run-end hook no service answers, failing open: what the hook failures panel
    counts (the run it hears of ends as it would without it)."""
    hook = {
        "name": "unanswered",
        "point": "on_run_end",
        "transport": "nats",
        "target": "nobody",
        "failure": "fail_open",
        "timeout_s": 1,
    }
    async with httpx.AsyncClient(timeout=10, headers={"Authorization": f"Bearer {TOKEN}"}) as c:
        (await c.post(f"{stack.child('brain').url}/v1/hooks", json=hook)).raise_for_status()


async def hook_failure_counted(stack: Supervisor) -> None:
    async with httpx.AsyncClient(timeout=10) as client:

        async def counted() -> bool:
            text = (await client.get(f"{stack.child('brain').url}/metrics")).text
            return "tether_hooks_failures_total{" in text

        await until(counted, timeout=SPANS_S, every=0.1, what="the unanswered hook's failure")


async def stopped_mid_generation(stack: Supervisor, scripts_dir: Path) -> None:
    """A run stopped while its model is still answering: the brain's notice cancels the
    generation, which the gateway counts (the errors panel's `cancelled` line)."""
    model = write_script(scripts_dir, [[{"pause_s": 120}, *say("never said")]])
    bus = await observe(stack)
    asked = await bus.subscribe_raw(bus.subjects.generate_all)
    try:
        async with TetherClient(stack.child("brain").url) as client:
            accepted = await client.start_run("wait", provider="scripted", model=model)
            while decode(GenerateRequest, (await asked.next_msg(timeout=60)).data).run_id != (
                accepted.run_id
            ):
                pass  # another run's turn
            await client.stop_run(accepted.run_id)
    finally:
        await asked.unsubscribe()
        await bus.close()
    async with httpx.AsyncClient(timeout=10) as http:

        async def counted() -> bool:
            text = (await http.get(f"{stack.child('gateway').url}/metrics")).text
            return "tether_bus_cancelled_total{" in text

        await until(counted, timeout=SPANS_S, every=0.1, what="the stopped generation's cancel")


async def parked_and_approved(stack: Supervisor, scripts_dir: Path) -> tuple[str, str]:
    """A run that refuses an unknown tool, offloads a large shell output, parks for an
    operator, is approved over the approvals API and ends; its id and trace id."""
    turns: list[Turn] = [
        [call("no_such_tool"), call("shell", command="seq 1 30000"), USAGE],
        [call(CONFIRMED_TOOL, **CONVERT), USAGE],
        [{"kind": "chunk", "text": "converted"}, USAGE],
    ]
    model = write_script(scripts_dir, turns)
    async with TetherClient(stack.child("brain").url) as client:
        accepted = await client.start_run("observe", provider="scripted", model=model, agent="ops")
        events = []
        async for event in client.events(accepted.run_id):
            events.append(event)
            if event.kind == "tool.approval_needed":
                break
        async with httpx.AsyncClient(timeout=10) as http:
            decided = await http.post(
                f"{stack.child('approvals').url}/v1/approvals/{event.data['approval_id']}/decision",
                json={"decision": "allow_once"},
                headers={"Authorization": f"Bearer {TOKEN}"},
            )
        assert decided.status_code == 200, decided.text
        events += [e async for e in client.events(accepted.run_id, after=events[-1].seq)]
    assert events[-1].kind == "run.end"
    assert events[-1].data["status"] == "completed", events[-1].data
    return accepted.run_id, str(events[0].data["trace_id"])


@pytest.fixture(scope="module")
async def workload(receiver_server: Receiver, stack: Supervisor, scripts_dir: Path) -> Workload:
    await poll_everything(stack)
    await refused_on_the_bus(stack)
    await an_unanswered_hook(stack)
    run_id, trace_id = await parked_and_approved(stack, scripts_dir)
    await hook_failure_counted(stack)
    await stopped_mid_generation(stack, scripts_dir)

    def whole() -> bool:
        services = {s.service for s in receiver_server.spans if s.trace_id == trace_id}
        return {f"tether-{name}" for name in SERVICE_NAMES} <= services

    # Each service exports in order of ending: its spans of the run, which came after the
    # polls, arriving means its polls' spans (were there any) have arrived too.
    await until(whole, timeout=SPANS_S, every=0.1, what="the run's trace in every service")
    async with httpx.AsyncClient(timeout=10) as client:
        scrapes = {
            name: (await client.get(f"{stack.child(name).url}/metrics")).text
            for name in SERVICE_NAMES
        }
    return Workload(run_id, trace_id, scrapes)


def segments(spans: list[SpanRecord], run_id: str) -> list[SpanRecord]:
    return [s for s in spans if s.name == "run" and s.attributes.get("tether.run_id") == run_id]


def root_of(span: SpanRecord, by_id: dict[str, SpanRecord]) -> SpanRecord:
    while span.parent_id:
        span = by_id[span.parent_id]
    return span


async def test_a_run_parked_for_an_approval_stays_one_trace(
    workload: Workload, receiver_server: Receiver
) -> None:
    spans = receiver_server.spans
    await until(
        lambda: len(segments(spans, workload.run_id)) >= 2,
        timeout=SPANS_S,
        every=0.1,
        what="the run's two segments",
    )
    started, resumed = segments(spans, workload.run_id)[:2]
    by_id = {s.span_id: s for s in spans}
    # Both segments hang from the request that started the run, in its trace.
    assert started.trace_id == resumed.trace_id == workload.trace_id
    assert started.parent_id == resumed.parent_id
    assert root_of(started, by_id).name == "POST /v1/runs"
    # The resumption links to what caused it: the operator's decision, in its own trace.
    (link,) = resumed.links
    assert by_id[link].trace_id != workload.trace_id

    def in_trace() -> list[SpanRecord]:
        return [s for s in spans if s.trace_id == workload.trace_id]

    def generations() -> list[SpanRecord]:
        return [s for s in in_trace() if s.service == "tether-gateway" and "generate" in s.name]

    assert any(s.name == "approval.wait" for s in in_trace())
    # Before the park, the parked call's turn, after it; the gateway exports in batches,
    # so its last span may come after the fixture saw every service in the trace.
    await until(
        generations,
        done=lambda found: len(found) >= 3,
        timeout=SPANS_S,
        every=0.1,
        what="three generations",
    )
    assert len(generations()) == 3, generations()


async def test_reads_start_no_trace(workload: Workload, receiver_server: Receiver) -> None:
    roots = [s for s in receiver_server.spans if not s.parent_id]
    assert any(s.name == "POST /v1/runs" for s in roots)  # server spans are exported
    reads = sorted({f"{s.service} {s.name}" for s in roots if s.name.split()[0] in READ_METHODS})
    assert not reads, f"reads that started a trace: {reads}"


async def test_a_sub_agent_and_its_parents_resumption_stay_in_the_parents_trace(
    receiver_server: Receiver, stack: Supervisor, scripts_dir: Path
) -> None:
    turns: list[Turn] = [[call("run_agent", task="clock", tools=["current_time"])], say("back")]
    helpers: dict[str, list[Turn]] = {"clock": [[call("current_time")], say("noon")]}
    model = write_script(scripts_dir, turns, helpers)
    async with TetherClient(stack.child("brain").url) as client:
        accepted = await client.start_run("delegate", provider="scripted", model=model)
        events = [e async for e in client.events(accepted.run_id)]
    assert events[-1].data["status"] == "completed"
    (child_id,) = [e.data["child_run_id"] for e in events if e.kind == "agent.start"]
    spans = receiver_server.spans
    await until(
        lambda: len(segments(spans, accepted.run_id)) >= 2 and bool(segments(spans, child_id)),
        timeout=SPANS_S,
        every=0.1,
        what="the parent's two segments and the child's",
    )
    parent_runs, child_runs = segments(spans, accepted.run_id), segments(spans, child_id)
    by_id = {s.span_id: s for s in spans}
    trace_id = str(events[0].data["trace_id"])
    assert {s.trace_id for s in parent_runs + child_runs} == {trace_id}
    for child in child_runs:
        assert by_id[child.parent_id].name == "run_agent"  # the parent's tool call


async def test_a_run_taken_over_by_another_replica_stays_one_trace(
    receiver_server: Receiver, stack: Supervisor, scripts_dir: Path
) -> None:
    doomed = stack.add_replica("brain")
    await stack.start_child(doomed)
    await stack.wait_ready(children=[doomed])
    slow_second_turn: list[Turn] = [
        [call("current_time", timezone="Asia/Tokyo")],
        [{"pause_s": 2.0}, {"kind": "chunk", "text": "done after the crash"}],
    ]
    model = write_script(scripts_dir, slow_second_turn)
    async with TetherClient(doomed.url) as client:
        accepted = await client.start_run("time in Tokyo", provider="scripted", model=model)
        before = []
        async for event in client.events(accepted.run_id):
            before.append(event)
            if event.kind == "tool.result":
                break
    trace_id = str(before[0].data["trace_id"])
    spans = receiver_server.spans
    # The doomed replica's first step reached the receiver; its second is under way.
    await until(
        lambda: any(s.trace_id == trace_id and s.name == "step" for s in spans),
        timeout=SPANS_S,
        every=0.1,
        what="the doomed replica's first step",
    )
    assert doomed.proc is not None
    doomed.proc.kill()

    async with TetherClient(stack.child("brain").url) as client:
        after = [e async for e in client.events(accepted.run_id, after=before[-1].seq)]
    assert after[-1].data["status"] == "completed"
    await until(
        lambda: segments(spans, accepted.run_id),
        timeout=SPANS_S,
        every=0.1,
        what="the taken-over run's segment",
    )
    (taken_over,) = segments(spans, accepted.run_id)  # the doomed one's never ended
    by_id = {s.span_id: s for s in spans}
    assert taken_over.trace_id == trace_id
    assert root_of(taken_over, by_id).name == "POST /v1/runs"  # on the doomed replica
    steps = [s for s in spans if s.trace_id == trace_id and s.name == "step"]
    assert {s.parent_id == taken_over.span_id for s in steps} == {True, False}  # both replicas


def panel_targets() -> list[tuple[str, str]]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [(p["title"], t["expr"]) for p in dashboard["panels"] for t in p["targets"]]


def scraped(workload: Workload) -> list[Sample]:
    return [
        sample
        for text in workload.scrapes.values()
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    ]


@pytest.mark.parametrize(("title", "expr"), panel_targets(), ids=lambda v: str(v)[:60])
def test_every_dashboard_panel_has_data_in_the_services_scrapes(
    workload: Workload, title: str, expr: str
) -> None:
    """Each series a panel's query reads is in some service's `/metrics`, carrying the
    labels the query groups by and matches on, and (but for `ZERO_IS_DATA`) not zero."""
    samples = scraped(workload)
    grouped = {
        label.strip()
        for labels in re.findall(r"\bby \(([^)]*)\)", expr)
        for label in labels.split(",")
    }
    for name, matchers in re.findall(r"\b(tether_\w+)(\{[^}]*\})?", expr):
        wanted = dict(re.findall(r'(\w+)="([^"]*)"', matchers))
        found = [
            s
            for s in samples
            if s.name == name
            and grouped <= s.labels.keys()
            and all(s.labels.get(k) == v for k, v in wanted.items())
        ]
        assert found, f"{title}: no {name}{matchers} with labels {sorted(grouped)}"
        if name not in ZERO_IS_DATA:
            assert any(s.value > 0 for s in found), f"{title}: {name} is all zero"


@pytest.mark.parametrize("service", SERVICE_NAMES)
def test_metrics_carry_no_run_or_tenant_data(workload: Workload, service: str) -> None:
    """Every label of our series is one its instrument's spec allows (no id, tenant or
    argument), and nothing of the run shows."""
    text = workload.scrapes[service]
    assert workload.run_id not in text
    assert workload.trace_id not in text
    allowed = {series: set(spec.attributes) for spec in SPECS for series in spec.prometheus_series}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in allowed:
                ours = {k for k in sample.labels if not k.startswith("otel_scope_") and k != "le"}
                assert ours <= allowed[sample.name], (sample.name, sample.labels)
