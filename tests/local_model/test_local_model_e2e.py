"""A run on a real language model end to end: brain → gateway (`local`: the openai adapter
with the text protocol) → llama.cpp serving SmolLM2-135M → tools-runner → brain. What a
135M model answers is not asserted; that the run ends and its events are whole is."""

from __future__ import annotations

import json

import pytest

from tether_client import TetherClient
from tether_client.local_model import DEFAULT_ALIAS, LlamaServer
from tether_client.server.supervisor import Supervisor
from tether_common.messages.runs import RunEvent
from tether_common.testing import event_data

pytestmark = pytest.mark.e2e

END_STATES = ("completed", "stopped")


@pytest.fixture(scope="module")
def stack_extra_env(llama: LlamaServer, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    no_skills = tmp_path_factory.mktemp("no-skills")
    return {
        "TETHER_GATEWAY_LOCAL_BASE_URL": llama.base_url,
        "TETHER_GATEWAY_LOCAL_MODEL": DEFAULT_ALIAS,
        "TETHER_GATEWAY_LOCAL_MAX_OUTPUT_TOKENS": "64",
        # No skills index: a shorter system prompt for a model that reads it on two cores.
        "TETHER_BRAIN_SKILL_FOLDERS": json.dumps([str(no_skills)]),
    }


def assert_events_are_whole(events: list[RunEvent], status: str) -> None:
    assert events[0].kind == "run.start"
    assert events[0].data["provider"] == "local"
    assert events[-1].kind == "run.end"
    assert events[-1].data["status"] == status
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert len({e.run_id for e in events}) == 1
    assert event_data(events, "step")
    calls = event_data(events, "tool.call")
    assert len(event_data(events, "tool.result")) <= len(calls)


# The whole stack starts inside this test's time, and llama.cpp reads a ~1.5k-token
# system prompt per step at some 80-400 tokens a second on two busy cores.
@pytest.mark.timeout(300)
async def test_a_run_on_smollm2_reaches_an_end_state(stack: Supervisor) -> None:
    async with TetherClient(stack.child("brain").url) as client:
        accepted = await client.start_run(
            "What time is it in Tokyo?",
            provider="local",
            max_steps=2,
            allow_shell=False,  # fewer tools offered, so a shorter prompt to read
            allow_web=False,
        )
        events = [event async for event in client.events(accepted.run_id)]
        run = await client.get_run(accepted.run_id)
    assert run.status in END_STATES, (run.status, run.stop_reason, run.answer)
    assert_events_are_whole(events, run.status)
    assert run.usage.input_tokens > 0
