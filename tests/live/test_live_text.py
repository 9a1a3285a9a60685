"""Live text end to end, on a bus locked down by the generated NATS configuration: a model
that writes its answer piece by piece (released by the test) reaches SSE readers as
`delta` events before the step's durable event, with no `id`, so `Last-Event-ID` still
resumes after the last durable event; NATS readers get the same deltas (a service
subscriber on the delta subject, a client through `runs.follow`); a caller who may not
read the run sees none of it, and the `client` user cannot subscribe to deltas at all; a
run whose answers a `before_answer` hook judges sends none, so no follower reads an answer
before the hook (a blocked one never)."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
import nats
import pytest

from live_upstream import MODEL, GatedAnswer, GatedUpstream
from locked_stack import locked_stack
from tether_client.server.supervisor import Supervisor
from tether_common.bus import Bus, settle
from tether_common.errors import TetherError
from tether_common.identity import bearer_headers
from tether_common.messages.deltas import RunDelta
from tether_common.messages.runs import FollowRun, RunEventFrame
from tether_common.subjects import Subjects, inbox_prefix

# The first test also waits for the stack to start: minutes on a loaded machine.
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

WAIT_S = 60.0  # a generous bound on a loaded machine; nothing here waits that long when well


@pytest.fixture(scope="module")
async def upstream() -> AsyncIterator[GatedUpstream]:
    async with GatedUpstream() as server:
        yield server


@pytest.fixture(scope="module")
def passwords() -> dict[str, str]:
    """The generated passwords of the stack's users (filled in by `locked_stack`)."""
    return {}


@pytest.fixture(scope="module")
async def live_stack(
    database_url: str,
    tmp_path_factory: pytest.TempPathFactory,
    upstream: GatedUpstream,
    passwords: dict[str, str],
) -> AsyncIterator[Supervisor]:
    """The five services, each as its own NATS user, the gateway's `openai` adapter
    pointed at the gated model."""
    extra = {
        "TETHER_GATEWAY_OPENAI_BASE_URL": f"{upstream.url}/v1",
        "TETHER_GATEWAY_RETRY_ATTEMPTS": "0",  # a gated answer is written once
    }
    base = tmp_path_factory.mktemp("live-stack")
    async with locked_stack(database_url, base, passwords, extra) as supervisor:
        yield supervisor


@dataclass(frozen=True)
class Frame:
    """One SSE message as written on the wire (`id` None when no `id:` line came)."""

    event: str
    id: str | None
    data: dict[str, Any]


@dataclass
class Reader:
    """An SSE stream read in the background; the test waits for what it needs."""

    frames: list[Frame] = field(default_factory=list)
    status: int | None = None
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    async def read(self, client: httpx.AsyncClient, url: str, **kwargs: Any) -> None:
        async with client.stream("GET", url, timeout=None, **kwargs) as response:
            self.status = response.status_code
            self.changed.set()
            if response.status_code != 200:
                return
            fields: dict[str, str] = {}
            async for line in response.aiter_lines():
                if line:
                    name, _, value = line.partition(":")
                    fields[name] = value.removeprefix(" ")
                    continue
                if "data" in fields:
                    data = json.loads(fields["data"])
                    self.frames.append(
                        Frame(fields.get("event", "message"), fields.get("id"), data)
                    )
                    self.changed.set()
                fields = {}

    async def until(self, done: Callable[[], bool]) -> None:
        async def wait() -> None:
            while not done():
                self.changed.clear()
                await self.changed.wait()

        await asyncio.wait_for(wait(), WAIT_S)

    def text(self) -> str:
        return "".join(f.data["text"] for f in self.frames if f.event == "delta")

    def durable(self) -> list[Frame]:
        return [f for f in self.frames if f.event != "delta"]

    def has(self, kind: str) -> bool:
        return any(f.event == kind for f in self.frames)

    async def until_text(self, text: str) -> None:
        await self.until(lambda: self.text() == text)

    async def until_kind(self, kind: str) -> None:
        await self.until(lambda: self.has(kind))


@pytest.fixture
async def http(live_stack: Supervisor) -> AsyncIterator[httpx.AsyncClient]:
    admin = bearer_headers(live_stack.env["TETHER_OPERATOR_TOKEN"])
    async with httpx.AsyncClient(
        base_url=live_stack.child("brain").url, headers=admin, timeout=60
    ) as client:
        yield client


async def start_run(
    http: httpx.AsyncClient, upstream: GatedUpstream, *pieces: str
) -> tuple[str, GatedAnswer]:
    answer = upstream.answer(*pieces)
    created = await http.post(
        "/v1/runs", json={"prompt": "say it slowly", "provider": "openai", "model": MODEL}
    )
    assert created.status_code == 201, created.text
    return str(created.json()["run_id"]), answer


class Readers:
    """Background readers owned by one test, cancelled at its end."""

    def __init__(self) -> None:
        self.tasks: list[asyncio.Task[None]] = []

    def follow(self, http: httpx.AsyncClient, run_id: str, **kwargs: Any) -> Reader:
        reader = Reader()
        self.tasks.append(
            asyncio.create_task(reader.read(http, f"/v1/runs/{run_id}/events", **kwargs))
        )
        return reader

    async def close(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)


@pytest.fixture
async def readers() -> AsyncIterator[Readers]:
    owned = Readers()
    try:
        yield owned
    finally:
        await owned.close()


async def test_sse_shows_the_text_as_it_is_written_before_the_step_event(
    http: httpx.AsyncClient, upstream: GatedUpstream, readers: Readers
) -> None:
    run_id, answer = await start_run(http, upstream, "The answer ", "is forty", "-two.")
    live = readers.follow(http, run_id)
    quiet = readers.follow(http, run_id, params={"deltas": "false"})
    await live.until_kind("run.start")
    await quiet.until_kind("run.start")
    await asyncio.wait_for(answer.started.wait(), WAIT_S)
    written = ""
    for piece in answer.pieces:
        answer.release()
        written += piece
        # Each piece reaches the reader while the model has not written the next one.
        await live.until_text(written)
        assert [f.event for f in live.durable()] == ["run.start"]
    await live.until_kind("run.end")
    await quiet.until_kind("run.end")

    deltas = [f for f in live.frames if f.event == "delta"]
    assert live.text() == "The answer is forty-two."
    assert all(f.id is None for f in deltas)
    for delta in deltas:
        body = RunDelta.model_validate(delta.data)
        assert (body.run_id, body.step, body.seq_after, body.depth) == (run_id, 1, 1, None)
    steps = [i for i, f in enumerate(live.frames) if f.event == "step" and f.data["data"]["text"]]
    assert steps
    assert max(live.frames.index(d) for d in deltas) < steps[0]
    assert live.frames[steps[0]].data["data"]["text"] == "The answer is forty-two."
    durable = live.durable()
    assert [f.id for f in durable] == [str(i) for i in range(1, len(durable) + 1)]
    assert [f.event for f in quiet.frames] == [f.event for f in durable]
    assert [f.data for f in quiet.frames] == [f.data for f in durable]


async def test_a_reconnect_after_the_first_event_misses_no_durable_event(
    http: httpx.AsyncClient, upstream: GatedUpstream, readers: Readers
) -> None:
    run_id, answer = await start_run(http, upstream, "Resumed ", "reader.")
    first = readers.follow(http, run_id)
    await first.until_kind("run.start")
    await asyncio.wait_for(answer.started.wait(), WAIT_S)
    answer.release()
    await first.until_text("Resumed ")
    await readers.close()  # the reader goes away mid-turn, having seen event 1 and a delta
    answer.release()
    again = readers.follow(http, run_id, headers={"Last-Event-ID": first.durable()[-1].id or ""})
    await again.until_kind("run.end")
    whole = readers.follow(http, run_id, params={"deltas": "false"})
    await whole.until_kind("run.end")
    assert [f.id for f in first.durable()] == ["1"]
    assert [(f.id, f.data) for f in again.durable()] == [(f.id, f.data) for f in whole.frames[1:]]
    assert all(f.id is None for f in again.frames if f.event == "delta")


async def test_a_caller_who_may_not_read_the_run_sees_no_delta_over_sse_or_nats(
    http: httpx.AsyncClient,
    live_stack: Supervisor,
    upstream: GatedUpstream,
    passwords: dict[str, str],
) -> None:
    stranger = await make_client_token(http)
    run_id, answer = await start_run(http, upstream, "Not ", "for strangers.")
    try:
        refused = await http.get(f"/v1/runs/{run_id}/events", headers=bearer_headers(stranger))
        assert refused.status_code == 404, refused.text
        async with bus_as(live_stack, "client", passwords["client"]) as bus:
            with pytest.raises(TetherError) as caught:
                await collect_follow(bus, FollowRun(run_id=run_id, deltas=True, idle_s=1), stranger)
            assert caught.value.code == "not_found"
    finally:
        answer.release_all()
    reader = Reader()
    await reader.read(http, f"/v1/runs/{run_id}/events")
    assert reader.has("run.end")


async def test_nats_readers_get_the_deltas_and_the_client_user_cannot_subscribe(
    http: httpx.AsyncClient,
    live_stack: Supervisor,
    upstream: GatedUpstream,
    passwords: dict[str, str],
) -> None:
    """A service subscriber (the brain's user) hears the delta subject; a client follows
    with `deltas` through `runs.follow`; the `client` user's own subscription to the
    delta subject (or to all of them) is a permissions violation and hears nothing."""
    admin = live_stack.env["TETHER_OPERATOR_TOKEN"]
    subjects = Subjects(live_stack.env["TETHER_SUBJECT_PREFIX"])
    run_id, answer = await start_run(http, upstream, "Heard ", "over NATS.")
    errors: list[str] = []
    heard: list[bytes] = []
    refused = asyncio.Event()

    async def on_error(exc: Exception) -> None:
        errors.append(str(exc))
        refused.set()

    async def overheard(msg: Any) -> None:
        heard.append(msg.data)

    nc = await nats.connect(
        live_stack.env["TETHER_NATS_URL"],
        user="client",
        password=passwords["client"],
        inbox_prefix=inbox_prefix("client"),
        error_cb=on_error,
    )
    try:
        for pattern in (subjects.run_deltas(run_id), subjects.run_deltas_all):
            refused.clear()
            await nc.subscribe(pattern, cb=overheard)
            await settle(nc)
            await asyncio.wait_for(refused.wait(), WAIT_S)
            assert "permissions violation for subscription" in errors[-1].lower(), pattern
        async with (
            bus_as(live_stack, "brain", passwords["brain"]) as service,
            bus_as(live_stack, "client", passwords["client"]) as client,
        ):
            sub = await service.subscribe_raw(subjects.run_deltas(run_id))
            await service.round_trip(WAIT_S)  # the server has the subscription
            frames: asyncio.Queue[RunEventFrame] = asyncio.Queue()
            following = asyncio.create_task(
                pump_follow(client, FollowRun(run_id=run_id, deltas=True), admin, frames)
            )
            try:
                first = await asyncio.wait_for(frames.get(), WAIT_S)
                assert first.event is not None
                assert first.event.kind == "run.start"
                await asyncio.wait_for(answer.started.wait(), WAIT_S)
                answer.release_all()
                text = ""
                while text != "Heard over NATS.":
                    msg = await sub.next_msg(timeout=WAIT_S)
                    text += RunDelta.model_validate_json(msg.data).text
                await asyncio.wait_for(following, WAIT_S)
            finally:
                following.cancel()
                await asyncio.gather(following, return_exceptions=True)
            followed = [first, *drain(frames)]
        await settle(nc)
        assert heard == []
    finally:
        await nc.close()
    deltas = [f.delta for f in followed if f.delta is not None]
    assert "".join(d.text for d in deltas) == "Heard over NATS."
    assert {d.run_id for d in deltas} == {run_id}
    kinds = [("delta" if f.delta else f.event.kind if f.event else f.end) for f in followed]
    assert kinds.index("step") > max(i for i, k in enumerate(kinds) if k == "delta")
    assert followed[-1].end == "run_end"
    assert followed[-1].last_seq == max(f.event.seq for f in followed if f.event)


@pytest.mark.parametrize(
    ("pieces", "status"),
    [
        (("The merger ", "closes ", "on Friday."), "failed"),
        (("Nothing ", "to hide ", "here."), "completed"),
    ],
    ids=["blocked", "passed"],
)
async def test_a_run_whose_answers_a_hook_judges_sends_no_live_text(
    http: httpx.AsyncClient,
    live_stack: Supervisor,
    upstream: GatedUpstream,
    passwords: dict[str, str],
    readers: Readers,
    pieces: tuple[str, ...],
    status: str,
) -> None:
    """With a `before_answer` hook (the built-in `deny_topics`), no follower reads the
    model's text before the hook judged it: no delta over SSE, on the delta subject or
    through `runs.follow`, while the model writes it piece by piece; a blocked answer is
    then nowhere, one that passed arrives in its durable `step` event."""
    hook: dict[str, Any] = {"name": "no-mergers", "point": "before_answer"}
    hook |= {"transport": "builtin", "target": "deny_topics", "options": {"topics": ["merger"]}}
    added = await http.post("/v1/hooks", json=hook)
    assert added.status_code == 201, added.text
    admin = live_stack.env["TETHER_OPERATOR_TOKEN"]
    subjects = Subjects(live_stack.env["TETHER_SUBJECT_PREFIX"])
    try:
        run_id, answer = await start_run(http, upstream, *pieces)
        live = readers.follow(http, run_id)
        async with (
            bus_as(live_stack, "brain", passwords["brain"]) as service,
            bus_as(live_stack, "client", passwords["client"]) as client,
        ):
            sub = await service.subscribe_raw(subjects.run_deltas(run_id))
            await service.round_trip(WAIT_S)  # the server has the subscription
            followed: asyncio.Queue[RunEventFrame] = asyncio.Queue()
            following = asyncio.create_task(
                pump_follow(client, FollowRun(run_id=run_id, deltas=True), admin, followed)
            )
            try:
                await live.until_kind("run.start")
                await asyncio.wait_for(answer.started.wait(), WAIT_S)
                answer.release_all()
                await live.until_kind("run.end")
                await asyncio.wait_for(following, WAIT_S)
            finally:
                answer.release_all()
                following.cancel()
                await asyncio.gather(following, return_exceptions=True)
            await service.round_trip(WAIT_S)  # what was published before the end is here
            assert sub.pending_msgs == 0
            await sub.unsubscribe()
    finally:
        removed = await http.delete("/v1/hooks/no-mergers")
        assert removed.status_code == 200, removed.text
    frames = drain(followed)
    assert frames[-1].end == "run_end"
    assert [f for f in frames if f.delta is not None] == []
    assert [f for f in live.frames if f.event == "delta"] == []
    (end,) = [f.data["data"] for f in live.frames if f.event == "run.end"]
    assert end["status"] == status
    whole = "".join(pieces)
    if status == "failed":
        assert end["stop_reason"].startswith("answer_blocked")
        shown = json.dumps([f.data for f in live.frames])  # the hook's reason names "merger"
        assert "closes" not in shown
        assert "Friday" not in shown
    else:
        steps = [f.data["data"]["text"] for f in live.frames if f.event == "step"]
        assert (end["answer"], steps[-1]) == (whole, whole)


def drain(queue: asyncio.Queue[RunEventFrame]) -> list[RunEventFrame]:
    found = []
    while not queue.empty():
        found.append(queue.get_nowait())
    return found


async def pump_follow(
    bus: Bus, body: FollowRun, token: str, into: asyncio.Queue[RunEventFrame]
) -> None:
    frames = bus.stream(
        bus.subjects.run_follow,
        body,
        is_terminal=lambda frame: frame.terminal,
        timeout=WAIT_S,
        headers=bearer_headers(token),
    )
    async for frame in frames:
        into.put_nowait(frame)


async def collect_follow(bus: Bus, body: FollowRun, token: str) -> list[RunEventFrame]:
    queue: asyncio.Queue[RunEventFrame] = asyncio.Queue()
    await pump_follow(bus, body, token, queue)
    return drain(queue)


@asynccontextmanager
async def bus_as(stack: Supervisor, user: str, password: str) -> AsyncIterator[Bus]:
    """A bus connection as one NATS user of the locked stack."""
    bus = await Bus.connect(
        stack.env["TETHER_NATS_URL"],
        service=f"test-{user}",
        subjects=Subjects(stack.env["TETHER_SUBJECT_PREFIX"]),
        user=user,
        password=password,
    )
    try:
        yield bus
    finally:
        await bus.close()


async def make_client_token(http: httpx.AsyncClient) -> str:
    """A `client` of a tenant of its own: it may read only its own runs."""
    suffix = uuid.uuid4().hex[:8]
    body = {"name": f"stranger{suffix}", "role": "client", "tenant": f"ts{suffix}"}
    made = await http.post("/v1/tokens", json=body)
    assert made.status_code == 201, made.text
    return str(made.json()["token"])
