"""Model usage as metrics (tokens and cost by provider/model, one latency per generation)
and as GenAI semantic-convention attributes on the generation's span."""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator

from opentelemetry import trace

from tether_common.messages.gateway import ModelEvent
from tether_common.metrics import model_cost, model_duration, model_tokens


async def metered(
    provider: str, model: str, events: AsyncGenerator[ModelEvent, None]
) -> AsyncGenerator[ModelEvent, None]:
    """`events` unchanged; each `usage` event is counted as it passes, and the generation's
    wall time is recorded once when the stream ends, fails or is closed (a stopped run's
    cut-short generation still took that long)."""
    labels = {"provider": provider, "model": model}
    span = trace.get_current_span()  # the bus's span for this request
    span.set_attribute("gen_ai.system", provider)
    span.set_attribute("gen_ai.request.model", model)
    started = time.perf_counter()
    try:
        async for event in events:
            if event.kind == "usage":
                model_tokens.add(event.input_tokens, labels | {"direction": "input"})
                model_tokens.add(event.output_tokens, labels | {"direction": "output"})
                span.set_attribute("gen_ai.usage.input_tokens", event.input_tokens)
                span.set_attribute("gen_ai.usage.output_tokens", event.output_tokens)
                if event.cost:
                    model_cost.add(event.cost, labels)
            elif event.kind == "done":
                span.set_attribute("gen_ai.response.finish_reasons", [event.finish_reason])
            elif event.kind == "error":
                span.set_attribute("error.type", event.code)
            yield event
    finally:
        await events.aclose()
        model_duration.record(time.perf_counter() - started, labels)
