"""Runs (`/v1/runs`): start, read, list, stop, queue a message, wait for the end, and a
run whose output is a typed model (`run`)."""

from __future__ import annotations

import asyncio
import logging
from contextlib import aclosing
from datetime import datetime
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel

from tether_client.resources.core import to_wire
from tether_client.resources.events import Events
from tether_client.typed import output_schema, typed_output
from tether_common.errors import TetherError
from tether_common.messages.runs import (
    TERMINAL_STATUSES,
    ListRuns,
    RunAccepted,
    RunList,
    RunView,
    StartRun,
)

__all__ = ["WAIT_RETRY_FIRST_S", "WAIT_RETRY_MAX_S", "Runs"]

log = logging.getLogger(__name__)

M = TypeVar("M", bound=BaseModel)

# `wait`'s pauses between looks at a run whose stream dropped (a brain restarting):
# doubling from the first to the last, so a restart is noticed soon and not hammered.
WAIT_RETRY_FIRST_S = 0.25
WAIT_RETRY_MAX_S = 4.0


class Runs(Events):
    """A run's life from the caller's side."""

    async def start_run(self, /, prompt: str, **options: Any) -> RunAccepted:
        """Start a run; `options` are `StartRun`'s fields (agent, model, mode, budgets…)."""
        return await self._call(RunAccepted, "POST", "/v1/runs", StartRun(prompt=prompt, **options))

    async def list_runs(
        self,
        *,
        status: str | None = None,
        parent_id: str | None = None,
        before: datetime | None = None,
        limit: int = 50,
    ) -> RunList:
        """Runs, newest first; pass the last `created_at` as `before` for the next page."""
        query = ListRuns.model_validate(
            {"status": status, "parent_id": parent_id, "before": before, "limit": limit}
        )
        return await self._call(RunList, "GET", "/v1/runs", params=to_wire(query))

    async def get_run(self, run_id: str) -> RunView:
        return await self._call(RunView, "GET", f"/v1/runs/{run_id}")

    async def stop_run(self, run_id: str) -> RunAccepted:
        return await self._call(RunAccepted, "POST", f"/v1/runs/{run_id}/stop")

    async def run(
        self,
        /,
        prompt: str,
        *,
        output_type: type[M],
        timeout: float | None = 300.0,
        **options: Any,
    ) -> M:
        """Run to the end and answer the run's output as an `output_type` (a pydantic
        model, as pydantic-ai's and the Agents SDK's `output_type`): its JSON Schema goes
        as the run's `output_schema` (the agent's own, if any, holds too), the brain sends
        an answer that does not fit back to the model, and the validated object comes
        back as an instance. `options` are `StartRun`'s; `timeout` is `wait`'s. A run
        that ends without an output raises (`tether_client.typed.typed_output`):
        `output_invalid` naming the violation when no answer fit."""
        schema = output_schema(output_type)
        accepted = await self.start_run(prompt, output_schema=schema, **options)
        view = await self.wait(accepted.run_id, timeout=timeout)
        return typed_output(view, output_type)

    async def wait(self, run_id: str, *, timeout: float | None = 300.0) -> RunView:
        """Wait for the run to end and answer its finished view (status, answer, usage,
        steps), as LangGraph's `client.runs.wait`. It follows the run's event stream (no
        polling while the stream is up); a stream that drops (a brain restart, a network
        cut) is resumed after the last event seen. Past `timeout` seconds (None: no
        bound) it raises `TimeoutError`; the run goes on. A run the caller may not read
        raises as `get_run` does."""
        try:
            async with asyncio.timeout(timeout):
                return await self._wait(run_id)
        except TimeoutError:
            if timeout is None:
                raise
            raise TimeoutError(
                f"run {run_id} did not end within {timeout:g} s; it goes on (follow it, or "
                "wait again)"
            ) from None

    async def _wait(self, run_id: str) -> RunView:
        after, ended, pause = 0, False, WAIT_RETRY_FIRST_S
        while True:
            if not ended:
                try:
                    async with aclosing(self.events(run_id, after=after)) as stream:
                        async for event in stream:
                            after, ended = event.seq, event.kind == "run.end"
                            pause = WAIT_RETRY_FIRST_S  # it was up: a new drop starts short
                except httpx.TransportError as exc:
                    log.info("the event stream of %s dropped (%s); resuming", run_id, exc)
                except TetherError as exc:
                    if not exc.retryable:
                        raise
            view = await self._view_now(run_id)
            if view is not None and view.status in TERMINAL_STATUSES:
                return view
            # Ended but not yet terminal in the view (its write trails the event), or the
            # stream closed early, or the brain is away: look again shortly.
            await asyncio.sleep(pause)
            pause = min(pause * 2, WAIT_RETRY_MAX_S)

    async def _view_now(self, run_id: str) -> RunView | None:
        """The run's view, or None while the brain cannot say (unreachable, restarting)."""
        try:
            return await self.get_run(run_id)
        except httpx.TransportError:
            return None
        except TetherError as exc:
            if exc.retryable:
                return None
            raise

    async def queue_message(self, run_id: str, text: str) -> RunAccepted:
        from tether_common.messages.threads import ThreadMessageBody

        body = ThreadMessageBody(text=text)  # the `{text}` body runs and threads share
        return await self._call(RunAccepted, "POST", f"/v1/runs/{run_id}/messages", body)
