"""A stored output is readable by the run that made it and by its run tree (sent by the
brain with each call), and by nobody else: another run gets `not_found`."""

from __future__ import annotations

import pytest

from tether_common.bus import Bus
from tether_common.messages.outputs import PutOutput
from tether_common.messages.tools import ExecuteTool

pytestmark = pytest.mark.e2e


async def retrieve(bus: Bus, run_id: str, ref: str, tree: list[str]) -> str:
    call = ExecuteTool(
        run_id=run_id, call_id="c1", name="retrieve_output", args={"ref": ref}, run_tree=tree
    )
    result = await bus.request(bus.subjects.tool_execute, call, timeout=20)
    return result.content


async def test_refs_follow_the_run_tree(stack_bus: Bus) -> None:
    stored = await stack_bus.request(
        stack_bus.subjects.output_put, PutOutput(run_id="run_child", content="line one\nline two\n")
    )
    assert "line one" in await retrieve(stack_bus, "run_child", stored.ref, [])
    assert "line two" in await retrieve(stack_bus, "run_parent", stored.ref, ["run_child"])
    stranger = await retrieve(stack_bus, "run_stranger", stored.ref, ["run_other"])
    assert stranger.startswith("FAILED: not_found")
    assert "line one" not in stranger
