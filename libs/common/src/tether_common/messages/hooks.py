"""Lifecycle hooks as the brain's API keeps and answers them (`/v1/hooks`), and the one
conversation a hook has with the brain: a `HookRequest` at a point of a run, a
`HookReply` saying what to do.

Points: `before_tool` (allow, `deny` with a reason the model reads, or `rewrite` the
arguments: the rewritten call meets every gate again), `after_tool` (allow, `redact` the
result, `taint` the run), `before_answer` (allow, `block`, or `replace` the answer),
`on_run_end` (a notice: its reply is not read). A hook is reached as a NATS service
(`transport: nats`, `target` a service name answered on `<prefix>.hooks.<name>` by the
bus's `hooks` user), an HTTPS endpoint (`transport: https`, the body signed with the
hook's secret as webhooks are: `Tether-Signature`), or one of the brain's built-in hooks
(`transport: builtin`, `target` its name). A hook that cannot answer in `timeout_s`, or
answers out of shape, is treated by its `failure` mode: `fail_closed` refuses (the call,
the result, the answer), `fail_open` goes on as if it had allowed."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from tether_common.messages.base import RequestModel, WireModel

__all__ = [
    "BUILTIN_HOOKS",
    "HOOK_NAME_PATTERN",
    "MAX_HOOKS_PER_TENANT",
    "AddHook",
    "Failure",
    "HookCall",
    "HookCreated",
    "HookList",
    "HookPoint",
    "HookRemoved",
    "HookReply",
    "HookRequest",
    "HookSpec",
    "HookView",
    "Transport",
]

HookPoint = Literal["before_tool", "after_tool", "before_answer", "on_run_end"]
Transport = Literal["nats", "https", "builtin"]
Failure = Literal["fail_closed", "fail_open"]
Action = Literal["allow", "deny", "rewrite", "redact", "taint", "block", "replace"]
# A hook's name, and a NATS service's: one subject token (no `.`, `*`, `>`).
HOOK_NAME_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_-]{0,62}$"
BUILTIN_HOOKS = ("redact_secrets", "detect_pii", "deny_topics")
MAX_HOOKS_PER_TENANT = 50
MAX_TIMEOUT_S = 30.0

# What each point may answer (anything else is a reply out of shape).
ACTIONS: dict[HookPoint, frozenset[str]] = {
    "before_tool": frozenset({"allow", "deny", "rewrite"}),
    "after_tool": frozenset({"allow", "redact", "taint"}),
    "before_answer": frozenset({"allow", "block", "replace"}),
    "on_run_end": frozenset({"allow"}),
}


class HookSpec(BaseModel):
    """A hook as its tenant defines it (the secret of an https hook is kept beside it)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    name: str = Field(pattern=HOOK_NAME_PATTERN)
    point: HookPoint
    transport: Transport
    # nats: the service's name; https: the endpoint's URL; builtin: one of BUILTIN_HOOKS.
    target: str = Field(min_length=1, max_length=2000)
    timeout_s: float = Field(default=5.0, gt=0, le=MAX_TIMEOUT_S)
    failure: Failure = "fail_closed"
    # Only calls of these tools (before_tool, after_tool); empty: every tool.
    tools: list[str] = Field(default_factory=list, max_length=100)
    # A built-in hook's own settings: `deny_topics` reads `topics` (words or phrases),
    # `detect_pii` reads `action` (`redact`, the default, or `block`).
    options: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _target_fits(self) -> HookSpec:
        if self.transport == "nats" and not _is_token(self.target):
            raise ValueError("a nats hook's target is a service name (letters, digits, _ -)")
        if self.transport == "builtin" and self.target not in BUILTIN_HOOKS:
            raise ValueError(f"no built-in hook '{self.target}'; one of {list(BUILTIN_HOOKS)}")
        if self.point == "on_run_end" and self.failure == "fail_closed":
            self.failure = "fail_open"  # a notice refuses nothing
        return self


def _is_token(text: str) -> bool:
    return re.fullmatch(HOOK_NAME_PATTERN, text) is not None


class AddHook(HookSpec, RequestModel):
    """`POST /v1/hooks`: one more hook for `tenant` (default: the caller's)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    tenant: str | None = Field(default=None, max_length=200)
    # An https hook's signing secret; generated when left out, answered once.
    secret: str | None = Field(default=None, min_length=16, max_length=200)


class HookView(HookSpec):
    tenant: str
    version: int  # the tenant's hooks document version after the change that made it
    changed_by: str | None = None
    changed_at: datetime | None = None


class HookCreated(HookView):
    secret: str | None = None  # an https hook's secret: shown on creation only


class HookList(BaseModel):
    hooks: list[HookView]
    version: int


class HookRemoved(BaseModel):
    name: str
    tenant: str
    version: int


class HookCall(BaseModel):
    """A tool call as a hook sees it, and as a `rewrite` answers it."""

    model_config = ConfigDict(extra="forbid")

    id: str
    name: str
    arguments: dict[str, Any]


class HookRequest(WireModel):
    """What the brain sends a hook."""

    hook: str
    point: HookPoint
    tenant: str
    run_id: str
    agent: str | None = None
    call: HookCall | None = None  # before_tool, after_tool
    result: str | None = None  # after_tool: the tool's text
    ok: bool | None = None  # after_tool: whether the tool succeeded
    answer: str | None = None  # before_answer
    status: str | None = None  # on_run_end
    stop_reason: str | None = None  # on_run_end


class HookReply(WireModel):
    """What a hook answers. `reason`: what the model (deny) or the caller (block) reads;
    `arguments`: a rewrite's new arguments; `content`: a redacted result; `answer`: the
    replacing answer."""

    action: Action = "allow"
    reason: str | None = Field(default=None, max_length=2000)
    arguments: dict[str, Any] | None = None
    content: str | None = None
    answer: str | None = None

    def problem(self, point: HookPoint) -> str | None:
        """Why this reply does not fit `point` (None: it fits)."""
        if self.action not in ACTIONS[point]:
            return f"'{self.action}' is not an answer at {point}"
        needs = {"rewrite": "arguments", "redact": "content", "replace": "answer"}
        field = needs.get(self.action)
        if field is not None and getattr(self, field) is None:
            return f"'{self.action}' needs `{field}`"
        return None
