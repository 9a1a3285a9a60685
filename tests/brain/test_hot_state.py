"""Two things every step does, made cheaper without changing what they give: the run
counters' row value (`Counters.to_json`, once `dataclasses.asdict`) and the tenant's hooks
(`HookBook.of`, whose stale copy each run in flight used to read again by itself)."""

from __future__ import annotations

import asyncio
import random
from dataclasses import asdict
from typing import Any, cast

from tether_brain.agents.store import AgentStore, Kind, StoredDocument
from tether_brain.hooks.book import KIND, HookBook
from tether_brain.state.run import Counters


def _nested(rng: random.Random, depth: int = 0) -> Any:
    if depth > 2 or rng.random() < 0.3:
        return rng.choice([1, "x", None, True, 2.5])
    if rng.random() < 0.5:
        return [_nested(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {f"k{i}": _nested(rng, depth + 1) for i in range(rng.randint(0, 3))}


def test_counters_to_json_is_asdict_and_owns_its_containers() -> None:
    rng = random.Random(7)
    for _ in range(200):
        counters = Counters(tool_calls=rng.randint(0, 9), tainted=rng.random() < 0.5)
        counters.pending_approval = {"approval_id": "apr_1", "call": _nested(rng)}
        counters.pending_children = {"c1": "run_2"} if rng.random() < 0.5 else None
        counters.chat_grants = [str(_nested(rng))]
        written = counters.to_json()
        assert written == asdict(counters)
        before = asdict(counters)
        counters.pending_approval["call"] = "changed"
        counters.chat_grants.append("more")
        assert written == before  # what was taken for the row stays as it was


class CountingStore:
    """The one read `HookBook` makes of the agents store, counted."""

    def __init__(self) -> None:
        self.reads = 0
        self.version = 1
        self.delay_s = 0.05  # a database read takes a while

    async def document(self, kind: Kind, scope: str) -> StoredDocument:
        self.reads += 1
        version = self.version  # what the database held when the read began
        await asyncio.sleep(self.delay_s)
        return StoredDocument(kind, scope, {"hooks": []}, version, None, None, None)


async def test_runs_that_find_the_hooks_stale_together_share_one_read() -> None:
    store = CountingStore()
    book = HookBook(cast(AgentStore, store), refresh_s=60)
    found = await asyncio.gather(*(book.of("acme") for _ in range(50)))
    assert store.reads == 1
    assert all(f.version == 1 for f in found)
    await book.of("acme")  # fresh enough: no read
    assert store.reads == 1
    await asyncio.gather(book.fresh("acme"), book.fresh("acme"))  # asked for now: each reads
    assert store.reads == 3
    await book.of("other")
    assert store.reads == 4
    assert KIND == "hooks"


async def test_a_read_begun_before_a_change_never_replaces_the_fresh_one() -> None:
    store = CountingStore()
    book = HookBook(cast(AgentStore, store), refresh_s=60)
    store.delay_s = 0.2
    stale = asyncio.ensure_future(book.of("acme"))  # a slow shared read under way (version 1)
    await asyncio.sleep(0.01)
    store.version, store.delay_s = 2, 0.01  # a change lands; the next read is quick
    assert (await book.fresh("acme")).version == 2
    assert (await stale).version == 1  # it finished after the fresh read...
    assert (await book.of("acme")).version == 2  # ...and is not what the book keeps
