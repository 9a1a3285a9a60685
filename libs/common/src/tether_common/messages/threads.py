"""The client API of threads: a conversation as a sequence of runs sharing history.

Create a thread, post a message (which starts the thread's next run with the history of
the earlier turns), read it with its turns, list, delete. The same bodies serve HTTP
(`/v1/threads…`, where the thread id rides in the path) and NATS (`threads.*`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import Field

from tether_common.messages.base import ID_PATTERN, MAX_BIGINT, RequestModel, WireModel, WireRequest
from tether_common.messages.memory import MAX_RECALL
from tether_common.messages.runs import RunStatus, Usage

# `thread`: every run of the thread works in one workspace folder of its own;
# `shared`: each run in the agent's workspace, as a run outside a thread does.
WorkspaceScope = Literal["thread", "shared"]
ThreadStatus = Literal["idle", "running"]


class ThreadBudgets(RequestModel):
    """A thread's limits, each over the sum of its runs (None: none beyond each run's
    own). `max_seconds` bounds each run, since a thread idles between turns."""

    max_steps: int | None = Field(default=None, ge=1, le=1_000_000)
    max_tool_calls: int | None = Field(default=None, ge=0, le=1_000_000)
    max_cost: float | None = Field(default=None, ge=0, le=1e9)
    max_tokens: int | None = Field(default=None, ge=1, le=MAX_BIGINT)
    max_seconds: float | None = Field(default=None, gt=0, le=7 * 86400)


class CreateThread(WireRequest):
    agent: str | None = Field(default=None, pattern=ID_PATTERN, max_length=200)
    title: str | None = Field(default=None, max_length=500)
    # As a run's: every turn uses them (None: the brain's configured ones).
    provider: str | None = Field(default=None, max_length=64)
    model: str | None = Field(default=None, max_length=200)
    workspace: WorkspaceScope = "thread"
    budgets: ThreadBudgets = Field(default_factory=ThreadBudgets)
    # How many of the owner's memories each turn recalls into its prompt, marked
    # untrusted (None or 0: none; `tether_common.messages.memory`).
    recall: int | None = Field(default=None, ge=0, le=MAX_RECALL)


class ThreadMessageBody(RequestModel):
    """The HTTP body of `POST /v1/threads/{thread_id}/messages`."""

    text: str = Field(min_length=1, max_length=200_000)


class SendThreadMessage(WireRequest):
    """Over NATS: the next user message of a thread (starts its next run)."""

    thread_id: str = Field(pattern=ID_PATTERN, max_length=200)
    text: str = Field(min_length=1, max_length=200_000)


class ThreadTurnAccepted(WireModel):
    thread_id: str
    run_id: str
    turn: int = Field(description="numbered from 1")


class GetThread(WireRequest):
    thread_id: str = Field(pattern=ID_PATTERN, max_length=200)


class DeleteThread(WireRequest):
    thread_id: str = Field(pattern=ID_PATTERN, max_length=200)


class ThreadDeleted(WireModel):
    """Over NATS, the reply to `DeleteThread` (HTTP answers 204 with no body)."""

    thread_id: str


class ThreadTurn(WireModel):
    """One turn: the user's message and the run that answered it."""

    turn: int
    run_id: str
    text: str
    answer: str | None = None
    status: RunStatus
    stop_reason: str | None = None
    usage: Usage = Field(default_factory=Usage)
    steps: int = 0
    created_at: datetime


class ThreadView(WireModel):
    thread_id: str
    agent: str | None = None
    title: str | None = None
    provider: str | None = None
    model: str | None = None
    workspace: WorkspaceScope = "thread"
    budgets: ThreadBudgets = Field(default_factory=ThreadBudgets)
    recall: int = 0
    status: ThreadStatus = Field(description="running while the last turn's run has not ended")
    turns: list[ThreadTurn] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage, description="the sum over the turns")
    tenant: str | None = None  # whose thread: its creator's tenant and name
    owner: str | None = None
    created_at: datetime
    updated_at: datetime


class ListThreads(WireRequest):
    """Threads, newest first; `before` (the `next` of the previous page) pages back."""

    before: datetime | None = None
    limit: int = Field(default=50, ge=1, le=500)


class ThreadSummary(WireModel):
    """One line of a thread listing (not its turns)."""

    thread_id: str
    agent: str | None = None
    title: str | None = None
    status: ThreadStatus
    turns: int
    tenant: str | None = None
    owner: str | None = None
    created_at: datetime
    updated_at: datetime


class ThreadList(WireModel):
    threads: list[ThreadSummary]
    next: datetime | None = Field(
        default=None, description="pass as `before` for the next page; None: no more"
    )
