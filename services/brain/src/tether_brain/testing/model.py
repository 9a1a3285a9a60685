"""The gateway's `scripted` provider in process: the same scripts, played by the same code
(`tether_common.scripted`), each call fitted to the offered tools as the gateway does, and
collected into a `ModelTurn` as `ModelClient` collects the gateway's stream."""

from __future__ import annotations

import uuid
from typing import Any

from tether_brain.clients.model import LiveTarget, ModelTurn, collect
from tether_brain.state.clock import SYSTEM_CLOCK, Clock
from tether_brain.state.run import RunState
from tether_common.errors import ErrorCode
from tether_common.messages.gateway import ErrorEvent, GenerateRequest
from tether_common.scripted import Script, fitted, play
from tether_common.testing.scripts import Turn


class ScriptedModel:
    """On the `clients.model.ModelPort` protocol. Scripts are found by the request's
    `model`, as the gateway finds `<model>.json`; every request is kept (`requests`)."""

    def __init__(self, clock: Clock = SYSTEM_CLOCK) -> None:
        self.clock = clock  # a `pause_s` sleeps on it
        self.scripts: dict[str, Script] = {}
        self.requests: list[GenerateRequest] = []
        self.lives: list[LiveTarget | None] = []  # each request's live target (None: none)

    def add(self, turns: list[Turn], helpers: dict[str, list[Turn]] | None = None) -> str:
        """A script of `turns` (and the helpers' turns by task); returns its name, the
        run's `model` (as `tether_common.testing.write_script` does for the gateway)."""
        name = f"s{uuid.uuid4().hex[:10]}"
        body: dict[str, Any] = {"turns": turns}
        if helpers:
            body["helpers"] = {task: {"turns": t} for task, t in helpers.items()}
        self.scripts[name] = body
        return name

    def live_target(self, state: RunState) -> LiveTarget:
        """No live text in process: a target that nothing is published to."""
        return LiveTarget("", state.run_id, state.step, state.event_seq, state.tenant, None)

    async def generate(
        self, request: GenerateRequest, *, live: LiveTarget | None = None
    ) -> ModelTurn:
        self.requests.append(request)
        self.lives.append(live)
        turn = ModelTurn()
        script = self.scripts.get(request.model or "")
        if script is None:  # as the gateway answers a script it cannot find
            message = f"no script named '{request.model}' in process"
            turn.error = ErrorEvent(code=ErrorCode.SCRIPT_INVALID, message=message)
            return turn
        async for event in play(script, request, sleep=self.clock.sleep):
            collect(turn, fitted(event, request.tools))
        return turn
