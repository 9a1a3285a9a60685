"""The OpenAI-compatible face: `POST /v1/chat/completions` (streamed or not) and
`GET /v1/models[/{model_id}]`, where each model is a Tether agent the caller may run.

A completion is a run of the agent named by `model`, started as the caller (bearer token:
the SDK's `api_key`) through `RunManager.start`, so the agent's tools, gates, approvals,
budgets and audit apply; the prompt is the messages rendered by `conversation.py`. The
answer is the run's final answer; its usage is `usage`; `tether` (an extension field
OpenAI's SDKs keep as an extra) names the run. A stream sends one role chunk, then the
model's text as it is written (the run's live deltas; a later step's text after a blank
line), a chunk per tool event with `tether: {run_id, event, seq, data}` and an empty
delta, what of the final answer the live text did not carry (all of it, after a blank
line, when the last step's live text was something else), then the finish chunk
(`finish_reason`, `usage`, `tether.event: run.end`) and `data: [DONE]`. So a stream
assembles to the answer when the model wrote nothing but its answer, and to the text
before a tool call, a blank line, then the answer when it did.

A parked run keeps the stream open (keep-alive comments every 15 s) until decided or
`tether.wait_s` (600 s) passes; the answer then says the run is waiting and where to
follow it, and the run goes on. A failed run is an error (status and `code` from its stop
reason), in a stream `data: {"error": ...}`, which the SDK raises.

`response_format` (`json_object`, or `json_schema` with its `schema`) makes the run typed:
its schema is the run's own output schema (beside the agent's, if any), the content is
the validated object as JSON (a stream sends no live text, only that JSON), and an answer
that never fits is an error `output_invalid` naming the violation.

A client's own tools (`tools=`, `functions=`, a forced `tool_choice`) are refused (400
`bad_request`, as OpenAI refuses a parameter it does not support), never ignored: the
agent's tools are what run, and an ignored list would read as a model that chose not to
call them.

The brain had no `/v1/models` route before (model profiles live at `/v1/model-profiles`),
so nothing collides; the gateway's providers are not listed (an agent is what runs).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response
from sse_starlette import EventSourceResponse

from tether_brain.faces.agents import may_run, owner_of, runnable
from tether_brain.faces.conversation import render_prompt
from tether_brain.faces.following import (
    DEFAULT_WAIT_S,
    KEEPALIVE_S,
    Activity,
    Ending,
    Follower,
    Progress,
    Text,
    start_request,
)
from tether_brain.faces.openai_errors import ERROR_RESPONSES, OpenAIRoute, openai_detail
from tether_brain.faces.openai_wire import (
    AnswerMessage,
    ChatCompletion,
    ChatCompletionChunk,
    ChatRequest,
    Choice,
    ChunkChoice,
    CompletionUsage,
    Delta,
    ModelCard,
    ModelList,
    RunNote,
)
from tether_brain.runs.manager import RunManager
from tether_common.errors import ErrorCode, MessageError, NotFoundError, TetherError
from tether_common.http import TEXT_BODY_LIMIT, PathId, body_limit, status_for
from tether_common.identity import Principal
from tether_common.identity.http import Caller
from tether_common.messages.runs import Usage

log = logging.getLogger(__name__)

_STREAM_DOC: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "a `chat.completion`, or with `stream: true` server-sent events: "
        "`data: {chat.completion.chunk}` ... `data: [DONE]`",
        "content": {"text/event-stream": {}},
    }
}


def _usage(usage: Usage) -> CompletionUsage:
    return CompletionUsage(
        prompt_tokens=usage.input_tokens,
        completion_tokens=usage.output_tokens,
        total_tokens=usage.input_tokens + usage.output_tokens,
    )


def _end_note(ending: Ending) -> RunNote:
    return RunNote(
        run_id=ending.run_id,
        event="run.end",
        status=ending.status,
        data={"stop_reason": ending.stop_reason, "waited_out": ending.waited_out},
    )


class Written:
    """The live text a stream has sent, step by step, and what of the answer it lacks."""

    def __init__(self) -> None:
        self.steps: dict[int, str] = {}

    def add(self, text: Text) -> str:
        """The content to send for `text`: a new step's text starts after a blank line."""
        sent = text.text
        if text.step not in self.steps and self.steps:
            sent = "\n\n" + sent
        self.steps[text.step] = self.steps.get(text.step, "") + text.text
        return sent

    def rest(self, ending: Ending) -> str:
        """What to send at the end: the answer's part the last step's live text did not
        carry (all of it, after a blank line, when that text was something else: live
        text is ephemeral, and the stored answer is what the run answered)."""
        last = self.steps[max(self.steps)] if self.steps else ""
        answer = ending.text
        if answer.startswith(last):
            return answer[len(last) :]
        return "\n\n" + answer


@dataclass(frozen=True, slots=True)
class Chat:
    """One completion's identity: its run, the agent asked for, when."""

    run_id: str
    model: str
    created: int

    def completion(self, ending: Ending) -> ChatCompletion:
        choice = Choice(
            message=AnswerMessage(content=ending.text), finish_reason=ending.finish_reason
        )
        return ChatCompletion(
            id=f"chatcmpl-{self.run_id}",
            created=self.created,
            model=self.model,
            choices=[choice],
            usage=_usage(ending.usage),
            tether=_end_note(ending),
        )

    def chunk(self, delta: Delta | None, **fields: Any) -> dict[str, str]:
        choices = [] if delta is None else [ChunkChoice(delta=delta, **fields.pop("choice", {}))]
        chunk = ChatCompletionChunk(
            id=f"chatcmpl-{self.run_id}",
            created=self.created,
            model=self.model,
            choices=choices,
            **fields,
        )
        return {"data": chunk.model_dump_json()}

    async def chunks(
        self, progress: AsyncIterator[Progress], include_usage: bool, *, live_text: bool = True
    ) -> AsyncIterator[dict[str, str]]:
        """The stream's chunks. Without `live_text` (a `response_format` request) the
        model's text is not sent as it is written: the content is then the answer's JSON
        alone, which a client parses whole."""
        yield self.chunk(Delta(role="assistant", content=""))
        written = Written()
        try:
            async for item in progress:
                if isinstance(item, Text):
                    if live_text:
                        yield self.chunk(Delta(content=written.add(item)))
                elif isinstance(item, Activity):
                    event = item.event
                    note = RunNote(
                        run_id=self.run_id, event=event.kind, seq=event.seq, data=event.data
                    )
                    yield self.chunk(Delta(), tether=note)
                else:
                    for message in self._ending(item, written.rest(item), include_usage):
                        yield message
        except TetherError as exc:
            yield _error(status_for(exc), exc.code, exc.message)
        except Exception:
            log.exception("the stream of run %s failed", self.run_id)
            yield _error(500, ErrorCode.INTERNAL, "internal error; see the brain's log")
        yield {"data": "[DONE]"}

    def _ending(self, ending: Ending, rest: str, include_usage: bool) -> list[dict[str, str]]:
        if (failure := ending.failure()) is not None:
            return [_error(status_for(failure), failure.code, failure.message)]
        usage = _usage(ending.usage)
        finish = {"finish_reason": ending.finish_reason}
        messages = [self.chunk(Delta(content=rest))] if rest else []
        messages.append(self.chunk(Delta(), choice=finish, usage=usage, tether=_end_note(ending)))
        if include_usage:  # OpenAI's own last chunk: no choices, the usage
            messages.append(self.chunk(None, usage=usage))
        return messages


def _error(status: int, code: str, message: str) -> dict[str, str]:
    return {"data": json.dumps({"error": openai_detail(status, code, message)})}


async def _last(progress: AsyncIterator[Progress]) -> Ending:
    async for item in progress:
        if isinstance(item, Ending):
            return item
    raise TetherError("the run's events ended without an ending")  # never: follow ends so


def _card(manager: RunManager, who: Principal, agent_id: str) -> ModelCard:
    return ModelCard(id=agent_id, owned_by=owner_of(manager, who, agent_id) or "tether")


# The face's part on `app.state` (app.py puts it there): its follower, which holds the
# run manager every route asks.
FOLLOWER = "openai_follower"


async def openai_follower(request: Request) -> Follower:
    found: Follower = getattr(request.app.state, FOLLOWER)
    return found


FollowerDep = Annotated[Follower, Depends(openai_follower)]

router = APIRouter(
    prefix="/v1", tags=["openai"], route_class=OpenAIRoute, responses=ERROR_RESPONSES
)


@router.get("/models")
async def list_models(follower: FollowerDep, who: Caller) -> ModelList:
    """The agents the caller may run, as OpenAI models (403 for a role that starts
    no runs)."""
    manager = follower.manager
    return ModelList(data=[_card(manager, who, agent) for agent in runnable(manager, who)])


@router.get("/models/{model_id}")
async def get_model(model_id: PathId, follower: FollowerDep, who: Caller) -> ModelCard:
    """One agent the caller may run (404 for any other, known or not)."""
    who.require("runs.start")
    if not may_run(follower.manager, who, model_id):
        raise NotFoundError(f"no model '{model_id}' for this caller")
    return _card(follower.manager, who, model_id)


@router.post(
    "/chat/completions",
    response_model=ChatCompletion,
    responses=_STREAM_DOC,
    openapi_extra=body_limit(TEXT_BODY_LIMIT),
)
async def chat_completions(body: ChatRequest, follower: FollowerDep, who: Caller) -> Response:
    """Run the agent `model` on the messages; answer its final answer. A client's own
    tools (`tools`, `functions`, a forced `tool_choice`) are refused with 400: the
    agent's tools are what run, as its policy decides."""
    if (param := body.client_tools()) is not None:
        raise MessageError(
            f"'{param}' is not supported: Tether runs the agent's own tools, as its "
            "grants and policy decide, and never hands a tool call back to the client. "
            f"Send the request without '{param}'; to give the agent a tool, grant it "
            "(`tether agents apply`).",
            code=ErrorCode.BAD_REQUEST,
        )
    options = body.tether.model_dump(exclude={"wait_s"}, exclude_none=True) if body.tether else {}
    typed = body.output_schema()
    if typed is not None:  # `response_format`: the run's own output schema
        options["output_schema"] = typed
    req = start_request(render_prompt(body.messages), body.model, **options)
    run_id = await follower.start(req, who)
    wait_s = (body.tether.wait_s if body.tether else None) or DEFAULT_WAIT_S
    chat = Chat(run_id, body.model, created=int(time.time()))
    progress = follower.follow(run_id, who, wait_s)
    if body.stream:
        usage = body.stream_options is not None and body.stream_options.include_usage
        chunks = chat.chunks(progress, usage, live_text=typed is None)
        return EventSourceResponse(chunks, ping=KEEPALIVE_S)
    ending = await _last(progress)
    if (failure := ending.failure()) is not None:
        raise failure
    return JSONResponse(chat.completion(ending).model_dump(mode="json"))


__all__ = ["FOLLOWER", "router"]
