"""The trace mechanisms on a tracer provider of the test's own: requests that only read
start no trace (`QuietReads`), and a run's stored `traceparent` makes a later segment of
its work a child of the span that started it, in the same trace, linked to its cause."""

from __future__ import annotations

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import DEFAULT_ON
from opentelemetry.trace import SpanKind

from tether_common.traces import QuietReads, links_to_current, parent_context, traceparent


@pytest.fixture
def exported() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def tracer(exported: InMemorySpanExporter) -> trace.Tracer:
    provider = TracerProvider(sampler=QuietReads(DEFAULT_ON))
    provider.add_span_processor(SimpleSpanProcessor(exported))
    return provider.get_tracer("test")


def names(exported: InMemorySpanExporter) -> list[str]:
    return [span.name for span in exported.get_finished_spans()]


def request(tracer: trace.Tracer, method: str) -> None:
    """A server span as FastAPI starts one, with a bus message sent beneath it."""
    attributes = {"http.request.method": method, "url.path": "/v1/anything"}
    with (
        tracer.start_as_current_span(method, kind=SpanKind.SERVER, attributes=attributes),
        tracer.start_as_current_span("send tether.runs.get", kind=SpanKind.CLIENT),
    ):
        pass


@pytest.mark.parametrize("method", ["GET", "HEAD", "OPTIONS", "get"])
def test_a_read_starts_no_trace_and_nothing_beneath_it_is_kept(
    tracer: trace.Tracer, exported: InMemorySpanExporter, method: str
) -> None:
    request(tracer, method)
    assert names(exported) == []


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH", "DELETE"])
def test_a_write_is_traced(
    tracer: trace.Tracer, exported: InMemorySpanExporter, method: str
) -> None:
    request(tracer, method)
    assert names(exported) == ["send tether.runs.get", method]


@pytest.mark.parametrize("kind", [SpanKind.INTERNAL, SpanKind.CLIENT, SpanKind.CONSUMER])
def test_only_a_server_span_is_a_read(
    tracer: trace.Tracer, exported: InMemorySpanExporter, kind: SpanKind
) -> None:
    with tracer.start_as_current_span("x", kind=kind, attributes={"http.request.method": "GET"}):
        pass
    assert names(exported) == ["x"]


@pytest.mark.parametrize(("flags", "kept"), [("01", True), ("00", False)])
def test_a_read_in_a_callers_trace_follows_the_callers_choice(
    tracer: trace.Tracer, exported: InMemorySpanExporter, flags: str, kept: bool
) -> None:
    """A caller who sends a sampled `traceparent` gets its read traced, in its trace."""
    caller = parent_context(f"00-{'ab' * 16}-{'cd' * 8}-{flags}")
    assert caller is not None
    attributes = {"http.request.method": "GET"}
    with tracer.start_as_current_span(
        "GET", context=caller, kind=SpanKind.SERVER, attributes=attributes
    ) as span:
        assert span.get_span_context().trace_id == int("ab" * 16, 16)
    assert names(exported) == (["GET"] if kept else [])


def test_a_later_segment_is_a_child_of_the_stored_span_and_links_its_cause(
    tracer: trace.Tracer, exported: InMemorySpanExporter
) -> None:
    with tracer.start_as_current_span("POST /v1/runs", kind=SpanKind.SERVER) as started:
        stored = traceparent()
    assert stored is not None
    # Later, elsewhere: the segment runs under the decision's span, in another trace.
    with tracer.start_as_current_span("process decided", kind=SpanKind.SERVER) as decision:
        parent = parent_context(stored)
        with tracer.start_as_current_span("run", context=parent, links=links_to_current(parent)):
            pass
    spans: dict[str, ReadableSpan] = {s.name: s for s in exported.get_finished_spans()}
    run, first = spans["run"], started.get_span_context()
    assert run.context is not None
    assert run.parent is not None
    assert run.context.trace_id == first.trace_id
    assert run.parent.span_id == first.span_id
    assert [link.context for link in run.links] == [decision.get_span_context()]


def test_a_segment_started_in_its_own_trace_needs_no_link(tracer: trace.Tracer) -> None:
    with tracer.start_as_current_span("POST /v1/runs"):
        parent = parent_context(traceparent())
        assert parent is not None
        assert links_to_current(parent) == []


@pytest.mark.parametrize(
    "stored",
    [None, "", "garbage", f"00-{'0' * 32}-{'cd' * 8}-01", f"00-{'ab' * 16}-{'0' * 16}-01"],
)
def test_a_missing_or_broken_stored_parent_means_the_current_context(stored: str | None) -> None:
    assert parent_context(stored) is None
    assert links_to_current(parent_context(stored)) == []
