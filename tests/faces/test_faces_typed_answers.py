"""Typed answers through the real services (the faces' stack: the scripted provider): an
agent's `output_schema` (made through `/v1/agents`), a run's own schema (the typed
client's `output_type`, the OpenAI face's `response_format`), an answer that does not fit
sent back naming the violation and repaired, one that never fits failing
`output_invalid` with nothing lost, and the validated object as the run's `output` in
the runs API, the OpenAI face and the typed client (async and sync)."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from pydantic import BaseModel, Field

from faces_support import ADMIN_TOKEN, Callers
from tether_client import SyncTetherClient, TetherClient
from tether_common.errors import MessageError
from tether_common.messages.runs import RunEvent, RunView
from tether_common.testing import event_data, say, write_script

pytestmark = pytest.mark.e2e

ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


class Item(BaseModel):
    name: str = Field(pattern=r"^[a-z]+$")
    qty: int = Field(ge=1)


class Order(BaseModel):
    order_id: str
    items: list[Item]


GOOD = {"order_id": "o1", "items": [{"name": "tea", "qty": 2}]}
WRONG_TYPE = {"order_id": "o1", "items": [{"name": "tea", "qty": "two"}]}


def fenced(value: Any) -> str:
    return "```json\n" + json.dumps(value) + "\n```"


async def make_agent(callers: Callers, **definition: Any) -> str:
    agent_id = f"typed-{uuid.uuid4().hex[:8]}"
    async with httpx.AsyncClient(base_url=callers.brain, timeout=30, headers=ADMIN) as http:
        made = await http.post("/v1/agents", json={"id": agent_id, **definition})
    assert made.status_code == 201, made.text
    return agent_id


async def run_to_end(
    callers: Callers, scripts_dir: Path, turns: list[Any], **options: Any
) -> tuple[RunView, list[RunEvent]]:
    model = write_script(scripts_dir, turns)
    async with TetherClient(callers.brain, token=callers.admin) as client:
        accepted = await client.start_run(
            "what was ordered?", provider="scripted", model=model, **options
        )
        events = [e async for e in client.events(accepted.run_id)]
        return await client.get_run(accepted.run_id), events


async def test_an_answer_that_does_not_fit_is_sent_back_and_repaired(
    callers: Callers, scripts_dir: Path
) -> None:
    agent = await make_agent(callers, output_schema=Order.model_json_schema())
    turns = [say("Tea, two of them."), say(json.dumps(WRONG_TYPE)), say(fenced(GOOD))]
    view, events = await run_to_end(callers, scripts_dir, turns, agent=agent)
    assert (view.status, view.stop_reason) == ("completed", None)
    assert view.output == GOOD
    assert view.answer == fenced(GOOD)  # the model's text, beside the object
    guards = [g for g in event_data(events, "guard") if g["kind"] == "output_invalid"]
    assert [(g["step"], g["reason"]) for g in guards] == [(1, "repair"), (2, "repair")]
    assert guards[0]["why"].startswith("$: the answer is not a JSON document")
    assert guards[1]["why"] == "$.items[0].qty: 'two' is not of type 'integer'"
    end = event_data(events, "run.end")[-1]
    assert end["output"] == GOOD
    # Each repair was a step of the run.
    assert end["steps"] == 3
    async with httpx.AsyncClient(base_url=callers.brain, timeout=30, headers=ADMIN) as http:
        stored = (await http.get(f"/v1/runs/{view.run_id}")).json()
    assert stored["output"] == GOOD


async def test_an_answer_that_never_fits_fails_output_invalid_losing_nothing(
    callers: Callers, scripts_dir: Path
) -> None:
    agent = await make_agent(callers, output_schema=Order.model_json_schema(), output_repairs=1)
    turns = [say(json.dumps(WRONG_TYPE)), say(json.dumps({"order_id": "o1"}))]
    view, events = await run_to_end(callers, scripts_dir, turns, agent=agent)
    assert view.status == "failed"
    assert view.stop_reason == "output_invalid: $: 'items' is a required property"
    assert view.output is None
    # The last answer is kept: as the run's answer, its step, and in the events.
    assert view.answer == json.dumps({"order_id": "o1"})
    assert view.steps[-1].text == view.answer
    guards = [g for g in event_data(events, "guard") if g["kind"] == "output_invalid"]
    assert [g["reason"] for g in guards] == ["repair", "repairs_spent"]
    assert guards[0]["why"] == "$.items[0].qty: 'two' is not of type 'integer'"
    end = event_data(events, "run.end")[-1]
    assert (end["status"], end["stop_reason"], end["output"]) == (
        "failed",
        view.stop_reason,
        None,
    )
    assert [e.seq for e in events] == list(range(1, len(events) + 1))


async def test_repairs_are_steps_under_the_runs_limit(callers: Callers, scripts_dir: Path) -> None:
    agent = await make_agent(callers, output_schema=Order.model_json_schema())
    # Two repairs allowed, but the run has two steps: the second answer is the last.
    turns = [say("tea"), say("still tea"), say(fenced(GOOD))]
    view, _events = await run_to_end(callers, scripts_dir, turns, agent=agent, max_steps=2)
    assert view.status == "failed"
    assert (view.stop_reason or "").startswith("output_invalid: $: the answer is not a JSON")


async def test_the_typed_client_answers_an_instance_async_and_sync(
    callers: Callers, scripts_dir: Path
) -> None:
    # The default agent has no schema: the run's own (from `output_type`) is the schema.
    model = write_script(scripts_dir, [say(json.dumps(WRONG_TYPE)), say(json.dumps(GOOD))])
    async with TetherClient(callers.brain, token=callers.admin) as client:
        order = await client.run("what?", output_type=Order, provider="scripted", model=model)
    assert order == Order.model_validate(GOOD)
    never = write_script(scripts_dir, [say("no")] * 3)

    def sync_run() -> None:
        with SyncTetherClient(callers.brain, token=callers.admin) as tether:
            again = write_script(scripts_dir, [say(fenced(GOOD))])
            assert tether.run("what?", output_type=Order, provider="scripted", model=again) == (
                Order.model_validate(GOOD)
            )
            with pytest.raises(MessageError) as failed:
                tether.run("what?", output_type=Order, provider="scripted", model=never)
            assert failed.value.code == "output_invalid"
            assert "$: the answer is not a JSON document" in failed.value.message

    await asyncio.to_thread(sync_run)


async def test_a_runs_schema_narrows_its_agents_and_never_loosens_it(
    callers: Callers, scripts_dir: Path
) -> None:
    agent = await make_agent(callers, output_schema=Order.model_json_schema())
    loose = {"type": "object", "properties": {"note": {"type": "string"}}, "required": ["note"]}
    # Fits the run's schema, not the agent's; then both.
    turns = [say(json.dumps({"note": "hi"})), say(json.dumps(GOOD | {"note": "hi"}))]
    view, events = await run_to_end(callers, scripts_dir, turns, agent=agent, output_schema=loose)
    assert view.status == "completed"
    assert view.output == GOOD | {"note": "hi"}
    guards = [g for g in event_data(events, "guard") if g["kind"] == "output_invalid"]
    assert [g["why"] for g in guards] == ["$: 'order_id' is a required property"]


def sdk(callers: Callers) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        base_url=f"{callers.brain}/v1", api_key=callers.admin, max_retries=0, timeout=120
    )


def scripted(scripts_dir: Path, *turns: Any) -> dict[str, Any]:
    return {"tether": {"provider": "scripted", "model": write_script(scripts_dir, list(turns))}}


ORDER_FORMAT: Any = {
    "type": "json_schema",
    "json_schema": {"name": "order", "schema": Order.model_json_schema(), "strict": True},
}


JSON_OBJECT: Any = {"type": "json_object"}
# A schema that would fetch from elsewhere: refused before any run starts.
REMOTE_REF: Any = {
    "type": "json_schema",
    "json_schema": {"name": "x", "schema": {"type": "object", "$ref": "https://example.com/s"}},
}


async def test_the_openai_face_answers_response_format_as_json(
    callers: Callers, scripts_dir: Path
) -> None:
    messages: Any = [{"role": "user", "content": "what was ordered?"}]
    async with sdk(callers) as client:
        completion = await client.chat.completions.create(
            model="default",
            messages=messages,
            response_format=ORDER_FORMAT,
            extra_body=scripted(scripts_dir, say("tea"), say(fenced(GOOD))),
        )
        assert json.loads(completion.choices[0].message.content or "") == GOOD
        stream = await client.chat.completions.create(
            model="default",
            messages=messages,
            stream=True,
            response_format=JSON_OBJECT,
            extra_body=scripted(scripts_dir, say("Tea, two."), say(fenced(GOOD))),
        )
        # Only the answer's JSON is streamed: the live text (prose, a fence) is held back.
        text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
        assert json.loads(text) == GOOD
        with pytest.raises(openai.APIStatusError) as failed:
            await client.chat.completions.create(
                model="default",
                messages=messages,
                response_format=ORDER_FORMAT,
                extra_body=scripted(scripts_dir, *[say(json.dumps(WRONG_TYPE))] * 3),
            )
        assert failed.value.status_code == 502
        body: Any = failed.value.body
        assert body["code"] == "output_invalid"
        assert "$.items[0].qty: 'two' is not of type 'integer'" in body["message"]
        with pytest.raises(openai.UnprocessableEntityError):
            await client.chat.completions.create(
                model="default",
                messages=messages,
                response_format=REMOTE_REF,
                extra_body=scripted(scripts_dir, say("{}")),
            )


REFUSED_AT_APPLY: list[tuple[str, dict[str, Any], str]] = [
    ("meta-schema", {"type": "object", "properties": {"a": {"type": 12}}}, "not a valid JSON"),
    ("remote-ref", {"type": "object", "$ref": "http://169.254.169.254/x"}, "not inside the"),
    ("id", {"type": "object", "$id": "https://example.com/s"}, "'$id' is not accepted"),
    ("pattern-properties", {"type": "object", "patternProperties": {"^a": {}}}, "backtracking"),
    ("lookahead", {"type": "object", "properties": {"a": {"pattern": "(?=a)"}}}, "lookahead"),
    ("root-array", {"type": "array"}, "root must be an object"),
    ("too-deep", {"type": "object", "not": json.loads('{"not":' * 30 + "{}" + "}" * 30)}, "deeper"),
]


@pytest.mark.parametrize(
    ("schema", "said"), [r[1:] for r in REFUSED_AT_APPLY], ids=[r[0] for r in REFUSED_AT_APPLY]
)
async def test_a_bad_output_schema_is_refused_at_apply_naming_why(
    callers: Callers, schema: dict[str, Any], said: str
) -> None:
    body = {"id": f"typed-{uuid.uuid4().hex[:8]}", "output_schema": schema}
    async with httpx.AsyncClient(base_url=callers.brain, timeout=30, headers=ADMIN) as http:
        made = await http.post("/v1/agents", json=body)
        assert made.status_code == 422, made.text
        error = made.json()["error"]
        assert error["code"] == "invalid_request"
        assert said in error["message"]
        assert (await http.get(f"/v1/agents/{body['id']}")).status_code == 404
