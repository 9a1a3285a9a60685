"""Fallback models through the real services: an agent's chain asked when its run's model
fails, against a local server speaking OpenAI's Chat Completions wire format. A 429, a
5xx or a silent provider switches to the next model (recorded on the step as a `guard`
event `model_fallback`, the answer's cost at the answering model's price); a failure
the next entry does not take fails the run as before; a chain that fails throughout
fails the run naming each attempt; a chain reaching outside the agent's providers or
models is refused when the agent is applied."""

from __future__ import annotations

import dataclasses
import json
import os
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from tether_client import TetherClient
from tether_client.server.supervisor import Supervisor
from tether_common.messages.runs import RunEvent, RunView
from tether_common.testing import until
from tether_gateway.testing import FakeUpstream, Reply, chat_text_stream

pytestmark = pytest.mark.e2e

PRICES = {
    "model-a": {"input_per_million": 1000.0, "output_per_million": 1000.0},
    "model-b": {"input_per_million": 10.0, "output_per_million": 100.0},
}


@pytest.fixture(scope="module")
def stack_extra_env(fake_model: FakeUpstream) -> dict[str, str]:
    return {
        "TETHER_GATEWAY_OPENAI_BASE_URL": f"{fake_model.url}/v1",
        "TETHER_GATEWAY_RETRY_ATTEMPTS": "0",  # the gateway's own retries are not the point
        "TETHER_GATEWAY_INACTIVITY_TIMEOUT_S": "1",  # a stalled model times out quickly
        "TETHER_GATEWAY_PRICES": json.dumps(PRICES),
        "TETHER_BRAIN_LEASE_S": "6",  # a killed brain's run is taken over soon
    }


def failing(status: int) -> Reply:
    body = json.dumps({"error": {"message": f"upstream says {status}", "type": "x"}}).encode()
    return Reply(status=status, headers={"content-type": "application/json"}, pieces=[body])


STALLED = Reply(end="stall")  # headers, then silence until the gateway hangs up


@pytest.fixture
async def http(stack: Supervisor) -> AsyncIterator[httpx.AsyncClient]:
    """The brain's API as the suite's operator (an admin)."""
    token = os.environ["TETHER_TOKEN"]
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=stack.child("brain").url, headers=headers) as client:
        yield client


async def make_agent(http: httpx.AsyncClient, **definition: Any) -> str:
    agent_id = f"fb-{uuid.uuid4().hex[:8]}"
    body = {"id": agent_id, "providers": ["openai"], "models": ["model-a", "model-b", "model-c"]}
    response = await http.post("/v1/agents", json=body | definition)
    assert response.status_code == 201, response.text
    return agent_id


async def run_on(
    stack: Supervisor, fake_model: FakeUpstream, agent: str, *replies: Reply
) -> tuple[RunView, list[RunEvent], list[str]]:
    """One tools-off run of `agent` on openai/model-a; the run, its events and the
    models the fake was asked for, in order."""
    fake_model.received.clear()
    fake_model.replies.clear()
    fake_model.queue(*replies)
    async with TetherClient(stack.child("brain").url) as client:
        accepted = await client.start_run(
            "Say hello.", agent=agent, provider="openai", model="model-a", guide_only=True
        )
        events = [e async for e in client.events(accepted.run_id)]
        run = await client.get_run(accepted.run_id)
    asked = [r.json()["model"] for r in fake_model.received]
    return run, events, asked


def switches(events: list[RunEvent]) -> list[dict[str, Any]]:
    return [e.data for e in events if e.kind == "guard" and e.data["kind"] == "model_fallback"]


@pytest.mark.parametrize(
    ("failure", "code", "reason"),
    [
        (failing(429), "provider_rate_limited", "rate_limit"),
        (failing(500), "provider_unavailable", "error"),
        (failing(503), "provider_unavailable", "error"),
        (STALLED, "provider_timeout", "timeout"),
    ],
    ids=["429", "500", "503", "timeout"],
)
async def test_a_failing_model_switches_to_the_next_and_the_step_records_it(
    stack: Supervisor,
    fake_model: FakeUpstream,
    http: httpx.AsyncClient,
    failure: Reply,
    code: str,
    reason: str,
) -> None:
    agent = await make_agent(http, fallback=[{"provider": "openai", "model": "model-b"}])
    run, events, asked = await run_on(
        stack, fake_model, agent, failure, chat_text_stream("Hello from B.", "model-b")
    )
    assert (run.status, run.answer) == ("completed", "Hello from B."), run.stop_reason
    assert asked == ["model-a", "model-b"]
    [switch] = switches(events)
    assert switch["step"] == 1
    assert (switch["provider"], switch["model"], switch["code"], switch["reason"]) == (
        "openai",
        "model-a",
        code,
        reason,
    )
    assert (switch["to_provider"], switch["to_model"]) == ("openai", "model-b")
    # The answer is paid at model-b's price (120 in, 30 out), not at model-a's.
    assert run.usage.input_tokens == 120
    assert run.usage.cost == pytest.approx(120 * 10 / 1e6 + 30 * 100 / 1e6)


async def test_a_chain_crosses_providers(
    stack: Supervisor, fake_model: FakeUpstream, http: httpx.AsyncClient
) -> None:
    """openai rate-limited: the stack's own rules planner (another provider, another
    gateway adapter) answers."""
    agent = await make_agent(
        http, providers=["openai", "rules"], models=None, fallback=[{"provider": "rules"}]
    )
    run, events, asked = await run_on(stack, fake_model, agent, failing(429))
    assert run.status == "completed", run.stop_reason
    assert run.answer
    assert asked == ["model-a"]
    [switch] = switches(events)
    assert (switch["to_provider"], switch["to_model"]) == ("rules", None)


async def test_a_failure_the_chain_does_not_take_fails_the_run_as_before(
    stack: Supervisor, fake_model: FakeUpstream, http: httpx.AsyncClient
) -> None:
    agent = await make_agent(
        http, fallback=[{"provider": "openai", "model": "model-b", "when": ["rate_limit"]}]
    )
    run, events, asked = await run_on(
        stack, fake_model, agent, failing(500), chat_text_stream("never", "model-b")
    )
    assert run.status == "failed"
    assert run.stop_reason is not None
    assert run.stop_reason.startswith("model_error: provider_unavailable: openai answered HTTP 500")
    assert asked == ["model-a"]
    assert switches(events) == []


async def test_a_chain_failing_throughout_fails_the_run_naming_each_attempt(
    stack: Supervisor, fake_model: FakeUpstream, http: httpx.AsyncClient
) -> None:
    agent = await make_agent(
        http,
        fallback=[
            {"provider": "openai", "model": "model-b", "when": ["rate_limit"]},
            {"provider": "openai", "model": "model-c"},
        ],
    )
    run, events, asked = await run_on(stack, fake_model, agent, failing(429), failing(502), STALLED)
    assert run.status == "failed"
    assert asked == ["model-a", "model-b", "model-c"]
    reason = run.stop_reason or ""
    assert reason.startswith("model_error: provider_timeout: 3 models failed: "), reason
    for attempt in (
        "1. openai/model-a: provider_rate_limited: openai answered HTTP 429",
        "2. openai/model-b: provider_unavailable: openai answered HTTP 502",
        "3. openai/model-c: provider_timeout: ",
    ):
        assert attempt in reason
    assert [(s["model"], s["to_model"]) for s in switches(events)] == [
        ("model-a", "model-b"),
        ("model-b", "model-c"),
    ]


BAD_CHAINS = [
    pytest.param(
        {"providers": ["openai"]}, {"provider": "anthropic", "model": "model-a"}, id="provider"
    ),
    pytest.param({"models": ["model-a"]}, {"provider": "openai", "model": "model-z"}, id="model"),
    pytest.param({"models": ["model-a"]}, {"provider": "openai"}, id="provider-default-model"),
    pytest.param(
        {"providers": ["openai"], "models": ["model-a", "model-b"]},
        {"provider": "openai-2", "model": "model-b"},
        id="both-listed-one-outside",
    ),
]


@pytest.mark.parametrize(("lists", "entry"), BAD_CHAINS)
async def test_a_chain_entry_outside_the_agents_lists_is_refused_at_apply(
    http: httpx.AsyncClient, lists: dict[str, Any], entry: dict[str, Any]
) -> None:
    agent_id = f"fb-{uuid.uuid4().hex[:8]}"
    made = await http.post("/v1/agents", json={"id": agent_id} | lists | {"fallback": [entry]})
    assert made.status_code == 422, made.text
    assert "fallback[0]" in made.text
    assert (await http.get(f"/v1/agents/{agent_id}")).status_code == 404
    # Nor may a change bring one in, or narrow the lists under a chain already there.
    fine = {"providers": ["openai"], "models": ["model-a", "model-b"]}
    chain = [{"provider": "openai", "model": "model-b"}]
    made = await http.post("/v1/agents", json={"id": agent_id} | fine | {"fallback": chain})
    assert made.status_code == 201, made.text
    changed = await http.put(f"/v1/agents/{agent_id}", json=lists | {"fallback": [entry]})
    assert changed.status_code == 422, changed.text
    narrowed = await http.put(
        f"/v1/agents/{agent_id}", json={"models": ["model-a"], "fallback": chain}
    )
    assert narrowed.status_code == 422, narrowed.text
    kept = await http.get(f"/v1/agents/{agent_id}")
    assert kept.json()["version"] == 1
    assert kept.json()["fallback"] == [
        {"provider": "openai", "model": "model-b", "when": ["error", "rate_limit", "timeout"]}
    ]


async def test_a_brain_killed_mid_switch_asks_the_turn_again_from_the_runs_model(
    stack: Supervisor, fake_model: FakeUpstream, http: httpx.AsyncClient
) -> None:
    """Nothing of a turn is committed between its attempts: the replica that takes the
    run over asks the run's own model again, and the switch is recorded once."""
    agent = await make_agent(http, fallback=[{"provider": "openai", "model": "model-b"}])
    fake_model.received.clear()
    fake_model.replies.clear()
    slow = dataclasses.replace(chat_text_stream("x" * 60, "model-b", piece=5), gap_s=0.5)
    fake_model.queue(failing(429), slow, failing(429), chat_text_stream("Hello from B.", "model-b"))
    made = await http.post(
        "/v1/runs",
        json={"prompt": "Say hello.", "agent": agent, "provider": "openai", "model": "model-a"}
        | {"guide_only": True},
    )
    assert made.status_code in (200, 201, 202), made.text
    run_id = made.json()["run_id"]
    # model-b is writing its (slow) answer.
    await until(lambda: len(fake_model.received) >= 2, timeout=30, every=0.02, what="model-b asked")
    brain = stack.child("brain")
    stack.kill("brain")
    assert brain.proc is not None
    await brain.proc.wait()
    await stack.start_child(brain)
    await stack.wait_ready(timeout=120, children=[brain])
    async with TetherClient(brain.url) as client:
        events = [e async for e in client.events(run_id)]
        run = await client.get_run(run_id)
    assert (run.status, run.answer) == ("completed", "Hello from B."), run.stop_reason
    asked = [r.json()["model"] for r in fake_model.received]
    assert asked == ["model-a", "model-b", "model-a", "model-b"]
    assert [(s["model"], s["to_model"]) for s in switches(events)] == [("model-a", "model-b")]
