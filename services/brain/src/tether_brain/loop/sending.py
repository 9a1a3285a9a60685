"""Sending one planned call to the tools-runner with its idempotency key: waited for
while no runner listens (a restart) or while its MCP server is still connecting, sent
again after a lost reply (the runner never runs a key twice), and `in_doubt` reported as
interrupted. Also the wait for the runner's tool catalogue, before a step offers tools or
a recovery learns what its calls were."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from tether_brain.loop.planned import UNSETTLED, Planned, refusal
from tether_brain.loop.subagents import workspace_of
from tether_brain.state.events import emit
from tether_brain.state.run import RunState
from tether_brain.tools.results import interrupted, refused
from tether_brain.tools.toolbox import NO_RUNNER, RUNNER_LOST, Toolbox
from tether_common.errors import TetherError
from tether_common.messages.events import Guard
from tether_common.messages.tools import IN_DOUBT, TOOL_NOT_READY, ToolResult, mcp_server_of
from tether_common.retrying import Policy, delay_s

log = logging.getLogger(__name__)
MAX_ATTEMPTS = 3
# The wait before sending a call again after a lost reply (a runner restarting).
RESEND = Policy("resending a call whose reply was lost", 1.0, 2.0, jitter=False)
WAIT_POLL_S = 0.5  # between sends to a service nobody answers for, within the wait

Replan = Callable[[RunState, Planned], Planned]  # the gates again, for a call sent again


class Sender:
    def __init__(self, toolbox: Toolbox, replan: Replan, *, service_wait_s: float) -> None:
        self.toolbox = toolbox
        self.replan = replan
        self.service_wait_s = service_wait_s  # how long a call waits for a runner to listen

    async def send(self, state: RunState, item: Planned, tree: list[str]) -> ToolResult:
        """Send the call to the runner. With no reply (the runner died mid-call, or the
        reply was lost) the call is sent again, at most 3 times in all: an idempotent one
        through every gate again; any other with the same key, which the runner never runs
        twice (it answers the recorded outcome, waits for a run still going, or says the
        outcome is in doubt, reported as interrupted)."""
        assert item.tool is not None
        lost = item.resent
        for attempt in range(1, MAX_ATTEMPTS + 1):
            result = await self._delivered(state, item, tree)
            if result.error_code == IN_DOUBT:
                return refused(item.call, "interrupted", _after_colon(result.content))
            if result.error_code != RUNNER_LOST:
                if lost and not item.tool.idempotent and result.error_code in UNSETTLED:
                    break  # this send did not run, which says nothing of the lost one
                return result
            lost = True
            if attempt == MAX_ATTEMPTS:
                break
            await asyncio.sleep(delay_s(RESEND, attempt))
            if item.tool.idempotent:
                again = self.replan(state, item)
                if again.decision != "run":
                    return refusal(again)
        return result if item.tool.idempotent else interrupted(item.call)

    async def _delivered(self, state: RunState, item: Planned, tree: list[str]) -> ToolResult:
        """One send of the call, repeated while no runner listens (a restart) or while
        the runner says the tool's MCP server is still connecting (`tool_not_ready`), for
        at most `service_wait_s` in all: either way the call was not run, so sending it
        again is safe whatever the tool. The gates judged the call before the first send;
        the runner, not the model, says it is not ready, and only for a configured
        server. The run says once per service that it waits. Still undelivered after the
        wait, the result says the call did not run (never "outcome unknown")."""
        assert item.tool is not None
        deadline = time.monotonic() + self.service_wait_s
        told: set[str] = set()
        while True:
            result = await self.toolbox.execute(
                state.run_id,
                item.call,
                item.tool,
                tree,
                workspace=workspace_of(state),
                retry_in_doubt=item.retry_in_doubt,
                staged=item.staged,
            )
            awaited = _awaited(result, item.tool.name)
            if awaited is None:
                return result
            if time.monotonic() >= deadline:
                return _waited_out(result, item.tool.name, self.service_wait_s)
            if awaited.service not in told:
                told.add(awaited.service)
                say_waiting(state, awaited, self.service_wait_s, call_id=item.call.id)
            await asyncio.sleep(min(WAIT_POLL_S, max(0.0, deadline - time.monotonic())))


async def await_catalogue(state: RunState, toolbox: Toolbox, wait_s: float) -> None:
    """Load the tool catalogue if none is known yet, waiting up to `wait_s` for a runner
    to answer (once known, a failed refresh keeps the last one). With none after the wait
    the caller goes on without: a step ends `tools_unavailable`, a recovery reports each
    call interrupted."""
    deadline = time.monotonic() + wait_s
    told = False
    while True:
        try:
            await toolbox.catalog()
            return
        except TetherError as exc:
            if time.monotonic() >= deadline:
                log.warning("run %s: no tool catalogue: %s", state.run_id, exc)
                return
        if not told:
            told = True
            emit(
                state,
                Guard(step=state.step, kind="waiting", service=RUNNER.service, wait_s=wait_s),
            )
        await asyncio.sleep(min(WAIT_POLL_S, max(0.0, deadline - time.monotonic())))


@dataclass(frozen=True, slots=True)
class Awaited:
    """What a call waits for: `service` as the run's `waiting` event names it, `who` in
    the log's words."""

    service: str
    who: str


RUNNER = Awaited("tools-runner", "a runner")


def mcp_server(server: str) -> Awaited:
    return Awaited(f"mcp.{server}", f"the MCP server {server}")


def say_waiting(state: RunState, awaited: Awaited, wait_s: float, *, call_id: str) -> None:
    """The run says (a `guard` event of kind `waiting`) that a call waits."""
    log.info("run %s waits for %s (up to %ss)", state.run_id, awaited.who, wait_s)
    emit(
        state,
        Guard(
            step=state.step,
            kind="waiting",
            service=awaited.service,
            call_id=call_id,
            wait_s=wait_s,
        ),
    )


def _awaited(result: ToolResult, name: str) -> Awaited | None:
    """What a call's answer says to wait for before sending it again: a runner (nobody
    listened) or the tool's MCP server (still connecting); None: the answer stands."""
    if result.error_code == NO_RUNNER:
        return RUNNER
    server = mcp_server_of(name)
    if result.error_code == TOOL_NOT_READY and server is not None:
        return mcp_server(server)
    return None


def _waited_out(result: ToolResult, name: str, waited_s: float) -> ToolResult:
    """The answer once the wait is over: a call whose MCP server did not come up says
    so, as a final answer; a call no runner received keeps its own (not run)."""
    if result.error_code != TOOL_NOT_READY:
        return result
    server = mcp_server_of(name)
    return result.model_copy(
        update={
            "content": f"FAILED: {TOOL_NOT_READY}: not run: the MCP server '{server}' was "
            f"still connecting after {waited_s:g}s, so {name} could not be loaded. "
            "Tell the user it is unavailable for now; do not guess a result."
        }
    )


def _after_colon(content: str) -> str:
    """The runner's explanation of a failure, without its `FAILED: code:` head."""
    return content.split(": ", 2)[-1] if content.startswith("FAILED: ") else content
