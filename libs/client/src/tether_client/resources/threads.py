"""Threads (`/v1/threads`): conversations whose runs share history — create, send, read,
list, delete, and `chat` (send, then follow the turn's run)."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import aclosing
from datetime import datetime
from typing import TYPE_CHECKING

from tether_client.resources.core import to_wire
from tether_client.resources.events import Events
from tether_common.messages.events import TypedEvent

# The threads' models load with the first call that needs them: a command that only
# reads runs (`tether runs list`) does not pay for building them.
if TYPE_CHECKING:
    from tether_common.messages.threads import (
        ThreadBudgets,
        ThreadList,
        ThreadTurnAccepted,
        ThreadView,
        WorkspaceScope,
    )

__all__ = ["Threads"]


class Threads(Events):
    """Conversations; a turn is a run, followed on its event stream."""

    async def create_thread(
        self,
        *,
        agent: str | None = None,
        title: str | None = None,
        provider: str | None = None,
        model: str | None = None,
        workspace: WorkspaceScope = "thread",
        budgets: ThreadBudgets | None = None,
        recall: int = 0,
    ) -> ThreadView:
        """A new conversation; its runs share history (and, with `workspace="thread"`,
        one workspace folder) and use `provider`/`model` (None: the brain's); `budgets`
        cap the sum over its turns; each turn recalls the owner's best `recall` memories
        into its prompt (0: none)."""
        from tether_common.messages.threads import CreateThread, ThreadBudgets, ThreadView

        body = CreateThread(
            agent=agent,
            title=title,
            provider=provider,
            model=model,
            workspace=workspace,
            budgets=budgets or ThreadBudgets(),
            recall=recall or None,  # none asked: not sent (a brain from before refuses it)
        )
        return await self._call(ThreadView, "POST", "/v1/threads", body)

    async def send_message(self, thread_id: str, text: str) -> ThreadTurnAccepted:
        """The thread's next user message: starts its next run (the accepted turn)."""
        from tether_common.messages.threads import ThreadMessageBody, ThreadTurnAccepted

        body = ThreadMessageBody(text=text)
        path = f"/v1/threads/{thread_id}/messages"
        return await self._call(ThreadTurnAccepted, "POST", path, body)

    async def get_thread(self, thread_id: str) -> ThreadView:
        from tether_common.messages.threads import ThreadView

        return await self._call(ThreadView, "GET", f"/v1/threads/{thread_id}")

    async def list_threads(self, *, before: datetime | None = None, limit: int = 50) -> ThreadList:
        """Threads, newest first; pass the page's `next` as `before` for the next page."""
        from tether_common.messages.threads import ListThreads, ThreadList

        query = ListThreads(before=before, limit=limit)
        return await self._call(ThreadList, "GET", "/v1/threads", params=to_wire(query))

    async def delete_thread(self, thread_id: str) -> None:
        """Stop its live turn and forget it (its history is no longer served)."""
        await self._send("DELETE", f"/v1/threads/{thread_id}")

    async def chat(self, thread_id: str, text: str) -> AsyncGenerator[TypedEvent, None]:
        """Send `text` to the thread and yield its run's events until the run ends."""
        accepted = await self.send_message(thread_id, text)
        async with aclosing(self.typed_events(accepted.run_id)) as stream:
            async for event in stream:
                yield event
