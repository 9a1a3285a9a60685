"""Threads as the client sees them: create, post a message (the next turn's run), read,
list, delete. Each method takes the caller's verified principal and checks it against the
stored thread (tenant, owner, the agent's owner) as the runs' do, with the same actions:
`runs.start` to create, `runs.message` (and `runs.start`) to post, `runs.read` to read
and list, `runs.stop` to delete. Out of reach looks exactly like missing (404).

A turn's run is an ordinary run with the thread's history (`history.carried`), the
thread's chat grants as session grants, the thread's workspace folder, and its budget's
remainder as limits; it belongs to the thread's tenant and owner whoever posts. A message
while the last turn's run has not ended is refused (409 `thread_busy`), not queued: the
caller sees the turn it waits for, and a turn never answers two messages at once (a
message for the live run itself goes to `POST /v1/runs/{id}/messages`)."""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from tether_brain.runs.manager import RunManager
from tether_brain.state.run import RunState, add_usage
from tether_brain.threads.history import carried
from tether_brain.threads.store import Spent, ThreadRow, ThreadStore, TurnRow
from tether_common.errors import ConflictError, ErrorCode
from tether_common.identity import Action, Principal
from tether_common.messages.gateway import ChatMessage
from tether_common.messages.runs import TERMINAL_STATUSES, StartRun, StopRun, Usage
from tether_common.messages.threads import (
    CreateThread,
    ListThreads,
    SendThreadMessage,
    ThreadBudgets,
    ThreadDeleted,
    ThreadList,
    ThreadStatus,
    ThreadSummary,
    ThreadTurn,
    ThreadTurnAccepted,
    ThreadView,
)

# The most a StartRun may ask for (its own bounds); a thread's remainder above is capped.
RUN_STEPS_MAX = 1000
RUN_CALLS_MAX = 1000


def remaining(budgets: ThreadBudgets, spent: Spent) -> dict[str, Any]:
    """The next run's limits from what the thread's turns have left (None: no thread
    limit); 409 `thread_budget_spent` when nothing is left to start a run with."""
    left: dict[str, Any] = {"max_seconds": budgets.max_seconds}
    if budgets.max_steps is not None:
        left["max_steps"] = min(budgets.max_steps - spent.steps, RUN_STEPS_MAX)
    if budgets.max_tool_calls is not None:
        left["max_tool_calls"] = min(
            max(budgets.max_tool_calls - spent.tool_calls, 0), RUN_CALLS_MAX
        )
    if budgets.max_tokens is not None:
        left["max_tokens"] = budgets.max_tokens - spent.tokens
    if budgets.max_cost is not None:
        left["max_cost"] = budgets.max_cost - spent.cost
    # Nothing left to start a run with: no step, no token, no money.
    spent_on: list[str] = [k for k in ("max_steps", "max_tokens") if k in left and left[k] < 1]
    if "max_cost" in left and left["max_cost"] <= 0:
        spent_on.append("max_cost")
    if spent_on:
        raise ConflictError(
            f"the thread's budget is spent ({', '.join(spent_on)})",
            code=ErrorCode.THREAD_BUDGET_SPENT,
        )
    return left


class ThreadManager:
    def __init__(self, store: ThreadStore, runs: RunManager) -> None:
        self.store = store
        self.runs = runs

    def _reach(self, who: Principal, action: Action, thread: ThreadRow) -> None:
        self.runs.access.require(who, action, thread.belongs, what=f"thread '{thread.thread_id}'")

    async def create(self, req: CreateThread, who: Principal) -> ThreadView:
        # Checked as its runs' starts will be: the agent, provider and model are usable,
        # and a token budget can be enforced (the run made here is never stored).
        self.runs.prepare(
            StartRun(
                prompt="-",
                agent=req.agent,
                provider=req.provider,
                model=req.model,
                max_tokens=req.budgets.max_tokens,
            ),
            who,
        )
        now = datetime.now(UTC)
        thread_id = f"thr_{uuid.uuid4().hex}"
        await self.store.create(
            {
                "thread_id": thread_id,
                "tenant": who.tenant,
                "owner": who.name,
                "agent": req.agent,
                "provider": req.provider,
                "model": req.model,
                "title": req.title,
                "workspace": req.workspace,
                "budgets": req.budgets.model_dump(mode="json", exclude_none=True),
                "recall": req.recall or 0,
                "created_at": now,
                "updated_at": now,
            }
        )
        return await self.get(thread_id, who)

    async def send(self, req: SendThreadMessage, who: Principal) -> ThreadTurnAccepted:
        """Start the thread's next turn: its run and the turn commit in one transaction
        under the thread's row lock, then the run is put in motion (a replica that dies
        in between leaves a queued, leased run that another adopts)."""
        self._reach(who, "runs.message", await self.store.find(req.thread_id))
        sent = self.runs.tasks.leases.clock()
        async with self.store.turn(req.thread_id) as (conn, thread):
            self._reach(who, "runs.message", thread)  # the locked row decides
            last = await self.store.turns(thread.thread_id, conn, last=True)
            if last and last[0].status not in TERMINAL_STATUSES:
                raise ConflictError(
                    f"thread '{thread.thread_id}' is still answering turn {last[0].turn} "
                    f"(run {last[0].run_id}, {last[0].status}); post again once it has ended",
                    code=ErrorCode.THREAD_BUSY,
                )
            budgets = ThreadBudgets.model_validate(thread.budgets)
            start = StartRun(
                prompt=req.text,
                agent=thread.agent,
                provider=thread.provider,
                model=thread.model,
                **remaining(budgets, await self.store.spent(conn, thread.thread_id)),
            )
            history = carried(await self.store.messages(conn, last[0].run_id)) if last else []
            grants = await self.store.chat_grants(conn, thread.thread_id)
            state = self._turn_state(self.runs.prepare(start, who), thread, history, grants)
            await self.runs.store.create(
                state,
                owner=self.runs.tasks.owner,
                lease_s=self.runs.settings.lease_s,
                conn=conn,
                admit=self.runs.quotas.admit,
            )
            turn = await self.store.add_turn(
                conn,
                thread,
                run_id=state.run_id,
                text=req.text,
                history=history,
                now=state.created_at,
            )
        self.runs.launch(state, leased_at=sent)
        return ThreadTurnAccepted(thread_id=thread.thread_id, run_id=state.run_id, turn=turn)

    def _turn_state(
        self, state: RunState, thread: ThreadRow, history: list[ChatMessage], grants: list[str]
    ) -> RunState:
        """The thread's run: its history first (journal rows 1..n), its grants, folder
        and owner."""
        options = state.options.model_copy(
            update={
                "thread_id": thread.thread_id,
                "history": len(history),
                "session_grants": tuple(sorted({*state.options.session_grants, *grants})),
                "workspace": thread.thread_id if thread.workspace == "thread" else None,
                "recall": thread.recall,
            }
        )
        state = replace(
            state,
            options=options,
            journal_seq=len(history),
            tenant=thread.tenant,
            owner=thread.owner,
        )
        # As a load replays a journal, so whatever the run keeps of its history (the call
        # cache, running sizes) is what a replica that reloads it will have.
        for message in history:
            state.replay("message", message.model_dump(mode="json"))
        return state

    async def get(self, thread_id: str, who: Principal) -> ThreadView:
        thread = await self.store.find(thread_id)
        self._reach(who, "runs.read", thread)
        done = await self.store.turns(thread_id)
        usage = Usage()
        for turn in done:
            usage = add_usage(usage, turn.usage)
        return ThreadView(
            thread_id=thread.thread_id,
            agent=thread.agent,
            title=thread.title,
            provider=thread.provider,
            model=thread.model,
            workspace="thread" if thread.workspace == "thread" else "shared",
            budgets=ThreadBudgets.model_validate(thread.budgets),
            recall=thread.recall,
            status=_status(done[-1].status if done else None),
            turns=[_view(turn) for turn in done],
            usage=usage,
            tenant=thread.tenant,
            owner=thread.owner,
            created_at=thread.created_at,
            updated_at=thread.updated_at,
        )

    async def list_threads(self, req: ListThreads, who: Principal) -> ThreadList:
        scope = who.reach("runs.read")
        owned: list[str] = []
        if scope.owner is not None:
            owned = self.runs.agents.owned_by(who.tenant, who.name)
        rows = await self.store.listing(scope, owned, req.before, req.limit)
        summaries = [
            ThreadSummary(
                thread_id=t.thread_id,
                agent=t.agent,
                title=t.title,
                status=_status(status),
                turns=t.turns,
                tenant=t.tenant,
                owner=t.owner,
                created_at=t.created_at,
                updated_at=t.updated_at,
            )
            for t, status in rows
        ]
        more = len(rows) == req.limit
        return ThreadList(threads=summaries, next=summaries[-1].created_at if more else None)

    async def delete(self, thread_id: str, who: Principal) -> ThreadDeleted:
        """Mark it deleted (no route serves it again), then stop its live turn."""
        self._reach(who, "runs.stop", await self.store.find(thread_id))
        await self.store.delete(thread_id, datetime.now(UTC))
        last = await self.store.turns(thread_id, last=True)
        if last and last[0].status not in TERMINAL_STATUSES:
            await self.runs.stop(StopRun(run_id=last[0].run_id), who)
        return ThreadDeleted(thread_id=thread_id)


def _status(last: str | None) -> ThreadStatus:
    return "idle" if last is None or last in TERMINAL_STATUSES else "running"


def _view(turn: TurnRow) -> ThreadTurn:
    return ThreadTurn(
        turn=turn.turn,
        run_id=turn.run_id,
        text=turn.text,
        answer=turn.answer,
        status=turn.status,
        stop_reason=turn.stop_reason,
        usage=turn.usage,
        steps=turn.steps,
        created_at=turn.created_at,
    )
