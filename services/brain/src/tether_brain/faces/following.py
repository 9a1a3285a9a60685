"""Starting an agent's run for a face and following it to its end: the model's text as it
is written (`Text`, from the run's live deltas: ephemeral, a reader may miss some), what
the run does worth telling (`Activity`: tool calls and results, approvals, helpers,
skills, guards) and one `Ending`, from the run's durable events (`Streams.live`). A face
that stops waiting (`wait_s`) leaves the run going; it is an ordinary run, followed and
decided through the runs API."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from tether_brain.runs.manager import RunManager
from tether_brain.runs.streaming import Live
from tether_common.errors import ErrorCode, MessageError, TetherError, code_in
from tether_common.identity import Principal
from tether_common.messages.deltas import RunDelta
from tether_common.messages.events import RunEnd
from tether_common.messages.runs import RunEvent, RunStatus, StartRun, Usage

# How long a face waits for a run (a parked run included) unless the request says.
DEFAULT_WAIT_S = 600.0
MAX_WAIT_S = 3600.0
# The comment an open event stream sends while nothing happens (a parked run).
KEEPALIVE_S = 15.0
# The events that tell of tool activity; model text, usage, start and end are told apart.
ACTIVITY: frozenset[str] = frozenset(
    {
        "tool.call",
        "tool.result",
        "tool.approval_needed",
        "tool.approved",
        "tool.denied",
        "agent.start",
        "agent.end",
        "skill.used",
        "guard",
    }
)
# Stop reasons that mean the run ran out of room (OpenAI's `finish_reason: length`).
OUT_OF_ROOM: frozenset[str] = frozenset({"max_steps", "budget_exhausted"})


@dataclass(frozen=True, slots=True)
class Activity:
    """One event of tool activity, as the run published it."""

    event: RunEvent


@dataclass(frozen=True, slots=True)
class Text:
    """Text the run's own model wrote (not a helper's), in step `step`."""

    step: int
    text: str


@dataclass(frozen=True, slots=True)
class Ending:
    """How the face's wait ended: the run's end, or `waited_out` with the run going on."""

    run_id: str
    status: RunStatus
    stop_reason: str | None
    answer: str | None
    usage: Usage
    waited_out: bool = False
    output: dict[str, Any] | None = None  # a typed run's validated answer

    @property
    def text(self) -> str:
        """What the caller reads as the answer (an explanation where there is none)."""
        if self.waited_out:
            why = (
                "is waiting for an operator to approve a tool call"
                if self.status == "awaiting_approval"
                else f"is still {self.status}"
            )
            return (
                f"Run {self.run_id} {why}; this request stopped waiting. The run goes on: "
                f"follow it at GET /v1/runs/{self.run_id}."
            )
        if self.output is not None:  # a typed run: the object alone, as JSON
            return json.dumps(self.output, ensure_ascii=False)
        if self.answer:
            return self.answer
        return f"Run {self.run_id} {self.status} without an answer ({self.stop_reason})."

    @property
    def finish_reason(self) -> str:
        return "length" if self.stop_reason in OUT_OF_ROOM else "stop"

    def failure(self) -> TetherError | None:
        """The error a failed run answers (its stop reason as the code), else None."""
        if self.status != "failed":
            return None
        reason = self.stop_reason or "unknown reason"
        # A reason reads `model_error: script_exhausted: ...`: its first word that is an
        # error code gives the status (a provider's failure: 502); none, an internal one.
        code = code_in(reason) or ErrorCode.INTERNAL
        return TetherError(f"run {self.run_id} failed: {reason}", code=code)


Progress = Text | Activity | Ending


def start_request(prompt: str, agent: str, **options: object) -> StartRun:
    """The runs API's own start request; what does not validate is a 422 naming it."""
    try:
        return StartRun.model_validate({"prompt": prompt, "agent": agent, **options})
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise MessageError(problems, code=ErrorCode.INVALID_REQUEST) from None


class Follower:
    def __init__(self, manager: RunManager) -> None:
        self.manager = manager

    async def start(self, req: StartRun, who: Principal) -> str:
        """Start the run as `who` (every access rule of `POST /v1/runs` applies)."""
        return (await self.manager.start(req, who)).run_id

    async def follow(self, run_id: str, who: Principal, wait_s: float) -> AsyncIterator[Progress]:
        """The activity of a run `who` has just started, then one `Ending` (at `run.end`,
        or after `wait_s`). Listening starts first (deltas are not replayed), and nothing
        is yielded until `who` is authorised to read the run, so no caller can follow a
        run it may not read."""
        queue: asyncio.Queue[Live | Exception | None] = asyncio.Queue()
        # A reader of its own: the wait below can then time out without cancelling a read
        # of the stream halfway.
        pump = asyncio.create_task(self._pump(run_id, queue))
        clock = asyncio.get_running_loop().time
        deadline = clock() + wait_s
        try:
            await self.manager.follow(run_id, who)  # what it heard meanwhile waits queued
            while True:
                try:
                    item = await asyncio.wait_for(queue.get(), max(deadline - clock(), 0.0))
                except TimeoutError:
                    yield await self._waited_out(run_id, who)
                    return
                if isinstance(item, Exception):
                    raise item
                if isinstance(item, RunDelta):
                    if item.run_id == run_id and item.depth is None:
                        yield Text(item.step, item.text)
                    continue
                if item is None or (item.kind == "run.end" and item.run_id == run_id):
                    yield await self._ended(run_id, who, item)
                    return
                if item.kind in ACTIVITY:
                    yield Activity(item)
        finally:
            pump.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await pump

    async def _pump(self, run_id: str, queue: asyncio.Queue[Live | Exception | None]) -> None:
        try:
            async for item in self.manager.live(run_id, 0):
                queue.put_nowait(item)
            queue.put_nowait(None)
        except Exception as exc:  # handed to the reader, which raises it
            queue.put_nowait(exc)

    async def _ended(self, run_id: str, who: Principal, event: RunEvent | None) -> Ending:
        if event is None:  # the stream ended without its `run.end`: the stored run
            return await self._waited_out(run_id, who, waited_out=False)
        end = RunEnd.model_validate(event.data)
        usage = Usage.model_validate(end.usage.model_dump(include=set(Usage.model_fields)))
        return Ending(run_id, end.status, end.stop_reason, end.answer, usage, output=end.output)

    async def _waited_out(self, run_id: str, who: Principal, *, waited_out: bool = True) -> Ending:
        view = await self.manager.get(run_id, who)
        return Ending(
            run_id,
            view.status,
            view.stop_reason,
            view.answer,
            view.usage,
            waited_out=waited_out,
            output=view.output,
        )
