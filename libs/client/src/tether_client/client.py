"""`TetherClient`: the brain's HTTP API, every answer a typed model — runs (start, get,
list, stop, queue a message, follow their events, wait for their end), threads (create, send, read, list,
delete, chat), the policy API (explain a call, an agent's tool catalogue, a manual tool
run, verify a run's audit trail), tokens and the kill switch.

Errors: every refusal raises the `tether_common.errors` class of its wire code, with
`code`, `message`, `retryable` and the HTTP `status`; a body the client cannot read as the
route's model raises `MessageError` (`invalid_message`), never a half-read value.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import AsyncGenerator, Callable, Mapping
from contextlib import aclosing
from datetime import datetime
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final, TypeVar

import httpx
from httpx_sse import aconnect_sse
from pydantic import BaseModel, TypeAdapter, ValidationError

from tether_common.errors import (
    AuthError,
    ConflictError,
    ErrorCode,
    MessageError,
    NotFoundError,
    RemoteError,
    SafetyError,
    TetherError,
    from_wire,
)
from tether_common.messages.audit import AuditReport
from tether_common.messages.deltas import RunDelta
from tether_common.messages.events import TypedEvent, typed
from tether_common.messages.policy import (
    AgentCatalog,
    ExplainBody,
    Explanation,
    ManualRunBody,
    ToolRunAsked,
)
from tether_common.messages.runs import (
    TERMINAL_STATUSES,
    ListRuns,
    PermissionMode,
    RunAccepted,
    RunEvent,
    RunList,
    RunView,
    StartRun,
)
from tether_common.messages.tools import ToolDescriptor
from tether_common.messages.tools import ToolResult as ToolRunResult

# The agents', threads' and tokens' models load with the first call that needs them: a
# command that only reads runs (`tether runs list`) does not pay for building them.
if TYPE_CHECKING:
    from tether_common.messages.agents import AgentConfig, AgentView
    from tether_common.messages.identity import CreateToken, TokenCreated, TokenList, TokenView
    from tether_common.messages.kills import KillList, KillRequest, KillView, LiftRequest
    from tether_common.messages.threads import (
        ThreadBudgets,
        ThreadList,
        ThreadTurnAccepted,
        ThreadView,
        WorkspaceScope,
    )

__all__ = [
    "DEFAULT_API_URL",
    "TetherClient",
    "ToolRunResult",
    "raise_for_error",
]

DEFAULT_API_URL = "http://127.0.0.1:8700"

log = logging.getLogger(__name__)

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)

_TOOLS: Final = TypeAdapter(list[ToolDescriptor])

# `wait`'s pauses between looks at a run whose stream dropped (a brain restarting):
# doubling from the first to the last, so a restart is noticed soon and not hammered.
WAIT_RETRY_FIRST_S = 0.25
WAIT_RETRY_MAX_S = 4.0

# A code the wire table does not know is classed by its HTTP status, so a caller (the
# CLI's exit codes) can still tell a refusal from a missing thing from a conflict.
_BY_STATUS: dict[int, type[TetherError]] = {
    400: MessageError,
    401: AuthError,
    403: SafetyError,
    404: NotFoundError,
    409: ConflictError,
    410: NotFoundError,
    412: ConflictError,
    422: MessageError,
}


def raise_for_error(response: httpx.Response) -> None:
    """Turn an `{"error": {code, message}}` body into the matching `TetherError`, its
    `status` the response's."""
    if response.is_success:
        return
    try:
        error = response.json()["error"]
        code, message = str(error["code"]), str(error["message"])
        # The server's word on this one error; unsaid, the code's row in errors.CODES.
        retryable = error.get("retryable") if isinstance(error.get("retryable"), bool) else None
    except (ValueError, KeyError, TypeError):
        cls = _BY_STATUS.get(response.status_code, TetherError)
        found: TetherError = cls(f"HTTP {response.status_code}: {response.text[:500]}")
    else:
        found = from_wire(code, message, retryable=retryable)
        if isinstance(found, RemoteError) and response.status_code in _BY_STATUS:
            found = _BY_STATUS[response.status_code](message, code=code, retryable=retryable)
    found.status = response.status_code
    raise found from None


def _parse(validate: Callable[[bytes], T], response: httpx.Response) -> T:
    """The body as the route's model; a body that is not one is a `MessageError`."""
    try:
        return validate(response.content)
    except ValidationError as exc:
        where = f"{response.request.method} {response.request.url.path}"
        log.warning("unreadable answer to %s: %s", where, exc.errors()[:3])
        error = MessageError(
            f"the answer to {where} is not what the route promises: {exc.errors()[:3]}",
            code=ErrorCode.INVALID_MESSAGE,
        )
        error.status = response.status_code
        raise error from None


def _tenant(tenant: str | None) -> dict[str, str | int] | None:
    """The `?tenant=` of an agent's route (an agent id is unique within its tenant)."""
    return None if tenant is None else {"tenant": tenant}


def _definition(agent: AgentConfig) -> dict[str, Any]:
    """What the agent was given, without a view's own fields (id, version, changed_*)."""
    from tether_common.messages.agents import AgentConfig, AgentView

    own = set(AgentView.model_fields) - set(AgentConfig.model_fields)
    return agent.model_dump(mode="json", exclude_unset=True, exclude=own)


def _body(model: BaseModel) -> dict[str, Any]:
    return model.model_dump(mode="json", exclude_none=True, exclude={"version"})


class TetherClient:
    """The brain's API; `token` (a principal's bearer token) goes with every request:
    none given, `TETHER_TOKEN` from the environment; `""` sends none (anonymous).
    `transport`: an httpx transport for tests (`httpx.MockTransport`)."""

    def __init__(
        self,
        base_url: str = DEFAULT_API_URL,
        *,
        token: str | None = None,
        timeout: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        if token is None:
            token = os.environ.get("TETHER_TOKEN", "").strip()
        headers = {"Authorization": f"Bearer {token}"} if token else None
        self._http = httpx.AsyncClient(
            base_url=base_url, headers=headers, timeout=timeout, transport=transport
        )

    async def __aenter__(self) -> TetherClient:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        await self._http.aclose()

    async def _send(
        self,
        method: str,
        path: str,
        body: BaseModel | None = None,
        *,
        params: Mapping[str, str | int] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> httpx.Response:
        content = _body(body) if body is not None else None
        response = await self._http.request(
            method, path, json=content, params=params, headers=headers
        )
        raise_for_error(response)
        return response

    async def _call(
        self,
        model: type[M],
        method: str,
        path: str,
        body: BaseModel | None = None,
        *,
        params: Mapping[str, str | int] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> M:
        response = await self._send(method, path, body, params=params, headers=headers)
        return _parse(model.model_validate_json, response)

    # -- runs

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
        return await self._call(RunList, "GET", "/v1/runs", params=_body(query))

    async def get_run(self, run_id: str) -> RunView:
        return await self._call(RunView, "GET", f"/v1/runs/{run_id}")

    async def stop_run(self, run_id: str) -> RunAccepted:
        return await self._call(RunAccepted, "POST", f"/v1/runs/{run_id}/stop")

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

    async def live(
        self, run_id: str, *, after: int = 0, deltas: bool = True
    ) -> AsyncGenerator[RunEvent | RunDelta, None]:
        """The run's durable events after `after`, live, ending with `run.end`, and between
        them (with `deltas`) the model's text as it is written (`RunDelta`: not replayed,
        no `seq`; a reader that reconnects resumes after the last durable event)."""
        headers = {"Last-Event-ID": str(after)} if after else {}
        path = f"/v1/runs/{run_id}/events"
        params = {"deltas": "true" if deltas else "false"}
        async with aconnect_sse(
            self._http, "GET", path, headers=headers, params=params, timeout=None
        ) as source:
            raise_for_error(source.response)
            async for sse in source.aiter_sse():
                if not sse.data:
                    continue
                # Durable events are named by their kind (`event: run.start` ...) and carry
                # an id to resume after; live text is `event: delta`, with no id.
                if sse.event == "delta":
                    yield RunDelta.model_validate_json(sse.data)
                    continue
                event = RunEvent.model_validate(json.loads(sse.data))
                yield event
                if event.kind == "run.end":
                    return

    async def events(self, run_id: str, *, after: int = 0) -> AsyncGenerator[RunEvent, None]:
        """The run's events after `after` as the wire carries them (`data` a JSON object),
        live, ending with `run.end`; `typed_events` reads each as its kind's model. For a
        reader that must show even what it cannot read (the CLI's renderer). No live
        text: `live` is for a reader that shows it (`tether chat`)."""
        async with aclosing(self.live(run_id, after=after, deltas=False)) as items:
            async for item in items:
                if isinstance(item, RunEvent):
                    yield item

    async def typed_events(
        self, run_id: str, *, after: int = 0
    ) -> AsyncGenerator[TypedEvent, None]:
        """The run's events after `after`, each as its kind's model, live, ending with
        `run.end`. An event whose data its kind cannot hold raises `MessageError` (its
        `seq` in the message): follow again with `after` set past it."""
        # `aclosing`: a reader that stops early closes the stream now, not at collection.
        async with aclosing(self.events(run_id, after=after)) as stream:
            async for event in stream:
                try:
                    read = typed(event)
                except ValidationError as exc:
                    log.warning("unreadable %s event %d of %s", event.kind, event.seq, run_id)
                    raise MessageError(
                        f"event {event.seq} of {run_id} ({event.kind}) does not fit its kind: "
                        f"{exc.errors()[:3]}",
                        code=ErrorCode.INVALID_MESSAGE,
                    ) from None
                yield read

    # -- threads

    async def create_thread(
        self,
        *,
        agent: str | None = None,
        title: str | None = None,
        provider: str | None = None,
        model: str | None = None,
        workspace: WorkspaceScope = "thread",
        budgets: ThreadBudgets | None = None,
    ) -> ThreadView:
        """A new conversation; its runs share history (and, with `workspace="thread"`,
        one workspace folder) and use `provider`/`model` (None: the brain's); `budgets`
        cap the sum over its turns."""
        from tether_common.messages.threads import CreateThread, ThreadBudgets, ThreadView

        body = CreateThread(
            agent=agent,
            title=title,
            provider=provider,
            model=model,
            workspace=workspace,
            budgets=budgets or ThreadBudgets(),
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
        return await self._call(ThreadList, "GET", "/v1/threads", params=_body(query))

    async def delete_thread(self, thread_id: str) -> None:
        """Stop its live turn and forget it (its history is no longer served)."""
        await self._send("DELETE", f"/v1/threads/{thread_id}")

    async def chat(self, thread_id: str, text: str) -> AsyncGenerator[TypedEvent, None]:
        """Send `text` to the thread and yield its run's events until the run ends."""
        accepted = await self.send_message(thread_id, text)
        async with aclosing(self.typed_events(accepted.run_id)) as stream:
            async for event in stream:
                yield event

    # -- agents

    async def list_agents(self) -> list[AgentView]:
        """The agents the caller may read."""
        from tether_common.messages.agents import AgentList

        return (await self._call(AgentList, "GET", "/v1/agents")).agents

    async def get_agent(self, agent_id: str, tenant: str | None = None) -> AgentView:
        """The agent `agent_id` names for the caller (its tenant's, else a shared one);
        `tenant`: that tenant's (an admin's choice)."""
        from tether_common.messages.agents import AgentView

        return await self._call(AgentView, "GET", f"/v1/agents/{agent_id}", params=_tenant(tenant))

    async def create_agent(self, agent_id: str, definition: AgentConfig) -> AgentView:
        """A new agent; only the fields `definition` was given are sent (the rest are the
        server's defaults)."""
        from tether_common.messages.agents import AgentView

        body = {"id": agent_id, **_definition(definition)}
        response = await self._http.post("/v1/agents", json=body)
        raise_for_error(response)
        return _parse(AgentView.model_validate_json, response)

    async def replace_agent(
        self, agent_id: str, definition: AgentConfig, *, version: int, tenant: str | None = None
    ) -> AgentView:
        """The agent's whole definition replaced, if it still stands at `version` (else
        `ConflictError`)."""
        from tether_common.messages.agents import AgentView

        response = await self._http.put(
            f"/v1/agents/{agent_id}",
            json=_definition(definition),
            params=_tenant(tenant),
            headers={"If-Match": f'"{version}"'},
        )
        raise_for_error(response)
        return _parse(AgentView.model_validate_json, response)

    async def delete_agent(self, agent_id: str, tenant: str | None = None) -> None:
        await self._send("DELETE", f"/v1/agents/{agent_id}", params=_tenant(tenant))

    # -- tools and policy

    async def tools(self) -> list[ToolDescriptor]:
        return _parse(_TOOLS.validate_json, await self._send("GET", "/v1/tools"))

    async def explain(
        self,
        tool: str,
        args: dict[str, Any],
        *,
        agent: str | None = None,
        mode: PermissionMode | None = None,
        tainted: bool = False,
    ) -> Explanation:
        """What the gates would decide for this call, and why (nothing runs)."""
        body = ExplainBody(tool=tool, args=args, agent=agent, mode=mode, tainted=tainted)
        return await self._call(Explanation, "POST", "/v1/policy/explain", body)

    async def tool_catalog(self, agent_id: str) -> AgentCatalog:
        """Every tool with its scope, reach and whether (and by what) `agent_id` has it."""
        return await self._call(AgentCatalog, "GET", f"/v1/agents/{agent_id}/tool-catalog")

    async def run_tool(
        self,
        tool: str,
        args: dict[str, Any],
        token: str,
        *,
        agent: str | None = None,
        approval_id: str | None = None,
    ) -> ToolRunResult | ToolRunAsked:
        """An operator's manual tool run through the same gates as a run's calls (operator
        token). The tool's result, or `ToolRunAsked` (the approval request to decide, then
        send again with `approval_id`) when the gates want one first; a refusal raises."""
        body = ManualRunBody(tool=tool, args=args, agent=agent, approval_id=approval_id)
        headers = {"Authorization": f"Bearer {token}"}
        response = await self._http.post("/v1/tools/run", json=_body(body), headers=headers)
        if response.status_code == 403 and _is_ask(response):
            return _parse(ToolRunAsked.model_validate_json, response)
        raise_for_error(response)
        return _parse(ToolRunResult.model_validate_json, response)

    async def verify_audit(self, run_id: str, token: str) -> AuditReport:
        """The brain's check of a run's audit trail against its kept head (operator token)."""
        headers = {"Authorization": f"Bearer {token}"}
        return await self._call(AuditReport, "GET", f"/v1/audit/{run_id}", headers=headers)

    # -- tokens

    async def create_token(self, body: CreateToken) -> TokenCreated:
        """A new principal's token (admin); the plain token is in the answer, only there."""
        from tether_common.messages.identity import TokenCreated

        return await self._call(TokenCreated, "POST", "/v1/tokens", body)

    async def list_tokens(self) -> TokenList:
        from tether_common.messages.identity import TokenList

        return await self._call(TokenList, "GET", "/v1/tokens")

    async def revoke_token(self, token_id: str) -> TokenView:
        from tether_common.messages.identity import TokenView

        return await self._call(TokenView, "DELETE", f"/v1/tokens/{token_id}")

    # -- the kill switch

    async def kill(self, body: KillRequest) -> KillView:
        """Stop every running run in scope and refuse new ones until lifted (admin); the
        kill in force on that target (an existing one is returned as it was)."""
        from tether_common.messages.kills import KillView

        return await self._call(KillView, "POST", "/v1/kill", body)

    async def lift_kill(self, body: LiftRequest) -> KillView:
        """Lift the kill in force on the target (admin); 404 if there is none."""
        from tether_common.messages.kills import KillView

        return await self._call(KillView, "POST", "/v1/kill/lift", body)

    async def kills(self, *, lifted: bool = False) -> KillList:
        """The kills in force (with `lifted`, the lifted ones too) the caller may see."""
        from tether_common.messages.kills import KillList

        params = {"lifted": "true"} if lifted else None
        return await self._call(KillList, "GET", "/v1/kill", params=params)


def _is_ask(response: httpx.Response) -> bool:
    try:
        found = response.json()
    except ValueError:
        return False
    return isinstance(found, dict) and found.get("decision") == "ask"
