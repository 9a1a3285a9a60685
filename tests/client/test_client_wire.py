"""The typed client against the brain's documented wire format, served by an httpx
`MockTransport` (the routes' bodies built from the same `tether_common.messages` models
the brain answers with): every method answers its model, refusals raise the error class
of their code with its status, an unreadable body is a structured `MessageError`, live
text in the event stream is skipped, and the sync facade is the same API, blocking."""

from __future__ import annotations

import asyncio
import inspect
import json
import threading
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from tether_client import SyncTetherClient, TetherClient
from tether_client.client import ToolRunResult
from tether_client.sync import blocking, blocking_iter
from tether_common.errors import (
    ConflictError,
    ErrorCode,
    MessageError,
    NotFoundError,
    SafetyError,
    TetherError,
)
from tether_common.messages.agents import AgentConfig, AgentList, AgentView
from tether_common.messages.audit import AuditReport
from tether_common.messages.base import ErrorDetail
from tether_common.messages.events import RunEndEvent, StepEvent, ToolResultEvent
from tether_common.messages.policy import AgentCatalog, Explanation, ToolRunAsked
from tether_common.messages.runs import RunAccepted, RunView
from tether_common.messages.threads import (
    ThreadBudgets,
    ThreadList,
    ThreadSummary,
    ThreadTurn,
    ThreadTurnAccepted,
    ThreadView,
)

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
BASE = "http://brain.test"
THREAD = ThreadView(
    thread_id="thr_1",
    agent="writer",
    title="notes",
    status="idle",
    turns=[
        ThreadTurn(
            turn=1, run_id="run_1", text="hi", answer="hello", status="completed", created_at=NOW
        )
    ],
    created_at=NOW,
    updated_at=NOW,
)
RUN = RunView(
    run_id="run_2",
    status="completed",
    prompt="x",
    provider="scripted",
    created_at=NOW,
    updated_at=NOW,
)


def sse(*events: tuple[str | None, dict[str, Any]]) -> bytes:
    """An SSE body as the brain writes it: each (type, data); type None is a durable event,
    named by its kind and with its `id:`; `delta` (live text) has no id."""
    lines: list[str] = []
    for kind, data in events:
        if kind is None:
            lines += [f"event: {data['kind']}", f"id: {data['seq']}"]
        else:
            lines += [f"event: {kind}"]
        lines += [f"data: {json.dumps(data)}", ""]
    return ("\n".join(lines) + "\n").encode()


def event(seq: int, kind: str, data: dict[str, Any]) -> dict[str, Any]:
    return {"run_id": "run_2", "seq": seq, "kind": kind, "ts": NOW.isoformat(), "data": data}


EVENTS = sse(
    (None, event(1, "step", {"step": 1, "kind": "model", "text": "thinking"})),
    ("delta", {"run_id": "run_2", "step": 1, "seq_after": 1, "text": "hel", "tenant": None}),
    (None, event(2, "tool.result", {"call_id": "c1", "name": "calc", "ok": True, "content": "4"})),
    (None, event(3, "run.end", {"status": "completed", "answer": "4", "steps": 1})),
)


class Brain:
    """The routes the client calls, answering the models the brain answers; records what
    it was sent."""

    def __init__(self) -> None:
        self.seen: list[httpx.Request] = []
        self.routes: dict[tuple[str, str], Callable[[httpx.Request], httpx.Response]] = {
            ("POST", "/v1/threads"): lambda r: self.model(201, THREAD),
            ("GET", "/v1/threads"): lambda r: self.model(200, listing()),
            ("GET", "/v1/threads/thr_1"): lambda r: self.model(200, THREAD),
            ("DELETE", "/v1/threads/thr_1"): lambda r: httpx.Response(204),
            ("POST", "/v1/threads/thr_1/messages"): lambda r: self.model(202, turn()),
            ("GET", "/v1/runs/run_2"): lambda r: self.model(200, RUN),
            ("POST", "/v1/runs/run_2/stop"): lambda r: self.model(202, accepted()),
            ("GET", "/v1/runs/run_2/events"): self.events,
            ("POST", "/v1/policy/explain"): lambda r: self.model(200, explanation()),
            ("GET", "/v1/agents/writer/tool-catalog"): lambda r: self.model(200, catalog()),
            ("GET", "/v1/audit/run_2"): lambda r: self.model(200, audit()),
            ("POST", "/v1/tools/run"): self.tool_run,
            ("GET", "/v1/agents"): lambda r: self.model(200, AgentList(agents=[agent_view()])),
            ("GET", "/v1/agents/writer"): lambda r: self.model(200, agent_view()),
            ("POST", "/v1/agents"): lambda r: self.model(201, agent_view()),
            ("PUT", "/v1/agents/writer"): lambda r: self.model(200, agent_view(version=2)),
            ("DELETE", "/v1/agents/writer"): lambda r: httpx.Response(204),
        }
        self.streams: list[Stream] = []

    def events(self, request: httpx.Request) -> httpx.Response:
        self.streams.append(Stream(EVENTS))
        headers = {"content-type": "text/event-stream"}
        return httpx.Response(200, headers=headers, stream=self.streams[-1])

    def model(self, status: int, body: Any) -> httpx.Response:
        return httpx.Response(status, json=body.model_dump(mode="json"))

    def tool_run(self, request: httpx.Request) -> httpx.Response:
        if json.loads(request.content).get("approval_id") is None:
            error = ErrorDetail(code="needs_approval", message="a write")
            asked = ToolRunAsked(approval_id="apr_1", run_id="manual:1", error=error)
            return self.model(403, asked)
        result = ToolRunResult(call_id="m1", name="calc", ok=True, content="4", duration_ms=3.0)
        return self.model(200, result)

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.seen.append(request)
        route = self.routes.get((request.method, request.url.path))
        if route is None:
            body = {"error": {"code": "not_found", "message": f"no {request.url.path}"}}
            return httpx.Response(404, json=body)
        return route(request)

    def sent(self, method: str, path: str) -> httpx.Request:
        return next(r for r in self.seen if (r.method, r.url.path) == (method, path))


def agent_view(version: int = 1) -> AgentView:
    return AgentView(
        id="writer",
        version=version,
        source="api",
        changed_by="op",
        changed_at=NOW,
        mode="read-only",
        grants=["calculate"],
    )


def listing() -> ThreadList:
    summary = ThreadSummary(
        thread_id="thr_1", status="idle", turns=1, created_at=NOW, updated_at=NOW
    )
    return ThreadList(threads=[summary], next=NOW)


def turn() -> ThreadTurnAccepted:
    return ThreadTurnAccepted(thread_id="thr_1", run_id="run_2", turn=2)


def accepted() -> RunAccepted:
    return RunAccepted(run_id="run_2", status="stopped")


def explanation() -> Explanation:
    return Explanation(tool="calc", agent="writer", decision="allow", code=None, reason="reads")


def catalog() -> AgentCatalog:
    return AgentCatalog(
        agent="writer", owner=None, mode="allow-reads", tool_less=False, problems=[], tools=[]
    )


def audit() -> AuditReport:
    return AuditReport(trail="run_2", head="abc", intact=True, problems=[])


class Stream(httpx.AsyncByteStream):
    """An event stream that knows whether the client closed it."""

    def __init__(self, body: bytes) -> None:
        self.body, self.closed = body, False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for line in self.body.splitlines(keepends=True):
            yield line

    async def aclose(self) -> None:
        self.closed = True


@pytest.fixture
def brain() -> Brain:
    return Brain()


@pytest.fixture
async def client(brain: Brain) -> AsyncIterator[TetherClient]:
    async with TetherClient(BASE, token="t", transport=httpx.MockTransport(brain)) as found:
        yield found


async def test_thread_methods_speak_the_contract(client: TetherClient, brain: Brain) -> None:
    budgets = ThreadBudgets(max_steps=10)
    created = await client.create_thread(agent="writer", title="notes", budgets=budgets)
    assert isinstance(created, ThreadView)
    assert created.turns[0].answer == "hello"
    assert json.loads(brain.sent("POST", "/v1/threads").content) == {
        "agent": "writer",
        "title": "notes",
        "workspace": "thread",
        "budgets": {"max_steps": 10},
    }
    sent = await client.send_message("thr_1", "and now?")
    assert sent == turn()
    assert json.loads(brain.sent("POST", "/v1/threads/thr_1/messages").content) == {
        "text": "and now?"
    }
    assert (await client.get_thread("thr_1")).thread_id == "thr_1"
    page = await client.list_threads(before=NOW, limit=5)
    assert page.next == NOW
    params = brain.sent("GET", "/v1/threads").url.params
    assert (params["limit"], datetime.fromisoformat(params["before"])) == ("5", NOW)
    await client.delete_thread("thr_1")
    assert brain.sent("DELETE", "/v1/threads/thr_1")


async def test_chat_sends_then_yields_the_runs_typed_events(client: TetherClient) -> None:
    events = [e async for e in client.chat("thr_1", "what is 2+2?")]
    assert [type(e) for e in events] == [StepEvent, ToolResultEvent, RunEndEvent]
    end = events[-1]
    assert isinstance(end, RunEndEvent)
    assert end.data.answer == "4"


async def test_events_skip_live_text_and_ask_for_none(client: TetherClient, brain: Brain) -> None:
    wire = [e async for e in client.events("run_2")]
    assert [e.seq for e in wire] == [1, 2, 3]
    assert brain.sent("GET", "/v1/runs/run_2/events").url.params["deltas"] == "false"


async def test_policy_and_audit_answer_models(client: TetherClient) -> None:
    assert (await client.explain("calc", {"expression": "2+2"}, agent="writer")).decision == "allow"
    assert isinstance(await client.tool_catalog("writer"), AgentCatalog)
    assert (await client.verify_audit("run_2", "op")).intact
    asked = await client.run_tool("calc", {}, "op")
    assert isinstance(asked, ToolRunAsked)
    assert (asked.approval_id, asked.error.code) == ("apr_1", "needs_approval")
    ran = await client.run_tool("calc", {}, "op", approval_id=asked.approval_id)
    assert isinstance(ran, ToolRunResult)
    assert ran.content == "4"


@pytest.mark.parametrize(
    ("status", "body", "error", "code"),
    [
        (404, {"error": {"code": "not_found", "message": "m"}}, NotFoundError, "not_found"),
        (409, {"error": {"code": "thread_busy", "message": "m"}}, ConflictError, "thread_busy"),
        # A code this client does not know is classed by its status.
        (403, {"error": {"code": "newer_code", "message": "m"}}, SafetyError, "newer_code"),
        (502, "<html>bad gateway</html>", TetherError, ErrorCode.INTERNAL),
    ],
)
async def test_refusals_raise_their_class_with_code_and_status(
    status: int, body: Any, error: type[TetherError], code: str
) -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        if isinstance(body, str):
            return httpx.Response(status, text=body)
        return httpx.Response(status, json=body)

    async with TetherClient(BASE, token="", transport=httpx.MockTransport(answer)) as client:
        with pytest.raises(error) as raised:
            await client.get_thread("thr_1")
    assert type(raised.value) is error
    assert (raised.value.code, raised.value.status) == (code, status)


async def test_an_unreadable_answer_is_a_message_error() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"thread_id": 7})

    async with TetherClient(BASE, token="", transport=httpx.MockTransport(answer)) as client:
        with pytest.raises(MessageError) as raised:
            await client.get_thread("thr_1")
    assert raised.value.code == ErrorCode.INVALID_MESSAGE
    assert "GET /v1/threads/thr_1" in raised.value.message


async def test_an_event_its_kind_cannot_hold_is_a_message_error() -> None:
    bad = sse((None, event(4, "tool.result", {"ok": {"not": "a bool"}})))

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=bad)

    async with TetherClient(BASE, token="", transport=httpx.MockTransport(answer)) as client:
        with pytest.raises(MessageError, match="event 4 of run_2"):
            _ = [e async for e in client.typed_events("run_2")]


def test_the_sync_facade_has_every_method_once() -> None:
    """Each public method of `TetherClient` is on `SyncTetherClient`, made from that very
    method (no second definition to drift)."""
    for name, method in inspect.getmembers(TetherClient, inspect.isfunction):
        if name.startswith("_") or name == "close":
            continue
        wrapper = SyncTetherClient.__dict__.get(name)
        assert isinstance(wrapper, blocking | blocking_iter), f"SyncTetherClient.{name} missing"
        assert wrapper.method is method
        streams = inspect.isasyncgenfunction(method)
        assert isinstance(wrapper, blocking_iter) == streams, name


def test_the_sync_facade_blocks_iterates_and_closes(brain: Brain) -> None:
    before = threading.active_count()
    with SyncTetherClient(BASE, token="t", transport=httpx.MockTransport(brain)) as tether:
        assert tether.get_thread("thr_1") == THREAD
        assert tether.get_run("run_2").status == "completed"
        kinds = [e.kind for e in tether.chat("thr_1", "again")]
        assert kinds == ["step", "tool.result", "run.end"]
        for first in tether.typed_events("run_2"):  # leaving early closes the stream
            assert isinstance(first, StepEvent)
            break
        assert brain.streams[-1].closed
        with pytest.raises(NotFoundError) as raised:
            tether.get_thread("thr_gone")
        assert raised.value.status == 404
        stopped = tether.stop_run("run_2")
        assert stopped.status == "stopped"
    tether.close()  # a second close is harmless
    assert threading.active_count() == before
    with pytest.raises(RuntimeError):
        tether.get_run("run_2")


def test_the_public_surface_is_what_all_promises() -> None:
    import tether_client

    assert sorted(tether_client.__all__) == ["SyncTetherClient", "TetherClient"]
    assert all(hasattr(tether_client, name) for name in tether_client.__all__)


async def test_agents_are_models_and_only_what_was_given_is_sent(
    client: TetherClient, brain: Brain
) -> None:
    listed = await client.list_agents()
    assert [(a.id, a.mode, a.version) for a in listed] == [("writer", "read-only", 1)]
    assert (await client.get_agent("writer")).grants == ["calculate"]
    wanted = AgentConfig.model_validate({"mode": "read-only", "budgets": {"max_steps": 3}})
    created = await client.create_agent("writer", wanted)
    assert isinstance(created, AgentView)
    sent = json.loads(brain.sent("POST", "/v1/agents").content)
    assert sent == {"id": "writer", "mode": "read-only", "budgets": {"max_steps": 3}}
    replaced = await client.replace_agent("writer", agent_view(), version=1)
    assert replaced.version == 2
    put = brain.sent("PUT", "/v1/agents/writer")
    assert put.headers["If-Match"] == '"1"'
    assert not {"id", "version", "source", "changed_by", "changed_at"} & set(
        json.loads(put.content)
    )
    await client.delete_agent("writer")
    with pytest.raises(NotFoundError):
        await client.get_agent("nobody")


class DroppingStream(Stream):
    """The first events of a stream, then the connection breaks (a brain killed)."""

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for line in super().__aiter__():
            yield line
        raise httpx.ReadError("connection reset by peer")


class Restarting(Brain):
    """A brain whose first event stream drops after event 1 while the run goes on; the
    next resumes after the event named in `Last-Event-ID`, and the run then ends."""

    def __init__(self) -> None:
        super().__init__()
        self.resumed_after: list[str | None] = []
        self.routes[("GET", "/v1/runs/run_2")] = self.view

    def events(self, request: httpx.Request) -> httpx.Response:
        self.resumed_after.append(request.headers.get("Last-Event-ID"))
        headers = {"content-type": "text/event-stream"}
        if len(self.resumed_after) == 1:
            first = sse((None, event(1, "step", {"step": 1, "kind": "model", "text": "hm"})))
            self.streams.append(DroppingStream(first))
        else:
            self.streams.append(Stream(EVENTS))
        return httpx.Response(200, headers=headers, stream=self.streams[-1])

    def view(self, request: httpx.Request) -> httpx.Response:
        ended = len(self.resumed_after) > 1
        return self.model(
            200, RUN.model_copy(update={"status": "completed" if ended else "running"})
        )


async def test_wait_resumes_a_dropped_stream_and_answers_the_finished_run() -> None:
    brain = Restarting()
    async with TetherClient(BASE, token="t", transport=httpx.MockTransport(brain)) as client:
        view = await client.wait("run_2", timeout=30)
    assert (view.run_id, view.status) == ("run_2", "completed")
    assert brain.resumed_after == [None, "1"]  # resumed after the last event seen
    assert all(stream.closed for stream in brain.streams)


@pytest.mark.parametrize(
    ("status", "error"),
    [(404, NotFoundError), (403, SafetyError)],
)
async def test_wait_raises_what_no_retry_can_mend(status: int, error: type[TetherError]) -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, json={"error": {"code": "x", "message": "no"}})

    async with TetherClient(BASE, token="t", transport=httpx.MockTransport(answer)) as client:
        with pytest.raises(error):
            await client.wait("run_2", timeout=30)


async def test_wait_is_bounded_by_its_timeout() -> None:
    """A run that never ends (its stream stays open, its view says running): a
    `TimeoutError` naming the run once the timeout passes; the stream is closed."""
    opened: list[Hanging] = []

    class Hanging(Stream):
        async def __aiter__(self) -> AsyncIterator[bytes]:
            yield b": keep-alive\n\n"
            await asyncio.Event().wait()  # until cancelled

    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/events"):
            opened.append(Hanging(b""))
            return httpx.Response(
                200, headers={"content-type": "text/event-stream"}, stream=opened[-1]
            )
        return httpx.Response(
            200, json=RUN.model_copy(update={"status": "running"}).model_dump(mode="json")
        )

    async with TetherClient(BASE, token="t", transport=httpx.MockTransport(answer)) as client:
        with pytest.raises(TimeoutError, match=r"run_2 did not end within 0\.3 s; it goes on"):
            await client.wait("run_2", timeout=0.3)
    assert opened
    assert opened[-1].closed


def test_the_sync_wait_blocks_for_the_finished_run() -> None:
    with SyncTetherClient(BASE, token="t", transport=httpx.MockTransport(Restarting())) as tether:
        assert tether.wait("run_2", timeout=30).status == "completed"
