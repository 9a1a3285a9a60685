"""`ModelClient` against the gateway's real bus handler (`tether_gateway.app.handler`, the
`scripted` provider) on a real NATS server: after the first step only the new messages
go, and the provider still sees every request whole; a gateway that lost what it kept
(a restart) refuses the delta with `prefix_unknown` and gets the whole request; a gateway
from before deltas (which refuses their fields) gets the plain request."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from pydantic import Field

from tether_brain.clients.model import ModelClient
from tether_brain.context.wire import carried
from tether_brain.state.run import Limits, RunState
from tether_common.bus import Bus
from tether_common.messages.base import WireModel
from tether_common.messages.gateway import (
    CallRecord,
    ChatMessage,
    GenerateRequest,
    ModelEvent,
    ModelEventMessage,
    OfferedToolSpec,
)
from tether_common.subjects import Route
from tether_common.testing import say, write_script
from tether_gateway.app import handler
from tether_gateway.histories import HistoryCache
from tether_gateway.profiles import Profiles, ProfileStore
from tether_gateway.providers import ScriptedProvider
from tether_gateway.settings import GatewaySettings

STEPS = 8
RESTART_AT = 4


class Recording:
    """The `scripted` provider, keeping each request it is asked (what a model sees)."""

    name = "scripted"

    def __init__(self, scripts: Path) -> None:
        self.inner = ScriptedProvider(scripts)
        self.asked: list[GenerateRequest] = []

    async def generate(self, request: GenerateRequest) -> AsyncGenerator[ModelEvent, None]:
        self.asked.append(request)
        async for event in self.inner.generate(request):
            yield event


class EarlierRequest(WireModel):
    """The request as a gateway from before deltas read it: no `prefix_digest`, no `keep`
    (and, as every wire model, unknown fields refused)."""

    run_id: str
    provider: str
    model: str | None = None
    messages: list[ChatMessage]
    tools: list[OfferedToolSpec] = Field(default_factory=list)
    effort: Literal["low", "normal"] = "normal"
    max_output_tokens: int | None = Field(default=None, ge=1)
    tool_choice: Literal["auto", "required"] = "auto"


def state() -> RunState:
    now = datetime.now(UTC)
    run = RunState("run_deltas", "add them", "scripted", None, Limits(50), now, now)
    run.add_message(ChatMessage(role="user", content="add them ✓"))
    return run


def grow(run: RunState, i: int) -> None:
    call = CallRecord(id=f"c{i}", name="calculate", arguments={"expression": f"{i} + 1"})
    run.add_message(ChatMessage(role="assistant", tool_calls=[call]))
    run.add_message(ChatMessage(role="tool", content=str(i + 1), tool_call_id=f"c{i}"))


def request(run: RunState, model: str, step: int) -> GenerateRequest:
    messages = [
        ChatMessage(role="system", content="rules"),
        *run.messages,
        ChatMessage(role="system", content=f"Budget left: {STEPS - step} steps."),
    ]
    asked = GenerateRequest(run_id=run.run_id, provider="scripted", model=model, messages=messages)
    return carried(asked, run)


async def serve(bus: Bus, provider: Recording, cache: HistoryCache) -> list[GenerateRequest]:
    """The gateway's handler on `bus`; the requests it is sent, as they came."""
    profiles = Profiles(GatewaySettings(), ProfileStore(None))
    generate = handler(provider, profiles, cache)
    came: list[GenerateRequest] = []

    def observed(request: GenerateRequest) -> AsyncIterator[ModelEventMessage]:
        came.append(request)
        return generate(request)

    await bus.serve_stream(bus.subjects.generate("scripted"), observed)
    return came


async def test_steps_go_as_deltas_and_a_restarted_gateway_gets_them_whole(
    bus: Bus, tmp_path: Path
) -> None:
    model = write_script(tmp_path, [say(f"turn {i}") for i in range(STEPS)])
    provider, cache = Recording(tmp_path), HistoryCache(2**24)
    came = await serve(bus, provider, cache)
    client, run = ModelClient(bus, timeout_s=10), state()
    built: list[GenerateRequest] = []
    for step in range(STEPS):
        if step == RESTART_AT:  # what this replica kept is gone, as after a restart
            cache.drop(next(iter(cache._kept)))
        built.append(request(run, model, step))
        turn = await client.generate(built[-1])
        assert turn.error is None, turn.error
        assert turn.text == f"turn {step}"
        grow(run, step)
    # The provider saw every request whole, exactly as built.
    assert [r.messages for r in provider.asked] == [r.messages for r in built]
    # The gateway got the first whole, then only each step's call, result and note; after
    # the restart one delta it refused, and that step whole.
    whole = [i for i, r in enumerate(came) if r.prefix_digest is None]
    assert whole == [0, RESTART_AT + 1]
    assert len(came) == STEPS + 1
    assert all(len(r.messages) == 3 for r in came if r.prefix_digest is not None)
    assert len(cache) == 1


async def test_a_gateway_from_before_deltas_gets_the_plain_request(
    bus: Bus, tmp_path: Path
) -> None:
    model = write_script(tmp_path, [say(f"turn {i}") for i in range(3)])
    provider = Recording(tmp_path)
    route = bus.subjects.generate("scripted")
    earlier = Route(route.subject, EarlierRequest, ModelEventMessage, route.queue, streamed=True)

    async def answer(asked: EarlierRequest) -> AsyncIterator[ModelEventMessage]:
        whole = GenerateRequest.model_validate(asked.model_dump())
        async for event in provider.generate(whole):
            yield ModelEventMessage(event=event)

    await bus.serve_stream(earlier, answer)
    client, run = ModelClient(bus, timeout_s=10), state()
    for step in range(3):
        turn = await client.generate(request(run, model, step))
        assert turn.error is None, turn.error
        assert turn.text == f"turn {step}"
        grow(run, step)
    # Each step whole (3, 5, 7 messages): refused with `keep`, then asked as before.
    assert [len(r.messages) for r in provider.asked] == [3, 5, 7]
