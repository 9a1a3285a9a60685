"""The gateway records tokens and cost by provider/model/direction and one latency per
generation, through the bus handler every provider is served by."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tether_common.messages.gateway import ChatMessage, GenerateRequest
from tether_common.testing import say, write_script
from tether_gateway.app import handler
from tether_gateway.histories import HistoryCache
from tether_gateway.profiles import Profiles, ProfileStore
from tether_gateway.providers import RulesPlanner, ScriptedProvider
from tether_gateway.settings import GatewaySettings

Sum = Callable[..., float]
Histogram = Callable[..., tuple[int, float]]
# No profile files: every model is asked as its provider's default says.
PROFILES = Profiles(GatewaySettings(), ProfileStore(None))
HISTORIES = HistoryCache(2**20)


def request(provider: str, model: str | None) -> GenerateRequest:
    return GenerateRequest(
        run_id="r_metrics",
        provider=provider,
        model=model,
        messages=[ChatMessage(role="user", content="hello there")],
    )


async def test_usage_and_cost_are_counted_by_provider_model_and_direction(
    metric_sum: Sum, metric_histogram: Histogram, tmp_path: Path
) -> None:
    usage = {"kind": "usage", "input_tokens": 120, "output_tokens": 7, "cost": 0.25}
    model = write_script(tmp_path, [[*say("hi"), usage, {"kind": "done"}]])
    labels = {"provider": "scripted", "model": model}

    kinds = [
        m.event.kind
        async for m in handler(ScriptedProvider(tmp_path), PROFILES, HISTORIES)(
            request("scripted", model)
        )
    ]

    assert kinds == ["chunk", "usage", "done"]
    assert metric_sum("tether.model.tokens", **labels, direction="input") == 120
    assert metric_sum("tether.model.tokens", **labels, direction="output") == 7
    assert metric_sum("tether.model.cost", **labels) == pytest.approx(0.25)
    count, total = metric_histogram("tether.model.duration", **labels)
    assert count == 1
    assert total >= 0


async def test_each_generation_adds_one_latency_and_its_tokens(
    metric_sum: Sum, metric_histogram: Histogram, tmp_path: Path
) -> None:
    usage = {"kind": "usage", "input_tokens": 10, "output_tokens": 2}
    model = write_script(tmp_path, [[{"pause_s": 0.05}, *say("a"), usage]])
    labels = {"provider": "scripted", "model": model}
    serve = handler(ScriptedProvider(tmp_path), PROFILES, HISTORIES)

    for _ in range(3):
        _ = [m async for m in serve(request("scripted", model))]

    assert metric_sum("tether.model.tokens", **labels, direction="input") == 30
    assert metric_sum("tether.model.cost", **labels) == 0  # no price: no cost series
    count, total = metric_histogram("tether.model.duration", **labels)
    assert count == 3
    assert total >= 0.15


async def test_a_generation_without_a_model_name_is_labelled_default(
    metric_sum: Sum, metric_histogram: Histogram
) -> None:
    labels = {"provider": "rules", "model": "default"}
    before = metric_histogram("tether.model.duration", **labels)[0]
    input_before = metric_sum("tether.model.tokens", **labels, direction="input")

    _ = [m async for m in handler(RulesPlanner(), PROFILES, HISTORIES)(request("rules", None))]

    assert metric_histogram("tether.model.duration", **labels)[0] == before + 1
    assert metric_sum("tether.model.tokens", **labels, direction="input") > input_before


async def test_a_generation_closed_early_still_records_its_latency(
    metric_sum: Sum, metric_histogram: Histogram, tmp_path: Path
) -> None:
    model = write_script(tmp_path, [[*say("first"), {"pause_s": 5}, *say("never")]])
    labels = {"provider": "scripted", "model": model}
    stream = handler(ScriptedProvider(tmp_path), PROFILES, HISTORIES)(request("scripted", model))

    first = await anext(stream)
    await stream.aclose()  # type: ignore[attr-defined]  # the brain cancels a stopped run

    assert first.event.kind == "chunk"
    assert metric_histogram("tether.model.duration", **labels)[0] == 1
    assert metric_sum("tether.model.tokens", **labels, direction="input") == 0
