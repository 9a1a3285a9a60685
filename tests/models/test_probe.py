"""The probe battery against a scripted provider that behaves like a model with known
strengths: which way of asking wins, the tier that follows, and what is recorded."""

from __future__ import annotations

from collections.abc import AsyncGenerator

from tether_common.messages.gateway import (
    ChunkEvent,
    DoneEvent,
    GenerateRequest,
    ModelEvent,
    ToolCallEvent,
)
from tether_common.messages.profiles import ModelProfile
from tether_gateway.probe import ProviderFor, probe
from tether_gateway.profiles import Profiles, ProfileStore
from tether_gateway.providers.base import Provider
from tether_gateway.settings import GatewaySettings


class ScriptedModel:
    """Answers the battery's questions; `good` says which ways it handles well."""

    name = "openai"

    def __init__(self, profile: ModelProfile, good: set[str]) -> None:
        way = "grammar" if profile.grammar else profile.tool_calling
        self.good = way in good
        self.asked: list[GenerateRequest] = []

    async def generate(self, request: GenerateRequest) -> AsyncGenerator[ModelEvent, None]:
        self.asked.append(request)
        last = request.messages[-1]
        if not self.good:
            yield ChunkEvent(text="The answer is 8080.")  # made up, as small models do
        elif last.role == "tool":
            yield ChunkEvent(text=f"It is {last.content}.")
        elif "Tokyo" in last.content:
            yield ToolCallEvent(id="c1", name="current_time", arguments={"timezone": "Asia/Tokyo"})
        elif "1234" in last.content:
            yield ToolCallEvent(id="c2", name="calculate", arguments={"expression": "1234 * 5678"})
        else:
            yield ChunkEvent(text="Paris.")
        yield DoneEvent()


def builder(good: set[str]) -> tuple[list[ScriptedModel], ProviderFor]:
    made: list[ScriptedModel] = []

    def build(profile: ModelProfile) -> Provider:
        made.append(ScriptedModel(profile, good))
        return made[-1]

    return made, build


async def test_a_model_good_at_native_calls_gets_native_and_the_full_prompt() -> None:
    profiles = Profiles(GatewaySettings(openai_model="m"), ProfileStore(None))
    made, build = builder({"native", "text", "grammar"})
    report = await probe(build, profiles, "openai", None)
    assert [m.good for m in made] == [True, True, True]  # asked natively, as text, in grammar
    found = report.profile
    assert (found.model, found.tool_calling, found.grammar) == ("m", "native", False)
    assert found.prompt_tier == "full"
    assert found.source == "probed"
    assert found.probed_at is not None
    assert found.checks == {
        "tool_call": True,
        "no_tool": True,
        "tool_result": True,
        "argument_fidelity": True,
        "json_validity": True,
    }
    assert len(report.checks) == 15
    assert all(len(m.asked) == 4 for m in made)


async def test_a_model_that_only_manages_under_a_grammar_gets_it() -> None:
    profiles = Profiles(GatewaySettings(openai_model="m"), ProfileStore(None))
    _, build = builder({"grammar"})
    found = (await probe(build, profiles, "openai", "m")).profile
    assert (found.tool_calling, found.grammar, found.prompt_tier) == ("text", True, "full")
    assert "native: 0/5" in found.notes


async def test_a_model_that_fails_everything_gets_the_compact_tier() -> None:
    profiles = Profiles(GatewaySettings(openai_model="m"), ProfileStore(None))
    _, build = builder(set())
    found = (await probe(build, profiles, "openai", "m")).profile
    assert found.prompt_tier == "compact"
    assert found.tool_calling == "native"  # a tie: the simplest way
    assert not any(found.checks.values())
