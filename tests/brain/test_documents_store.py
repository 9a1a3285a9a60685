"""Retrieval's security filter against the real PostgreSQL (`persistence.documents`,
`tools.search`, `tools.documents`): a table of callers over two tenants, each getting
exactly the documents it may read and never another; the filter is in the query (an
unreadable best match does not use up the limit); bad queries are refused with a clear
`invalid_request`, injection-looking ones are only words; ranking and bounds."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

import pytest
from pydantic import ValidationError
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from runstore import migrated_store
from tether_brain.state.options import RunOptions
from tether_brain.state.run import Limits, RunState
from tether_brain.tools.documents import Documents
from tether_brain.tools.search import MAX_CHARS, SearchTool, reader_keys
from tether_common.errors import AuthError, MessageError, NotFoundError
from tether_common.identity import Principal
from tether_common.messages.documents import AddDocument
from tether_common.messages.gateway import CallRecord

WORD = "zanzibar"  # in every seeded document


@dataclass(frozen=True)
class World:
    documents: Documents
    a: str  # tenant A
    b: str  # tenant B
    collection: str


@pytest.fixture
async def world(engine: AsyncEngine) -> World:
    await migrated_store(engine)
    suffix = uuid.uuid4().hex[:8]
    world = World(Documents(engine), f"ta{suffix}", f"tb{suffix}", f"kb{suffix}")
    seeded = {
        (world.a, "alice-only"): ["user:alice"],
        (world.a, "operators"): ["role:operator"],
        (world.a, "everyone-a"): ["*"],
        (world.a, "nobody"): [],
        (world.a, "clients-and-bob"): ["role:client", "user:bob"],
        (world.b, "operators-b"): ["role:operator"],
        (world.b, "everyone-b"): ["*"],
    }
    for (tenant, title), readers in seeded.items():
        await add(world, tenant, title, f"The {WORD} notes of {title}.", readers)
    return world


async def add(
    world: World, tenant: str, title: str, body: str, readers: list[str], collection: str = ""
) -> str:
    admin = Principal(name="root", role="admin", tenant="default")
    doc = AddDocument(title=title, body=body, readers=readers, tenant=tenant)
    return (await world.documents.add(collection or world.collection, doc, admin)).doc_id


def run_of(
    tenant: str, owner: str | None, started_by: tuple[str, str] | None, *, depth: int = 0
) -> RunState:
    now = datetime.now(UTC)
    return RunState(
        run_id=f"run_{uuid.uuid4().hex}",
        prompt="p",
        provider="scripted",
        model=None,
        limits=Limits(max_steps=3),
        created_at=now,
        updated_at=now,
        options=RunOptions(started_by=started_by, depth=depth),
        tenant=tenant,
        owner=owner,
    )


def helper_of(parent: RunState) -> RunState:
    """A helper run as `loop/subagents.py` makes it: the parent's inherited options, its
    tenant and owner."""
    child = run_of(parent.tenant, parent.owner, None, depth=parent.depth + 1)
    child.options = RunOptions(**parent.options.inherited(), helper=True, depth=child.depth)
    return child


def search(query: str, **more: object) -> CallRecord:
    return CallRecord(
        id=f"c_{uuid.uuid4().hex[:8]}", name="search_documents", arguments={"query": query} | more
    )


async def found_titles(world: World, state: RunState, query: str = WORD) -> set[str]:
    hits = await world.documents.store.search(
        tenant=state.tenant, keys=reader_keys(state), query=query, collection=None, limit=10
    )
    return {h.title for h in hits}


EVERYONE_A = {"everyone-a"}
# caller → (tenant, owner, who started the run, helper?) and the titles it must get.
CALLERS: dict[str, tuple[str, str | None, tuple[str, str] | None, bool, set[str]]] = {
    "A reader by name (a client)": (
        "a",
        "alice",
        ("alice", "client"),
        False,
        {"alice-only", "clients-and-bob"} | EVERYONE_A,
    ),
    "A non-reader (an approver)": ("a", "carol", ("carol", "approver"), False, EVERYONE_A),
    "A reader by role (an operator)": (
        "a",
        "opa",
        ("opa", "operator"),
        False,
        {"operators"} | EVERYONE_A,
    ),
    "B with the same role name": (
        "b",
        "opb",
        ("opb", "operator"),
        False,
        {"operators-b", "everyone-b"},
    ),
    "B with a user name A's reader has": ("b", "bob", ("bob", "client"), False, {"everyone-b"}),
    "admin of B": ("b", "root", ("root", "admin"), False, {"everyone-b"}),
    "admin of A (no reader entry)": ("a", "root", ("root", "admin"), False, EVERYONE_A),
    "A turn posted for alice by an operator": (
        "a",
        "alice",
        ("opa", "operator"),
        False,
        {"alice-only"} | EVERYONE_A,
    ),
    "A run stored before roles were recorded": (
        "a",
        "alice",
        None,
        False,
        {"alice-only"} | EVERYONE_A,
    ),
    "A run with no owner": ("a", None, None, False, EVERYONE_A),
    "a helper of alice": (
        "a",
        "alice",
        ("alice", "client"),
        True,
        {"alice-only", "clients-and-bob"} | EVERYONE_A,
    ),
    "a helper of the approver": ("a", "carol", ("carol", "approver"), True, EVERYONE_A),
    "a helper of B's operator": (
        "b",
        "opb",
        ("opb", "operator"),
        True,
        {"operators-b", "everyone-b"},
    ),
}


@pytest.mark.parametrize("caller", list(CALLERS))
async def test_each_caller_gets_exactly_what_it_may_read(world: World, caller: str) -> None:
    side, owner, started_by, helper, expected = CALLERS[caller]
    state = run_of(world.a if side == "a" else world.b, owner, started_by)
    if helper:
        state = helper_of(state)
    assert await found_titles(world, state) == expected
    # The tool's answer shows the same documents and nothing of any other.
    result = await SearchTool(world.documents).run(state, search(WORD, limit=10))
    assert result.ok, result.content
    every = {"alice-only", "operators", "everyone-a", "nobody", "clients-and-bob"}
    every |= {"operators-b", "everyone-b"}
    shown = {title for title in every if f"{title} [" in result.content}
    assert shown == expected, result.content


async def test_a_document_with_no_readers_is_never_retrieved(world: World) -> None:
    for owner, role in (("alice", "client"), ("opa", "operator"), ("root", "admin")):
        for name in ("nobody", f"{WORD} nobody"):
            state = run_of(world.a, owner, (owner, role))
            assert "nobody" not in await found_titles(world, state, name)


async def test_the_filter_is_in_the_query_not_after_it(world: World) -> None:
    """The best match is one alice may not read: with `limit` 1 she still gets her best
    readable one (a filter after fetching would have fetched the other and shown none)."""
    body = " ".join([WORD] * 50)
    await add(world, world.a, f"{WORD} {WORD} best", body, ["user:someone-else"])
    alice = run_of(world.a, "alice", ("alice", "client"))
    hits = await world.documents.store.search(
        tenant=world.a, keys=reader_keys(alice), query=WORD, collection=None, limit=1
    )
    assert [h.title for h in hits] != [f"{WORD} {WORD} best"]
    assert len(hits) == 1


def test_a_run_reads_as_its_owner_and_the_owners_own_role() -> None:
    assert reader_keys(run_of("t", "alice", ("alice", "client"))) == [
        "*",
        "user:alice",
        "role:client",
    ]
    # Someone else started it (a thread turn posted by an operator): never their role.
    assert reader_keys(run_of("t", "alice", ("opa", "operator"))) == ["*", "user:alice"]
    assert reader_keys(run_of("t", None, ("opa", "operator"))) == ["*"]


# ---- bad queries ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "query",
    [
        "",
        "   ",
        "\t\n",
        "'&|!:*",
        "&",
        "!!!",
        ":*",
        "()",
        "<->",
        "the and of",
        "abc\x00def",
        "x" * 501,
    ],
)
async def test_a_bad_query_is_refused_clearly(world: World, query: str) -> None:
    state = run_of(world.a, "alice", ("alice", "client"))
    result = await SearchTool(world.documents).run(state, search(query))
    assert (result.ok, result.error_code) == (False, "invalid_request"), result.content
    assert result.content.startswith("FAILED: invalid_request: ")
    assert "Nothing was searched" in result.content


@pytest.mark.parametrize(
    "query",
    [
        f"{WORD}:*",
        f"{WORD} & (",
        f"{WORD}' OR 1=1 --",
        f"!{WORD}",
        f"'); DROP TABLE documents; -- {WORD}",
        f"{WORD} <-> x | y",
        f'"{WORD} notes',
        f"\\{WORD}",
        f"{WORD} or alice-only",
    ],
)
async def test_query_syntax_is_only_words(world: World, query: str) -> None:
    """Operators and quotes are web-search syntax at most: never an error, never a way
    past the readers."""
    approver = run_of(world.a, "carol", ("carol", "approver"))
    result = await SearchTool(world.documents).run(approver, search(query, limit=10))
    assert result.ok, result.content
    for unreadable in ("alice-only", "operators", "nobody", "clients-and-bob", "everyone-b"):
        assert f"{unreadable} [" not in result.content, (query, result.content)
    async with world.documents.engine.connect() as conn:
        assert await conn.scalar(text("SELECT to_regclass('documents') IS NOT NULL"))


@pytest.mark.parametrize("limit", [0, 11, -1, True, "3", 2.5])
async def test_a_bad_limit_is_refused(world: World, limit: object) -> None:
    state = run_of(world.a, "alice", ("alice", "client"))
    result = await SearchTool(world.documents).run(state, search(WORD, limit=limit))
    assert result.error_code == "invalid_request", result.content


async def test_no_match_reads_the_same_as_no_readable_match(world: World) -> None:
    carol = run_of(world.a, "carol", ("carol", "approver"))
    tool = SearchTool(world.documents)
    unreadable = await tool.run(carol, search("alice-only"))
    missing = await tool.run(carol, search("quetzalcoatl"))
    assert unreadable.ok
    assert missing.ok
    assert unreadable.content.replace("alice-only", "X") == missing.content.replace(
        "quetzalcoatl", "X"
    )


# ---- ranking and bounds --------------------------------------------------------------


async def test_ranking_puts_the_closer_match_first(world: World) -> None:
    other = f"c{uuid.uuid4().hex[:8]}"
    filler = "Unrelated words about shipping, invoices and office hours. " * 40
    await add(world, world.a, "Office notes", filler + " A refund is possible.", ["*"], other)
    await add(
        world,
        world.a,
        "Refund policy",
        "Refunds: annual plans are refunded pro rata.",
        ["*"],
        other,
    )
    await add(world, world.a, "Shipping", filler, ["*"], other)
    alice = run_of(world.a, "alice", ("alice", "client"))
    hits = await world.documents.store.search(
        tenant=world.a, keys=reader_keys(alice), query="refund", collection=other, limit=5
    )
    assert [h.title for h in hits] == ["Refund policy", "Office notes"]  # stems: refunds
    assert hits[0].rank > hits[1].rank
    assert "**Refund" in hits[0].snippet  # the excerpt marks the words found


async def test_collection_and_limit_narrow_the_search(world: World) -> None:
    other = f"c{uuid.uuid4().hex[:8]}"
    await add(world, world.a, "elsewhere", f"{WORD} elsewhere", ["*"], other)
    alice = run_of(world.a, "alice", ("alice", "client"))
    tool = SearchTool(world.documents)
    narrowed = await tool.run(alice, search(WORD, collection=other))
    assert "elsewhere [" in narrowed.content
    assert "everyone-a [" not in narrowed.content
    one = await tool.run(alice, search(WORD, limit=1))
    assert one.content.startswith("1 document(s) match")


async def test_the_answer_stays_under_the_offload_threshold(world: World) -> None:
    other = f"c{uuid.uuid4().hex[:8]}"
    for n in range(10):
        await add(world, world.a, f"long {n} " + "t" * 250, f"{WORD} " * 11_000, ["*"], other)
    alice = run_of(world.a, "alice", ("alice", "client"))
    result = await SearchTool(world.documents).run(alice, search(WORD, collection=other, limit=10))
    assert result.ok
    assert result.content.startswith("10 document(s) match")
    assert len(result.content) <= MAX_CHARS < 8 * 1024


# ---- managing documents --------------------------------------------------------------


@pytest.mark.parametrize(
    "readers",
    [["role:root"], ["user:"], ["user:a b"], ["everyone"], ["role:"], ["**"], ["user:../x"]],
)
def test_readers_are_roles_users_or_everyone(readers: list[str]) -> None:
    with pytest.raises(ValidationError):
        AddDocument(title="t", body="b", readers=readers)
    AddDocument(title="t", body="b", readers=["role:viewer", "user:alice@example.com", "*"])


async def test_who_may_manage_documents(world: World) -> None:
    opa = Principal(name="opa", role="operator", tenant=world.a)
    opb = Principal(name="opb", role="operator", tenant=world.b)
    alice = Principal(name="alice", role="client", tenant=world.a)
    body = AddDocument(title="mine", body=f"{WORD} mine", readers=["*"])
    made = await world.documents.add(world.collection, body, opa)
    assert (made.tenant, made.created_by) == (world.a, "opa")
    with pytest.raises(AuthError):
        await world.documents.add(world.collection, body, alice)
    with pytest.raises(NotFoundError):  # naming another tenant looks like nothing there
        await world.documents.add(
            world.collection, body.model_copy(update={"tenant": world.a}), opb
        )
    with pytest.raises(NotFoundError):
        await world.documents.get(world.collection, made.doc_id, None, opb)
    with pytest.raises(NotFoundError):
        await world.documents.remove(world.collection, made.doc_id, None, opb)
    with pytest.raises(NotFoundError):
        await world.documents.listing(world.collection, world.a, opb)
    listed = await world.documents.listing(world.collection, None, opa)
    assert made.doc_id in {d.doc_id for d in listed.documents}
    await world.documents.remove(world.collection, made.doc_id, None, opa)
    with pytest.raises(NotFoundError):
        await world.documents.get(world.collection, made.doc_id, None, opa)


async def test_a_tenant_holds_a_bounded_number_of_documents(world: World) -> None:
    small = World(Documents(world.documents.engine, most=5), world.a, world.b, world.collection)
    with pytest.raises(MessageError) as refused:  # 5 are seeded in tenant A
        await add(small, world.a, "one too many", WORD, ["*"])
    assert refused.value.code == "too_large"
    await add(small, world.b, "B has room", WORD, ["*"])  # 2 in tenant B
