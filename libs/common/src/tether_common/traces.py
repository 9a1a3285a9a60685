"""What makes a trace mean one piece of work: reads start no trace of their own
(`QuietReads`), and a run's every segment of work (its start, each resumption after an
approval or its helpers, each takeover by another replica) is a child of one stored span
context (`traceparent`, `parent_context`), so the trace view shows each run as one tree."""

from __future__ import annotations

from collections.abc import Sequence

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace.sampling import Decision, Sampler, SamplingResult
from opentelemetry.trace import Link, SpanKind, TraceState
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.util.types import Attributes

# HTTP methods that only read: health probes, `/metrics` scrapes, console pages and the
# consoles' polls. A request with one starts no trace (its caller may still send a
# sampled `traceparent`, and is then traced as part of the caller's trace).
READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})

_W3C = TraceContextTextMapPropagator()
_TRACEPARENT = "traceparent"

tracer = trace.get_tracer(__name__)


class QuietReads(Sampler):
    """Drops the root span of an HTTP request that only reads (`READ_METHODS`): the
    request's own spans and every bus message it sends are then not sampled, so a poll
    costs no trace. Every other decision is the wrapped sampler's (the SDK's default:
    `OTEL_TRACES_SAMPLER`, else parent-based always-on)."""

    def __init__(self, inner: Sampler) -> None:
        self.inner = inner

    def should_sample(
        self,
        parent_context: Context | None,
        trace_id: int,
        name: str,
        kind: SpanKind | None = None,
        attributes: Attributes = None,
        links: Sequence[Link] | None = None,
        trace_state: TraceState | None = None,
    ) -> SamplingResult:
        if kind is SpanKind.SERVER and _reads(attributes) and not _has_parent(parent_context):
            return SamplingResult(Decision.DROP)
        return self.inner.should_sample(
            parent_context, trace_id, name, kind, attributes, links, trace_state
        )

    def get_description(self) -> str:
        return f"QuietReads{{{self.inner.get_description()}}}"


def _reads(attributes: Attributes) -> bool:
    method = (attributes or {}).get("http.request.method")
    return isinstance(method, str) and method.upper() in READ_METHODS


def _has_parent(context: Context | None) -> bool:
    return trace.get_current_span(context).get_span_context().is_valid


def traceparent() -> str | None:
    """The W3C `traceparent` of the current span: what a new run stores as the parent of
    its every segment (the request that started it, or its parent run's `run_agent`
    span). With no span current, a `run.start` span is made to be that parent. None only
    where no tracer provider is installed (spans have no ids at all)."""
    if not trace.get_current_span().get_span_context().is_valid:
        span = tracer.start_span("run.start", kind=SpanKind.INTERNAL)
        span.end()
        return _encoded(trace.set_span_in_context(span))
    return _encoded(None)


def _encoded(context: Context | None) -> str | None:
    carrier: dict[str, str] = {}
    _W3C.inject(carrier, context=context)
    return carrier.get(_TRACEPARENT)


def parent_context(stored: str | None) -> Context | None:
    """The context a segment of a run starts its spans in: its stored `traceparent`, or
    None (the current context) for a run stored without one or with one that does not
    parse."""
    if not stored:
        return None
    context = _W3C.extract({_TRACEPARENT: stored})
    return context if _has_parent(context) else None


def links_to_current(parent: Context | None) -> list[Link]:
    """A link to the current span when a segment starts in another trace than the one it
    is caused by (the operator's decision, a sweep): the trace view can follow it."""
    if parent is None:
        return []
    here = trace.get_current_span().get_span_context()
    there = trace.get_current_span(parent).get_span_context()
    return [Link(here)] if here.is_valid and here.trace_id != there.trace_id else []
