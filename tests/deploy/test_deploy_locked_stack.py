"""The five services, each with its own NATS user, run a whole run end to end on a bus
locked down by the generated configuration; the output-store keeps its chunks in the
JetStream object store there, which its user alone may touch. A NATS client (the
`client` user) follows runs only through `runs.follow`, under the HTTP event stream's
rules: its own run to the end, nothing of another tenant's, no events by subscription."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import httpx
import nats
import pytest
from nats.aio.msg import Msg

from locked_stack import locked_stack as running_locked_stack
from tether_client.server.supervisor import Supervisor
from tether_common.bus import Bus, settle
from tether_common.errors import TetherError
from tether_common.identity import bearer_headers
from tether_common.messages.outputs import QueryOutput
from tether_common.messages.runs import FollowRun, RunEventFrame
from tether_common.subjects import Subjects, inbox_prefix
from tether_tools_runner.offload import upload

# A module's first test also waits for the stack to start: minutes on a loaded machine.
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def locked_passwords() -> dict[str, str]:
    """The generated passwords of the locked stack's users (filled in by `locked_stack`)."""
    return {}


@pytest.fixture(scope="module")
async def locked_stack(
    database_url: str,
    tmp_path_factory: pytest.TempPathFactory,
    locked_passwords: dict[str, str],
) -> AsyncIterator[Supervisor]:
    extra = {"TETHER_OUTPUTS_BACKEND": "jetstream"}
    base = tmp_path_factory.mktemp("locked-stack")
    async with running_locked_stack(database_url, base, locked_passwords, extra) as supervisor:
        yield supervisor


async def wait_for_end(client: httpx.AsyncClient, url: str) -> dict[str, object]:
    """Follow the run's event stream until `run.end`, then read the run."""
    async with client.stream("GET", f"{url}/events") as response:
        assert response.status_code == 200
        async for line in response.aiter_lines():
            if line.startswith("event:") and "run.end" in line:
                break
    run: dict[str, object] = (await client.get(url)).json()
    return run


async def test_a_run_completes_on_the_locked_down_bus(locked_stack: Supervisor) -> None:
    brain = locked_stack.child("brain").url
    # The operator token of the stack's environment: every brain route asks for one.
    token = locked_stack.env["TETHER_OPERATOR_TOKEN"]
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(timeout=60, headers=headers) as client:
        created = await client.post(
            f"{brain}/v1/runs", json={"prompt": "what time is it in Tokyo?"}
        )
        assert created.status_code == 201, created.text
        run = await wait_for_end(client, f"{brain}/v1/runs/{created.json()['run_id']}")
    assert run["status"] == "completed", run
    assert "Asia/Tokyo" in str(run["answer"])
    assert not any(
        "permissions violation" in log.read_text().lower()
        for log in (locked_stack.log_dir or Path()).glob("*.log")
    )


async def test_a_large_result_is_offloaded_into_the_object_store(
    locked_stack: Supervisor, locked_passwords: dict[str, str], database_url: str
) -> None:
    """What the tools-runner does with a big result, as the tools-runner's own user."""
    subjects = Subjects(locked_stack.env["TETHER_SUBJECT_PREFIX"])
    bus = await Bus.connect(
        locked_stack.env["TETHER_NATS_URL"],
        service="tools-runner",
        subjects=subjects,
        user="tools-runner",
        password=locked_passwords["tools-runner"],
    )
    try:
        data = b"".join(f"line {i} of a long log\n".encode() for i in range(40_000))
        stored = await upload(bus, "run-locked", data)
        assert stored.size == len(data)
        page = await bus.request(
            subjects.output_query,
            QueryOutput(ref=stored.ref, run_id="run-locked", mode="grep", pattern="line 39999 "),
        )
        assert "line 39999 of a long log" in page.content
    finally:
        await bus.close()
    pg = await asyncpg.connect(database_url.replace("+asyncpg", "", 1))
    try:
        kept_in_rows = await pg.fetchval(
            "SELECT count(*) FROM outputs o JOIN output_chunks c "
            "ON c.digest = ANY(o.chunk_digests) WHERE o.ref = $1 AND c.data IS NOT NULL",
            stored.ref,
        )
    finally:
        await pg.close()
    assert kept_in_rows == 0


@dataclass(frozen=True)
class Tenants:
    """Alice (a client of tenant A) and bob (of tenant B), each with a finished run
    whose prompt carries the tenant's mark."""

    tokens: dict[str, str]
    runs: dict[str, str]
    marks: dict[str, str]


async def _start(client: httpx.AsyncClient, brain: str, token: str, prompt: str) -> str:
    created = await client.post(
        f"{brain}/v1/runs", json={"prompt": prompt}, headers=bearer_headers(token)
    )
    assert created.status_code == 201, created.text
    return str(created.json()["run_id"])


@pytest.fixture(scope="module")
async def tenants(locked_stack: Supervisor) -> Tenants:
    brain = locked_stack.child("brain").url
    admin = bearer_headers(locked_stack.env["TETHER_OPERATOR_TOKEN"])
    suffix = uuid.uuid4().hex[:8]
    tokens, runs, marks = {}, {}, {}
    async with httpx.AsyncClient(timeout=60) as client:
        for who, tenant in (("alice", f"ta{suffix}"), ("bob", f"tb{suffix}")):
            body = {"name": f"{who}{suffix}", "role": "client", "tenant": tenant}
            made = await client.post(f"{brain}/v1/tokens", json=body, headers=admin)
            assert made.status_code == 201, made.text
            tokens[who] = str(made.json()["token"])
            marks[who] = f"{who.upper()}SECRET{suffix}"
            prompt = f"{marks[who]}: what time is it in Tokyo?"
            runs[who] = await _start(client, brain, tokens[who], prompt)
            client.headers.update(bearer_headers(tokens[who]))
            await wait_for_end(client, f"{brain}/v1/runs/{runs[who]}")
    return Tenants(tokens, runs, marks)


@pytest.fixture
async def client_bus(
    locked_stack: Supervisor, locked_passwords: dict[str, str]
) -> AsyncIterator[Bus]:
    """A NATS client of the API, logged in as the `client` user of the client account."""
    bus = await Bus.connect(
        locked_stack.env["TETHER_NATS_URL"],
        service="client",
        subjects=Subjects(locked_stack.env["TETHER_SUBJECT_PREFIX"]),
        user="client",
        password=locked_passwords["client"],
    )
    try:
        yield bus
    finally:
        await bus.close()


async def follow(bus: Bus, body: FollowRun, token: str | None) -> list[RunEventFrame]:
    frames = bus.stream(
        bus.subjects.run_follow,
        body,
        is_terminal=lambda frame: frame.terminal,
        timeout=60,
        headers=bearer_headers(token) if token else None,
    )
    return [frame async for frame in frames]


async def test_a_client_follows_its_own_live_run_to_the_end_over_nats(
    locked_stack: Supervisor, tenants: Tenants, client_bus: Bus
) -> None:
    """Started over HTTP, followed at once over NATS: every event in order, ended by
    `run.end` and the terminal frame; then from a later `seq`, only what follows it."""
    brain = locked_stack.child("brain").url
    token = tenants.tokens["alice"]
    async with httpx.AsyncClient(timeout=60) as client:
        run_id = await _start(client, brain, token, "what time is it in Tokyo?")
    frames = await follow(client_bus, FollowRun(run_id=run_id), token)
    events = [f.event for f in frames if f.event is not None]
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert {e.run_id for e in events} == {run_id}
    assert events[0].kind == "run.start"
    assert events[-1].kind == "run.end"
    assert frames[-1].end == "run_end"
    assert frames[-1].last_seq == events[-1].seq
    later = await follow(client_bus, FollowRun(run_id=run_id, after_seq=2), token)
    assert [f.event.seq for f in later if f.event] == [e.seq for e in events[2:]]
    done = await follow(client_bus, FollowRun(run_id=run_id, after_seq=events[-1].seq), token)
    assert [(f.event, f.end) for f in done] == [(None, "run_end")]


def _refusals(tenants: Tenants) -> list[tuple[str, FollowRun, str | None, str]]:
    """(label, request, token, expected code): every way of reaching a run not one's own."""
    alice, bob = tenants.runs["alice"], tenants.runs["bob"]
    found: list[tuple[str, FollowRun, str | None, str]] = []
    for run_id, token, mark in ((alice, "bob", "alice"), (bob, "alice", "bob")):
        for after in (0, 1, 3, 10**6):
            body = FollowRun(run_id=run_id, after_seq=after, idle_s=1)
            found.append(
                (f"{token}->{mark} after {after}", body, tenants.tokens[token], "not_found")
            )
        for header in (None, "tth_forged", tenants.tokens[token] + "x", tenants.tokens[token][:-1]):
            body = FollowRun(run_id=run_id, idle_s=1)
            found.append((f"{header!r}->{mark}", body, header, "unauthenticated"))
    for made_up in ("run_nonexistent", alice + "0", alice.upper(), "run_"):
        body = FollowRun(run_id=made_up, idle_s=1)
        found.append((f"bob->{made_up}", body, tenants.tokens["bob"], "not_found"))
    return found


async def test_following_a_run_not_ones_own_shows_nothing_of_it(
    tenants: Tenants, client_bus: Bus
) -> None:
    """Another tenant's run answers `not_found` exactly as a run that does not exist, an
    anonymous or forged caller `unauthenticated`; the refusal is the first and only reply
    (the brain authorises before it sends any event), holding nothing of the run."""
    problems = []
    for label, body, token, expected in _refusals(tenants):
        headers = bearer_headers(token) if token else None
        raw = await client_bus.request_raw(
            client_bus.subjects.run_follow.subject,
            body.model_dump_json().encode(),
            headers=headers,
            timeout=30,
        )
        reply = json.loads(raw)
        code = reply.get("error", {}).get("code") if isinstance(reply, dict) else None
        if code != expected:
            problems.append(f"{label}: {code} {raw[:200]!r}")
        if any(mark.encode() in raw for mark in tenants.marks.values()):
            problems.append(f"{label}: shows a run")
        with pytest.raises(TetherError) as refused:
            await follow(client_bus, body, token)
        if refused.value.code != expected:
            problems.append(f"{label}: stream raised {refused.value.code}")
    assert not problems, "\n".join(problems)


async def test_the_client_user_cannot_subscribe_to_run_events(
    locked_stack: Supervisor, locked_passwords: dict[str, str], tenants: Tenants
) -> None:
    """Every way of subscribing to run events, another tenant's run first, is refused by
    the server; nothing is heard while a run publishes its events."""
    subjects = Subjects(locked_stack.env["TETHER_SUBJECT_PREFIX"])
    errors: list[str] = []
    changed = asyncio.Event()

    async def on_error(exc: Exception) -> None:
        errors.append(str(exc))
        changed.set()

    heard: list[bytes] = []

    async def overheard(msg: Msg) -> None:
        heard.append(msg.data)

    nc = await nats.connect(
        locked_stack.env["TETHER_NATS_URL"],
        user="client",
        password=locked_passwords["client"],
        inbox_prefix=inbox_prefix("client"),
        error_cb=on_error,
    )
    prefix = subjects.prefix
    patterns = (
        subjects.run_events(tenants.runs["bob"]),
        subjects.run_events(tenants.runs["alice"]),
        subjects.run_events_all,
        f"{prefix}.events.*",
        f"{prefix}.*.{tenants.runs['bob']}",
        f"{prefix}.>",
        ">",
    )
    try:
        for pattern in patterns:
            changed.clear()
            await nc.subscribe(pattern, cb=overheard)
            await settle(nc)
            await asyncio.wait_for(changed.wait(), 10)
            assert "permissions violation for subscription" in errors[-1].lower(), pattern
        brain = locked_stack.child("brain").url
        async with httpx.AsyncClient(timeout=60) as client:
            client.headers.update(bearer_headers(tenants.tokens["bob"]))
            run_id = await _start(client, brain, tenants.tokens["bob"], tenants.marks["bob"])
            await wait_for_end(client, f"{brain}/v1/runs/{run_id}")
        await settle(nc)
        assert heard == []
    finally:
        await nc.close()
