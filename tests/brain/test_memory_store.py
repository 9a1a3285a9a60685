"""Memory across threads against the real PostgreSQL (`persistence.memory`, `tools.memory`,
`tools.remember`): a table of namespaces over two tenants, two users and two agents, each
search finding exactly its own and its agent's memories and never another's; the tools as
a run calls them (saved as its owner under its agent, a save sent again is one row); who
may list and forget what (audited in the `memory` trail); bad input refused clearly; and
in the loop (`tether_brain.testing.Harness`): saving asks where a write asks, a search
taints, and a thread's recall puts its memories into the model's prompt after the stable
prefix, marked untrusted."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass

import pytest
from pydantic import ValidationError
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from builtin_tools import RUNNER_TOOLS
from runstore import migrated_store, new_run
from tether_brain.agents.config import Agents
from tether_brain.context.prompts import system_prompt
from tether_brain.persistence.memory import MemoryScope
from tether_brain.settings import BrainSettings
from tether_brain.state.options import RunOptions
from tether_brain.state.run import RunState
from tether_brain.testing import Harness, LocalRunner
from tether_brain.tools.memory import MEMORY_TRAIL, Memory
from tether_brain.tools.remember import MEMORY_NOTE, MEMORY_SAVE, MEMORY_SEARCH, MemoryTool
from tether_common.errors import AuthError, MessageError, NotFoundError
from tether_common.identity import Principal
from tether_common.messages.gateway import CallRecord
from tether_common.messages.memory import AddMemory
from tether_common.testing import call, say
from tether_tools_runner.executor import Executor
from tether_tools_runner.tool import Registry
from tether_tools_runner.tools.clock import clock_tools

WORD = "marmalade"  # in every seeded memory
ADMIN = Principal("root", "admin", "default")


@dataclass(frozen=True)
class World:
    memory: Memory
    a: str  # tenant A
    b: str  # tenant B
    marks: dict[str, str]  # seeded memory's name → its mark

    def tenant(self, side: str) -> str:
        return {"a": self.a, "b": self.b}.get(side, f"{self.a}c")  # "c": a tenant with none


# name → (tenant side, agent, owner; None: the agent's own)
SEEDED: dict[str, tuple[str, str, str | None]] = {
    "alice": ("a", "default", "alice"),
    "amy": ("a", "default", "amy"),
    "alice-helper": ("a", "helper", "alice"),
    "a-agent": ("a", "default", None),
    "a-helper-agent": ("a", "helper", None),
    "b-alice": ("b", "default", "alice"),  # the same user name in tenant B
    "b-agent": ("b", "default", None),
}
# searcher (tenant side, agent, owner) → the memories it must find, exactly.
SEARCHERS: dict[str, tuple[str, str, str | None, set[str]]] = {
    "alice with the default agent": ("a", "default", "alice", {"alice", "a-agent"}),
    "amy with the default agent": ("a", "default", "amy", {"amy", "a-agent"}),
    "alice with another agent": ("a", "helper", "alice", {"alice-helper", "a-helper-agent"}),
    "a user with no memory": ("a", "default", "carol", {"a-agent"}),
    "a run with no owner": ("a", "default", None, {"a-agent"}),
    "alice of tenant B": ("b", "default", "alice", {"b-alice", "b-agent"}),
    "amy of tenant B": ("b", "default", "amy", {"b-agent"}),
    "alice of B with A's other agent": ("b", "helper", "alice", set()),
    "alice of a third tenant": ("c", "default", "alice", set()),
}


def agents() -> Agents:
    settings = BrainSettings()
    return Agents(
        settings.agents,
        workspace=settings.workspace,
        guardrails=settings.guardrails,
        allowlist=settings.allowlist,
    )


@pytest.fixture
async def world(engine: AsyncEngine) -> World:
    await migrated_store(engine)
    suffix = uuid.uuid4().hex[:8]
    world = World(Memory(engine, agents()), f"ma{suffix}", f"mb{suffix}", {})
    for name, (side, agent, owner) in SEEDED.items():
        mark = f"MEM{name.replace('-', '').upper()}{suffix}"
        world.marks[name] = mark
        scope = MemoryScope(world.tenant(side), agent, owner)
        await world.memory.save(scope, f"The {WORD} of {name}: {mark}.", key=mark, by="test")
    return world


def found_names(world: World, texts: list[str]) -> set[str]:
    joined = "\n".join(texts)
    return {name for name, mark in world.marks.items() if mark in joined}


@pytest.mark.parametrize("any_word", [False, True])
@pytest.mark.parametrize("searcher", list(SEARCHERS))
async def test_a_search_finds_its_namespace_and_nothing_else(
    world: World, searcher: str, any_word: bool
) -> None:
    side, agent, owner, expected = SEARCHERS[searcher]
    scope = MemoryScope(world.tenant(side), agent, owner)
    query = f"what about the {WORD} today" if any_word else WORD
    hits = await world.memory.find(scope, query, 10, any_word=any_word)
    assert found_names(world, [h.text for h in hits]) == expected
    assert all(h.tenant == scope.tenant and h.agent == agent for h in hits)
    assert all(h.owner in (owner, None) for h in hits)
    assert all(h.rank is not None and h.rank > 0 for h in hits)


def run_of(tenant: str, owner: str | None, agent: str | None = None) -> RunState:
    return new_run(tenant, owner, RunOptions(agent=agent))


def tool_call(name: str, **arguments: object) -> CallRecord:
    return CallRecord(id=f"c_{uuid.uuid4().hex[:8]}", name=name, arguments=arguments)


async def test_a_run_saves_as_its_owner_under_its_agent_once_per_call(world: World) -> None:
    mark = f"SAVED{uuid.uuid4().hex[:8]}"
    saver = run_of(world.a, "alice")
    save = tool_call(MEMORY_SAVE, text=f"  The {WORD} password hint is {mark}.  ")
    tool = MemoryTool(world.memory, MEMORY_SAVE)
    first = await tool.run(saver, save)
    again = await tool.run(saver, save)  # sent again after a takeover: the same row
    assert first.ok, first.content
    assert again.content == first.content
    mine = (await world.memory.listing(alice(world))).memories
    saved = [m for m in mine if mark in m.text]
    assert len(saved) == 1
    assert (saved[0].agent, saved[0].owner, saved[0].created_by) == (
        "default",
        "alice",
        f"run:{saver.run_id}",
    )
    assert saved[0].memory_id in first.content
    assert saved[0].text.startswith("The ")  # kept trimmed
    # Another thread of alice's (another run) finds it; amy, and alice of B, never do.
    search = MemoryTool(world.memory, MEMORY_SEARCH)
    for state, finds in (
        (run_of(world.a, "alice"), True),
        (run_of(world.a, "amy"), False),
        (run_of(world.b, "alice"), False),
        (run_of(world.a, "alice", agent="helper"), False),
    ):
        result = await search.run(state, tool_call(MEMORY_SEARCH, query=mark.lower()))
        assert result.ok, result.content
        assert (mark in result.content) is finds, (state.tenant, state.owner, result.content)
    found = await search.run(run_of(world.a, "alice"), tool_call(MEMORY_SEARCH, query=WORD))
    assert "not instructions" in found.content
    assert world.marks["amy"] not in found.content
    assert world.marks["b-alice"] not in found.content


@pytest.mark.parametrize(
    ("tool", "arguments", "says"),
    [
        (MEMORY_SEARCH, {"query": "'&|!:*"}, "no searchable words"),
        (MEMORY_SEARCH, {"query": "the and of"}, "no searchable words"),
        (MEMORY_SEARCH, {"query": "   "}, "empty"),
        (MEMORY_SEARCH, {"query": "q" * 501}, "longer than 500"),
        (MEMORY_SEARCH, {"query": WORD, "limit": 0}, "limit"),
        (MEMORY_SEARCH, {"query": WORD, "limit": True}, "limit"),
        (MEMORY_SEARCH, {"query": 42}, "empty"),
        (MEMORY_SAVE, {"text": " \n "}, "empty"),
        (MEMORY_SAVE, {"text": "x" * 2001}, "longer than 2000"),
        (MEMORY_SAVE, {"text": "nul \x00 byte"}, "NUL"),
        (MEMORY_SAVE, {}, "empty"),
    ],
)
async def test_bad_input_is_a_clear_refusal(
    world: World, tool: str, arguments: dict[str, object], says: str
) -> None:
    before = await world.memory.listing(ADMIN, tenant=world.a)
    state = run_of(world.a, "alice")
    result = await MemoryTool(world.memory, tool).run(state, tool_call(tool, **arguments))
    assert (result.ok, result.error_code) == (False, "invalid_request"), result.content
    assert says in result.content
    assert "Nothing was" in result.content
    assert await world.memory.listing(ADMIN, tenant=world.a) == before


async def test_a_run_with_no_owner_saves_nothing(world: World) -> None:
    result = await MemoryTool(world.memory, MEMORY_SAVE).run(
        run_of(world.a, None), tool_call(MEMORY_SAVE, text=f"{WORD} for nobody")
    )
    assert (result.ok, result.error_code) == (False, "invalid_request")


async def test_a_full_namespace_is_refused_too_large(world: World) -> None:
    small = Memory(world.memory.engine, agents(), most=1)
    state = run_of(world.a, "alice")  # alice already holds one memory with this agent
    result = await MemoryTool(small, MEMORY_SAVE).run(state, tool_call(MEMORY_SAVE, text="more"))
    assert (result.ok, result.error_code) == (False, "too_large"), result.content


# ---- who lists and forgets what ------------------------------------------------------


def alice(world: World) -> Principal:
    return Principal("alice", "client", world.a, token_id="tok_alice")


def operator(world: World, side: str = "a") -> Principal:
    return Principal(f"op{side}", "operator", world.tenant(side), token_id=f"tok_op{side}")


async def trail_records(world: World, event: str) -> list[dict[str, object]]:
    async with world.memory.engine.connect() as conn:
        rows = await conn.execute(
            text("SELECT data FROM audit_records WHERE run_id = :t AND event = :e"),
            {"t": MEMORY_TRAIL, "e": event},
        )
        return [json.loads(r.data) for r in rows]


async def test_a_user_lists_and_forgets_only_what_is_kept_about_it(world: World) -> None:
    me = alice(world)
    listed = (await world.memory.listing(me)).memories
    assert found_names(world, [m.text for m in listed]) == {"alice", "alice-helper"}
    for asked in ({"owner": "amy"}, {"agent_wide": True}):
        with pytest.raises(NotFoundError):
            await world.memory.listing(me, **asked)
    with pytest.raises(NotFoundError):
        await world.memory.listing(me, tenant=world.b)
    # Forgetting another's (amy's, the agent's, tenant B's alice's): 404, nothing gone.
    for name in ("amy", "a-agent", "b-alice"):
        other = await world.memory.find(
            MemoryScope(world.tenant(SEEDED[name][0]), SEEDED[name][1], SEEDED[name][2]),
            world.marks[name],
            1,
        )
        with pytest.raises(NotFoundError):
            await world.memory.forget(other[0].memory_id, me)
        with pytest.raises(NotFoundError):
            await world.memory.forget(
                other[0].memory_id, operator(world, "b" if name != "b-alice" else "a")
            )
    mine = next(m for m in listed if world.marks["alice"] in m.text)
    await world.memory.forget(mine.memory_id, me)
    scope = MemoryScope(world.a, "default", "alice")
    assert found_names(world, [h.text for h in await world.memory.find(scope, WORD, 10)]) == {
        "a-agent"
    }
    with pytest.raises(NotFoundError):
        await world.memory.forget(mine.memory_id, me)  # once
    audited = [
        r
        for r in await trail_records(world, "memory.forgotten")
        if mine.memory_id in str(r["resource"])
    ]
    assert len(audited) == 1
    assert (audited[0]["by"], audited[0]["after"]) == ("token:alice", None)
    assert world.marks["alice"] not in json.dumps(audited[0])  # a digest, never the text
    # Everything else kept about alice in A goes at once; B's alice and the agent's stay.
    gone = await world.memory.forget_all(me)
    assert gone.forgotten == 1
    left = await world.memory.listing(ADMIN)
    assert found_names(world, [m.text for m in left.memories]) == set(SEEDED) - {
        "alice",
        "alice-helper",
    }


async def test_operators_reach_their_tenant_and_write_agent_wide(world: World) -> None:
    opa, opb = operator(world, "a"), operator(world, "b")
    seen = (await world.memory.listing(opa)).memories
    assert found_names(world, [m.text for m in seen]) == {
        n for n, (side, _, _) in SEEDED.items() if side == "a"
    }
    wide = (await world.memory.listing(opa, agent_wide=True, agent="default")).memories
    assert found_names(world, [m.text for m in wide]) == {"a-agent"}
    added = await world.memory.add(AddMemory(text=f"Everyone's {WORD} rule.", agent_wide=True), opa)
    assert (added.tenant, added.owner, added.agent) == (world.a, None, "default")
    found = await world.memory.search(alice(world), WORD, limit=10)
    assert added.memory_id in {m.memory_id for m in found.memories}
    with pytest.raises(NotFoundError):
        await world.memory.forget(added.memory_id, opb)
    with pytest.raises(NotFoundError):
        await world.memory.forget(added.memory_id, alice(world))
    await world.memory.forget(added.memory_id, opa)
    gone = await world.memory.forget_all(opb, owner="alice")  # B's alice only
    assert gone.forgotten == 1
    assert found_names(world, [m.text for m in (await world.memory.listing(opa)).memories]) == {
        n for n, (side, _, _) in SEEDED.items() if side == "a"
    }
    saved = [
        r
        for r in await trail_records(world, "memory.saved")
        if added.memory_id in str(r["resource"])
    ]
    assert [(r["before"], r["tenant"]) for r in saved] == [(None, world.a)]


@pytest.mark.parametrize(
    ("body", "who", "error", "code"),
    [
        ({"agent_wide": True}, "alice", AuthError, "forbidden"),
        ({"owner": "amy"}, "alice", AuthError, "forbidden"),
        ({"agent_wide": True, "owner": "amy"}, "opa", MessageError, "invalid_request"),
        ({"agent": "no-such-agent"}, "opa", NotFoundError, "not_found"),
        ({"tenant": "someone-else"}, "opa", NotFoundError, "not_found"),
        ({"text": " \n "}, "opa", MessageError, "invalid_request"),
    ],
)
async def test_an_addition_out_of_reach_is_refused(
    world: World, body: dict[str, object], who: str, error: type[Exception], code: str
) -> None:
    principal = alice(world) if who == "alice" else operator(world)
    with pytest.raises(error) as raised:
        await world.memory.add(AddMemory.model_validate({"text": f"{WORD} x"} | body), principal)
    assert getattr(raised.value, "code", None) == code


@pytest.mark.parametrize("body", [{"text": ""}, {"text": "x" * 2001}, {"text": "a\x00b"}])
def test_bad_bodies_are_refused_at_the_edge(body: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        AddMemory.model_validate(body)


async def test_a_search_without_words_is_refused(world: World) -> None:
    with pytest.raises(MessageError) as raised:
        await world.memory.search(alice(world), "!!! & |")
    assert raised.value.code == "invalid_request"


# ---- in the loop: gates, taint, recall -------------------------------------------------


@pytest.fixture
def loop_harness(world: World) -> Harness:
    executor = Executor(Registry([*clock_tools()]), default_timeout_s=30.0)
    return Harness(LocalRunner(RUNNER_TOOLS, executor.execute), memory=world.memory)


async def keep_for_tester(world: World, body: str) -> str:
    """A memory of the harness's runs' namespace (default tenant and agent, `tester`)."""
    scope = MemoryScope("default", "default", "tester")
    view = await world.memory.save(scope, body, key=uuid.uuid4().hex, by="test")
    return view.memory_id


async def test_saving_asks_where_a_write_asks(loop_harness: Harness, world: World) -> None:
    mark = f"ASKED{uuid.uuid4().hex[:8]}"
    save = [[call(MEMORY_SAVE, text=f"{WORD} {mark}")], say("saved")]
    refused = await loop_harness.run(save, mode="read-only")
    (result,) = refused.data("tool.result")
    assert (result["ok"], result["error_code"]) == (False, "mode_read_only")
    parked = await loop_harness.run(save)  # allow-reads: a write needs a grant or an operator
    assert parked.state.status == "awaiting_approval"
    (card,) = parked.data("tool.approval_needed")
    assert (card["name"], card["code"]) == (MEMORY_SAVE, "not_granted"), card
    assert not await world.memory.find(MemoryScope("default", "default", "tester"), mark, 5)
    done = await loop_harness.decide(parked.state.run_id)
    assert done.state.status == "completed"
    found = await world.memory.find(MemoryScope("default", "default", "tester"), mark, 5)
    assert [m.created_by for m in found] == [f"run:{parked.state.run_id}"]


async def test_a_search_taints_the_run(loop_harness: Harness) -> None:
    searched = await loop_harness.run([[call(MEMORY_SEARCH, query=WORD)], say("ok")])
    assert searched.state.status == "completed"
    assert searched.state.counters.tainted
    clean = await loop_harness.run([[call("current_time", timezone="UTC")], say("ok")])
    assert not clean.state.counters.tainted


async def test_recall_puts_the_owners_memories_after_the_stable_prefix(
    loop_harness: Harness, world: World
) -> None:
    mark = f"RECALLED{uuid.uuid4().hex[:8]}"
    recalled = await keep_for_tester(world, f"The tester's {WORD} is {mark}.")
    stranger = MemoryScope("default", "default", "stranger")
    other = f"OTHER{uuid.uuid4().hex[:8]}"
    await world.memory.save(stranger, f"The stranger's {WORD} is {other}.", key=other, by="t")
    prompt = f"Which {WORD} did I pick?"
    run = await loop_harness.run([say("teal")], prompt, recall=3)
    assert run.state.status == "completed"
    assert run.state.counters.tainted
    messages = loop_harness.model.requests[-1].messages
    notes = [i for i, m in enumerate(messages) if m.name == MEMORY_NOTE]
    assert len(notes) == 1, [m.role for m in messages]
    note = messages[notes[0]]
    assert note.role == "system"
    assert mark in note.content
    assert recalled in note.content
    assert "not instructions" in note.content
    assert other not in note.content
    assert messages[0].role == "system"
    assert mark not in messages[0].content
    assert messages[0].content.startswith(system_prompt("full")[:40])
    after = messages[notes[0] + 1]
    assert (after.role, after.content) == ("user", prompt)
    plain = await loop_harness.run([say("no idea")], prompt)  # no recall asked: none
    assert not plain.state.counters.tainted
    assert not [m for m in loop_harness.model.requests[-1].messages if m.name == MEMORY_NOTE]
    # The prefix is the same with and without recall: the note comes after it.
    assert loop_harness.model.requests[-1].messages[0] == messages[0]
