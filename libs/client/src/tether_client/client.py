"""`TetherClient`: the brain's HTTP API — start, get, stop, queue a message, stream events;
explain a call's policy, an agent's tool catalogue, verify a run's audit trail; create,
list and revoke tokens."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from datetime import datetime
from types import TracebackType
from typing import Any

import httpx
from httpx_sse import aconnect_sse

from tether_common.errors import (
    AuthError,
    ConflictError,
    MessageError,
    NotFoundError,
    RemoteError,
    SafetyError,
    TetherError,
    from_wire,
)
from tether_common.messages.identity import CreateToken, TokenCreated, TokenList, TokenView
from tether_common.messages.runs import ListRuns, RunAccepted, RunEvent, RunList, RunView, StartRun
from tether_common.messages.tools import ToolDescriptor

DEFAULT_API_URL = "http://127.0.0.1:8700"


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
    """Turn an `{"error": {code, message}}` body into the matching `TetherError`."""
    if response.is_success:
        return
    try:
        error = response.json()["error"]
        code, message = str(error["code"]), str(error["message"])
        # The server's word on this one error; unsaid, the code's row in errors.CODES.
        retryable = error.get("retryable") if isinstance(error.get("retryable"), bool) else None
    except (ValueError, KeyError, TypeError):
        cls = _BY_STATUS.get(response.status_code, TetherError)
        raise cls(f"HTTP {response.status_code}: {response.text[:500]}") from None
    found = from_wire(code, message, retryable=retryable)
    if isinstance(found, RemoteError) and response.status_code in _BY_STATUS:
        found = _BY_STATUS[response.status_code](message, code=code, retryable=retryable)
    raise found


class TetherClient:
    """The brain's API; `token` (a principal's bearer token) goes with every request:
    none given, `TETHER_TOKEN` from the environment; `""` sends none (anonymous)."""

    def __init__(
        self, base_url: str = DEFAULT_API_URL, *, token: str | None = None, timeout: float = 30.0
    ) -> None:
        if token is None:
            token = os.environ.get("TETHER_TOKEN", "").strip()
        headers = {"Authorization": f"Bearer {token}"} if token else None
        self._http = httpx.AsyncClient(base_url=base_url, headers=headers, timeout=timeout)

    async def __aenter__(self) -> TetherClient:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        await self._http.aclose()

    async def _call(
        self, method: str, path: str, body: Any = None, *, headers: dict[str, str] | None = None
    ) -> Any:
        response = await self._http.request(method, path, json=body, headers=headers)
        raise_for_error(response)
        return response.json()

    async def start_run(self, prompt: str, **options: Any) -> RunAccepted:
        body = StartRun(prompt=prompt, **options).model_dump(exclude_none=True)
        return RunAccepted.model_validate(await self._call("POST", "/v1/runs", body))

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
        params = query.model_dump(mode="json", exclude_none=True, exclude={"version"})
        response = await self._http.get("/v1/runs", params=params)
        raise_for_error(response)
        return RunList.model_validate(response.json())

    async def get_run(self, run_id: str) -> RunView:
        return RunView.model_validate(await self._call("GET", f"/v1/runs/{run_id}"))

    async def stop_run(self, run_id: str) -> RunAccepted:
        return RunAccepted.model_validate(await self._call("POST", f"/v1/runs/{run_id}/stop"))

    async def queue_message(self, run_id: str, text: str) -> RunAccepted:
        reply = await self._call("POST", f"/v1/runs/{run_id}/messages", {"text": text})
        return RunAccepted.model_validate(reply)

    async def tools(self) -> list[ToolDescriptor]:
        return [ToolDescriptor.model_validate(t) for t in await self._call("GET", "/v1/tools")]

    async def explain(
        self,
        tool: str,
        args: dict[str, Any],
        *,
        agent: str | None = None,
        mode: str | None = None,
        tainted: bool = False,
    ) -> dict[str, Any]:
        """What the gates would decide for this call, and why (nothing runs)."""
        body = {"tool": tool, "args": args, "agent": agent, "mode": mode, "tainted": tainted}
        found: dict[str, Any] = await self._call("POST", "/v1/policy/explain", body)
        return found

    async def tool_catalog(self, agent_id: str) -> dict[str, Any]:
        """Every tool with its scope, reach and whether (and by what) `agent_id` has it."""
        found: dict[str, Any] = await self._call("GET", f"/v1/agents/{agent_id}/tool-catalog")
        return found

    async def run_tool(
        self,
        tool: str,
        args: dict[str, Any],
        token: str,
        *,
        agent: str | None = None,
        approval_id: str | None = None,
    ) -> dict[str, Any]:
        """An operator's manual tool run through the same gates as a run's calls (operator
        token). Returns the tool result, or `{"decision": "ask", "approval_id": …}` when
        the gates want an approval first; a refusal raises."""
        body = {"tool": tool, "args": args, "agent": agent, "approval_id": approval_id}
        headers = {"Authorization": f"Bearer {token}"}
        response = await self._http.post("/v1/tools/run", json=body, headers=headers)
        if response.status_code == 403 and response.json().get("decision") == "ask":
            asked: dict[str, Any] = response.json()
            return asked
        raise_for_error(response)
        found: dict[str, Any] = response.json()
        return found

    async def verify_audit(self, run_id: str, token: str) -> dict[str, Any]:
        """The brain's check of a run's audit trail against its kept head (operator token)."""
        headers = {"Authorization": f"Bearer {token}"}
        found: dict[str, Any] = await self._call("GET", f"/v1/audit/{run_id}", headers=headers)
        return found

    async def create_token(self, body: CreateToken) -> TokenCreated:
        """A new principal's token (admin); the plain token is in the answer, only there."""
        found = await self._call("POST", "/v1/tokens", body.model_dump(exclude_none=True))
        return TokenCreated.model_validate(found)

    async def list_tokens(self) -> TokenList:
        return TokenList.model_validate(await self._call("GET", "/v1/tokens"))

    async def revoke_token(self, token_id: str) -> TokenView:
        return TokenView.model_validate(await self._call("DELETE", f"/v1/tokens/{token_id}"))

    async def events(self, run_id: str, *, after: int = 0) -> AsyncIterator[RunEvent]:
        """The run's events after `after`, live, ending with `run.end`."""
        headers = {"Last-Event-ID": str(after)} if after else {}
        async with aconnect_sse(
            self._http, "GET", f"/v1/runs/{run_id}/events", headers=headers, timeout=None
        ) as source:
            raise_for_error(source.response)
            async for sse in source.aiter_sse():
                if not sse.data:
                    continue
                event = RunEvent.model_validate(json.loads(sse.data))
                yield event
                if event.kind == "run.end":
                    return
