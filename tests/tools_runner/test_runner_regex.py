"""Catastrophic regular expressions against the tools-runner as a real process: every
pattern answers at once or with a structured refusal, and while a long (legal) search
runs, `/healthz` and other calls keep answering."""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from shipped import one_service
from tether_client.server.supervisor import Supervisor
from tether_common.bus import Bus
from tether_common.messages.tools import ExecuteTool, ToolResult

pytestmark = pytest.mark.e2e

# Each of these backtracks for minutes (or forever) in Python's `re` on the texts below.
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
    r"([a-z]+)*[0-9]$",
    r"(a?){30}a{30}",
    "|".join(f"a{i}" for i in range(100)) + "|(a+)+$",  # the schema allows 500 characters
]
# Refused with a reason: RE2 cannot express them, or they would compile too large.
REFUSED = [
    "a{1000}{1000}",
    "(a{1000}){1000}",
    "((a{100}){100}){100}",
    "(.*){1000}",
    "a.{999}c",
    r"(a)\1",
    r"(?=a)a",
    r"(?<!b)a",
    r"(?>a+)b",
    "a++b",
    r"a\Z",
    "(unclosed",
]
# A search that is legal but slow (the DFA blows up, RE2 falls back to its NFA: ~90 ms per
# 4,000-character line here); it keeps one file worker busy for seconds.
SLOW = "a[ab]{1000}c"


@pytest.fixture(scope="module")
def regex_workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("regex-ws")
    (root / "evil.txt").write_text(("a" * 5000 + "!\n") * 20 + "x" * 3000 + "\n")
    rng = random.Random(7)
    lines = ("".join(rng.choice("ab") for _ in range(4000)) for _ in range(40))
    (root / "slow").mkdir()
    (root / "slow" / "ab.txt").write_text("\n".join(lines) + "\n")
    return root


@pytest.fixture(scope="module")
async def stack(database_url: str, regex_workspace: Path) -> AsyncIterator[Supervisor]:
    """This module's stack is the tools-runner alone."""
    env = {
        "TETHER_RUNNER_WORKSPACE": str(regex_workspace),
        "TETHER_RUNNER_MIN_SANDBOX": '{"shell": "rlimits"}',
        "TETHER_LOG_LEVEL": "WARNING",
    }
    async with one_service(
        "tools-runner", database_url, operator_token="regex-token", extra_env=env
    ) as supervisor:
        yield supervisor


async def execute(bus: Bus, name: str, args: dict[str, Any]) -> ToolResult:
    call = ExecuteTool(run_id="run-regex", call_id=uuid.uuid4().hex[:8], name=name, args=args)
    # A generous bound: a hang detector, not a speed assertion.
    return await bus.request(bus.subjects.tool_execute, call, timeout=60)


def search(pattern: str, path: str = "evil.txt") -> dict[str, Any]:
    return {"pattern": pattern, "regex": True, "path": path}


async def test_catastrophic_patterns_answer(stack_bus: Bus) -> None:
    results = await asyncio.gather(
        *(execute(stack_bus, "file_search", search(p)) for p in CATASTROPHIC)
    )
    for pattern, result in zip(CATASTROPHIC, results, strict=True):
        assert result.ok, (pattern, result.content)
    by_pattern = dict(zip(CATASTROPHIC, results, strict=True))
    assert by_pattern[r"(a|a)*$"].content.startswith("evil.txt:1:")  # it does match
    assert by_pattern[r"(a*)*b"].content.startswith("no matches")


async def test_unsupported_and_oversized_patterns_are_refused_with_a_reason(stack_bus: Bus) -> None:
    results = await asyncio.gather(*(execute(stack_bus, "file_search", search(p)) for p in REFUSED))
    for pattern, result in zip(REFUSED, results, strict=True):
        assert not result.ok, pattern
        assert result.error_code == "invalid_pattern", (pattern, result.content)
    reasons = {p: r.content for p, r in zip(REFUSED, results, strict=True)}
    assert "backreference" in reasons[r"(a)\1"]
    assert "lookahead/lookbehind" in reasons[r"(?=a)a"]
    assert "counted repetition" in reasons["a{1000}{1000}"]
    assert "steps" in reasons["(.*){1000}"]
    # Too long for the tool's schema: refused before any pattern is compiled.
    huge = await execute(stack_bus, "file_search", search("(a+)+" * 20_000))
    assert not huge.ok
    assert huge.error_code


async def test_health_and_other_calls_answer_while_a_long_search_runs(
    stack_bus: Bus, stack: Supervisor
) -> None:
    slow = asyncio.create_task(execute(stack_bus, "file_search", search(SLOW, "slow")))
    url = stack.child("tools-runner").url
    answered_during = 0
    async with httpx.AsyncClient(timeout=30) as client:
        for _ in range(5):
            health = await client.get(f"{url}/healthz")
            assert health.status_code == 200
            clock = await execute(stack_bus, "current_time", {"timezone": "UTC"})
            assert clock.ok
            answered_during += not slow.done()
    result = await slow
    assert answered_during >= 3, "health and tool calls waited for the search"
    assert result.ok or result.error_code, result.content
