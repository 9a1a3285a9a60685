"""Catastrophic regular expressions against the output-store as a real process: every
grep answers at once or with a structured refusal, and while a long (legal) grep runs,
`/healthz` and other queries keep answering."""

from __future__ import annotations

import asyncio
import json
import random
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from shipped import observe, one_service
from tether_client.server.supervisor import Supervisor
from tether_common.bus import Bus
from tether_common.errors import TetherError
from tether_common.messages.outputs import OutputPage, PutOutput, QueryOutput
from tether_tools_runner.offload import upload

CATASTROPHIC = [
    r"(a+)+$",
    r"^(a+)+$",
    r"(a|a)*$",
    r"(a|aa)+$",
    r"(a*)*b",
    r"((a+)+)+b",
    r"(x+x+)+y",
    r"(\w+\s?)*$",
    r"(.*a){25}",
    r"(a?){30}a{30}",
    "|".join(f"w{i}" for i in range(180)) + "|(a+)+$",  # a huge alternation, ~1,000 chars
    "[a-z]{1000}!",
]
REFUSED = {
    "a{1000}{1000}": "counted repetition",
    "(a{1000}){1000}": "counted repetition",
    "(.*){1000}": "steps",
    "a.{999}c": "steps",
    r"(a)\1": "backreference",
    r"(?P<x>a)(?P=x)": "backreference",
    r"(?=a)a": "lookahead/lookbehind",
    r"(?<=a)b": "lookahead/lookbehind",
    r"(?>a+)b": "atomic",
    "a*+b": "possessive",
    "(unclosed": "invalid",
}
SLOW = "a[ab]{1000}c"  # legal, but the DFA blows up here: RE2's NFA, ~90 ms a line


@pytest.fixture(scope="module")
async def grep_store(database_url: str) -> AsyncIterator[Supervisor]:
    env = {
        "TETHER_LOG_LEVEL": "WARNING",
        "TETHER_DB_POOL_SIZE": "6",
        "TETHER_OUTPUTS_GREP_BUDGET_S": "4",
    }
    async with one_service(
        "output-store", database_url, operator_token="grep-token", extra_env=env
    ) as supervisor:
        yield supervisor


@pytest.fixture
async def gbus(grep_store: Supervisor) -> AsyncIterator[Bus]:
    bus = await observe(grep_store)
    try:
        yield bus
    finally:
        await bus.close()


async def put(bus: Bus, run_id: str, text: str) -> str:
    stored = await bus.request(bus.subjects.output_put, PutOutput(run_id=run_id, content=text))
    return stored.ref


def random_ab_lines(count: int, width: int) -> bytes:
    """`count` lines of `width` random a/b characters (no `c`: SLOW never matches)."""
    rng = random.Random(3)
    # One random byte per character, its low bit choosing a or b: fast for megabytes.
    to_ab = bytes(b"ab"[i & 1] for i in range(256))
    return b"".join(rng.randbytes(width).translate(to_ab) + b"\n" for _ in range(count))


async def grep(bus: Bus, ref: str, run_id: str, pattern: str, **extra: Any) -> OutputPage:
    query = QueryOutput(ref=ref, run_id=run_id, mode="grep", pattern=pattern, **extra)
    # A generous bound: a hang detector, not a speed assertion.
    return await bus.request(bus.subjects.output_query, query, timeout=60)


async def test_catastrophic_patterns_answer(gbus: Bus) -> None:
    run_id = f"run_{uuid.uuid4().hex[:8]}"
    ref = await put(gbus, run_id, ("a" * 3000 + "!\n") * 30)
    pages = await asyncio.gather(*(grep(gbus, ref, run_id, p) for p in CATASTROPHIC))
    for pattern, page in zip(CATASTROPHIC, pages, strict=True):
        assert page.note is None or "budget" not in page.note, pattern
    found = {p: page.matches for p, page in zip(CATASTROPHIC, pages, strict=True)}
    assert found[r"(a|a)*$"] == 30
    assert found[r"(a*)*b"] == 0
    assert found["[a-z]{1000}!"] == 30


async def test_refused_patterns_say_why(gbus: Bus) -> None:
    run_id = f"run_{uuid.uuid4().hex[:8]}"
    ref = await put(gbus, run_id, "aaa\n")
    for pattern, reason in REFUSED.items():
        with pytest.raises(TetherError) as refused:
            await grep(gbus, ref, run_id, pattern)
        assert refused.value.code == "invalid_pattern", pattern
        assert reason in refused.value.message, (pattern, refused.value.message)
    # Sent raw: the client's own model would refuse them before the bus.
    for huge in ("(a+)+" * 20_000, "a" * 100_000, "|".join(["a"] * 50_000)):
        body = {"ref": ref, "run_id": run_id, "mode": "grep", "pattern": huge}
        reply = json.loads(
            await gbus.request_raw(
                gbus.subjects.output_query.subject, json.dumps(body).encode(), timeout=60
            )
        )
        assert reply["error"]["code"] == "invalid_message", reply
        assert "pattern" in reply["error"]["message"]


async def test_health_and_other_queries_answer_while_a_long_grep_runs(
    gbus: Bus, grep_store: Supervisor
) -> None:
    run_id = f"run_{uuid.uuid4().hex[:8]}"
    # Far more work than the 4 s budget on any machine: 2,500 lines of 4,000 random a/b
    # (10 MB, uploaded in chunks) at ~35 ms a line on a quiet core is ~90 s, so even a
    # machine twenty times faster is still searching when the budget stops it.
    ref = (await upload(gbus, run_id, random_ab_lines(2500, 4000))).ref
    slow = asyncio.create_task(grep(gbus, ref, run_id, SLOW))
    url = grep_store.child("output-store").url
    answered_during = 0
    async with httpx.AsyncClient(timeout=30) as client:
        for _ in range(5):
            assert (await client.get(f"{url}/healthz")).status_code == 200
            page = await gbus.request(
                gbus.subjects.output_query, QueryOutput(ref=ref, run_id=run_id, limit=1)
            )
            assert page.content
            answered_during += not slow.done()
    result = await slow
    assert answered_during >= 3, "health and queries waited for the grep"
    assert result.note is not None
    assert "budget" in result.note, result.note  # stopped at 4 s, far from the end
