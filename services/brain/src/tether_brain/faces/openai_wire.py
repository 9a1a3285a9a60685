"""The OpenAI chat-completions wire format as the face reads and answers it: the request
(what Tether uses of it; sampling parameters are ignored: the agent's settings are what
run; a client's own tools are refused, `ChatRequest.client_tools`), the completion, the streamed chunk, the model list, and the
error body (OpenAI's `{"error": {message, type, code}}`, whose `code` and `message` are
Tether's own `{"error": {code, message}}`)."""

from __future__ import annotations

from typing import Annotated, Any, Literal, assert_never

from pydantic import BaseModel, ConfigDict, Field

from tether_brain.faces.following import DEFAULT_WAIT_S, MAX_WAIT_S
from tether_common.messages.base import RequestModel
from tether_common.messages.runs import PermissionMode

Role = Literal["system", "developer", "user", "assistant", "tool", "function"]


class TextPart(RequestModel):
    model_config = ConfigDict(extra="ignore")

    type: Literal["text"]
    text: str = Field(max_length=200_000)


class ChatMessage(RequestModel):
    # `name`, `tool_calls`, `tool_call_id` and the like are read past, not refused.
    model_config = ConfigDict(extra="ignore")

    role: Role
    content: str | list[TextPart] | None = Field(default=None)

    @property
    def text(self) -> str:
        if isinstance(self.content, list):
            return "".join(part.text for part in self.content)
        return self.content or ""


class TetherOptions(RequestModel):
    """The `tether` extension of a request (`extra_body={"tether": {...}}` in the SDK):
    what `POST /v1/runs` would take, under the same rules (below operator, a token
    that lists none may use only the brain's own provider and model: 403 otherwise)."""

    provider: str | None = Field(default=None, max_length=200)
    model: str | None = Field(default=None, max_length=200)
    mode: PermissionMode | None = None
    max_steps: int | None = Field(default=None, ge=1, le=1000)
    wait_s: float | None = Field(
        default=None,
        gt=0,
        le=MAX_WAIT_S,
        description=f"how long to wait for the run (default {DEFAULT_WAIT_S:.0f} s)",
    )


class JsonSchemaSpec(RequestModel):
    """`response_format.json_schema`, as OpenAI documents it: the answer must be a JSON
    object this schema accepts (`strict` is read past: Tether always validates, and sends
    an answer that does not fit back to the model, then fails `output_invalid`)."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")
    description: str | None = Field(default=None, max_length=2000)
    json_schema: dict[str, Any] | None = Field(default=None, alias="schema")
    strict: bool | None = None


class TextFormat(RequestModel):
    model_config = ConfigDict(extra="ignore")

    type: Literal["text"]


class JsonObjectFormat(RequestModel):
    model_config = ConfigDict(extra="ignore")

    type: Literal["json_object"]


class JsonSchemaFormat(RequestModel):
    model_config = ConfigDict(extra="ignore")

    type: Literal["json_schema"]
    json_schema: JsonSchemaSpec


ResponseFormat = Annotated[
    TextFormat | JsonObjectFormat | JsonSchemaFormat, Field(discriminator="type")
]
# `json_object` (and a `json_schema` with no schema): any JSON object.
ANY_OBJECT: dict[str, Any] = {"type": "object"}


class StreamOptions(RequestModel):
    model_config = ConfigDict(extra="ignore")

    include_usage: bool = False


class ChatRequest(RequestModel):
    """`POST /v1/chat/completions`. `model` names a Tether agent (`GET /v1/models`)."""

    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)

    model: str = Field(min_length=1, max_length=200)
    messages: list[ChatMessage] = Field(min_length=1, max_length=1000)
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int = Field(default=1, ge=1, le=1, description="one choice: a run has one answer")
    tether: TetherOptions | None = None
    # A typed answer: the run's own output schema (the agent's own, if any, holds too).
    response_format: ResponseFormat | None = None
    # Read only to be refused (`client_tools`): the agent's tools are what run.
    tools: list[Any] | None = None
    functions: list[Any] | None = None
    tool_choice: Any = None
    function_call: Any = None

    def output_schema(self) -> dict[str, Any] | None:
        """The run's output schema `response_format` asks for (None: plain text)."""
        match self.response_format:
            case None | TextFormat():
                return None
            case JsonObjectFormat():
                return dict(ANY_OBJECT)
            case JsonSchemaFormat(json_schema=spec):
                return spec.json_schema if spec.json_schema is not None else dict(ANY_OBJECT)
            case _ as never:
                assert_never(never)

    def client_tools(self) -> str | None:
        """The parameter that hands the model the client's own tools (OpenAI function
        calling), or None. Tether cannot honour one: a run calls the agent's tools, as its
        grants and the gates decide, and never hands a call back to the client, so
        ignoring it would answer as if the model had had no use for them. An empty list,
        and a choice of `none` or `auto`, ask for nothing and pass."""
        for name in ("tools", "functions"):
            if getattr(self, name):
                return name
        for name in ("tool_choice", "function_call"):
            if getattr(self, name) not in (None, "none", "auto"):
                return name
        return None


class CompletionUsage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class AnswerMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str


class Choice(BaseModel):
    index: int = 0
    message: AnswerMessage
    finish_reason: str
    logprobs: None = None


class RunNote(BaseModel):
    """Tether's extension on a completion or chunk (`tether`, ignored by OpenAI's SDKs):
    the run behind the answer, or one event of its tool activity."""

    run_id: str
    event: str = Field(description="a run event kind (tool.call, tool.result, ...) or run.end")
    seq: int | None = None
    status: str | None = None
    data: dict[str, Any] = Field(default_factory=dict)


class ChatCompletion(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[Choice]
    usage: CompletionUsage
    tether: RunNote


class Delta(BaseModel):
    model_config = ConfigDict(extra="forbid")

    role: Literal["assistant"] | None = None
    content: str | None = None


class ChunkChoice(BaseModel):
    index: int = 0
    delta: Delta
    finish_reason: str | None = None
    logprobs: None = None


class ChatCompletionChunk(BaseModel):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChunkChoice]
    usage: CompletionUsage | None = None
    tether: RunNote | None = None


class ModelCard(BaseModel):
    id: str = Field(description="a Tether agent id")
    object: Literal["model"] = "model"
    created: int = 0
    owned_by: str


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class ErrorDetail(BaseModel):
    message: str
    type: str = Field(description="OpenAI's error type, from the HTTP status")
    code: str = Field(description="Tether's error code")
    param: str | None = None


class ErrorBody(BaseModel):
    error: ErrorDetail


__all__ = [
    "AnswerMessage",
    "ChatCompletion",
    "ChatCompletionChunk",
    "ChatMessage",
    "ChatRequest",
    "Choice",
    "ChunkChoice",
    "CompletionUsage",
    "Delta",
    "ErrorBody",
    "JsonObjectFormat",
    "JsonSchemaFormat",
    "JsonSchemaSpec",
    "ModelCard",
    "ModelList",
    "ResponseFormat",
    "RunNote",
    "TetherOptions",
    "TextFormat",
]
