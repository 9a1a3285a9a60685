"""Sending one planned call to the tools-runner with its idempotency key: waited for
while no runner listens (a restart), sent again after a lost reply (the runner never runs
a key twice), and `in_doubt` reported as interrupted."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from tether_brain.loop.planned import UNSETTLED, Planned, refusal
from tether_brain.loop.subagents import workspace_of
from tether_brain.state.events import emit
from tether_brain.state.run import RunState
from tether_brain.tools.results import interrupted, refused
from tether_brain.tools.toolbox import NO_RUNNER, RUNNER_LOST, Toolbox
from tether_common.messages.events import Guard
from tether_common.messages.tools import IN_DOUBT, ToolResult

log = logging.getLogger(__name__)
MAX_ATTEMPTS = 3
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
            result = await self._delivered(state, item, tree, after_loss=lost)
            if result.error_code == IN_DOUBT:
                return refused(item.call, "interrupted", _after_colon(result.content))
            # A runner restarted after a loss may not know its MCP tools yet.
            recovering = lost and result.error_code == "unknown_tool"
            if result.error_code != RUNNER_LOST and not recovering:
                if lost and not item.tool.idempotent and result.error_code in UNSETTLED:
                    break  # this send did not run, which says nothing of the lost one
                return result
            lost = True
            if attempt == MAX_ATTEMPTS:
                break
            await asyncio.sleep(1.0 * attempt)
            if item.tool.idempotent:
                again = self.replan(state, item)
                if again.decision != "run":
                    return refusal(again)
        return result if item.tool.idempotent else interrupted(item.call)

    async def _delivered(
        self, state: RunState, item: Planned, tree: list[str], *, after_loss: bool
    ) -> ToolResult:
        """One send of the call, repeated while no runner listens (a restart), for at most
        `service_wait_s`: a call nobody received has not run, so sending it again is safe
        whatever the tool. A runner that has just come back may not know its MCP tools
        yet (`unknown_tool`: not run either), so that is waited out too. The run says
        once that it waits. Still undelivered after the wait, the result says the call
        did not run (never "outcome unknown")."""
        assert item.tool is not None
        deadline = time.monotonic() + self.service_wait_s
        told = False
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
            restarting = result.error_code == NO_RUNNER or (
                result.error_code == "unknown_tool" and (told or after_loss)
            )
            if not restarting or time.monotonic() >= deadline:
                return result
            if not told:
                told = True
                log.info("run %s waits for a runner (up to %ss)", state.run_id, self.service_wait_s)
                emit(
                    state,
                    Guard(
                        step=state.step,
                        kind="waiting",
                        service="tools-runner",
                        call_id=item.call.id,
                        wait_s=self.service_wait_s,
                    ),
                )
            await asyncio.sleep(min(WAIT_POLL_S, max(0.0, deadline - time.monotonic())))


def _after_colon(content: str) -> str:
    """The runner's explanation of a failure, without its `FAILED: code:` head."""
    return content.split(": ", 2)[-1] if content.startswith("FAILED: ") else content
