"""Server-side queries through the bus: line and byte pages, grep with context and a time
budget, JSON paths, CSV columns; and who may read a ref."""

from __future__ import annotations

import base64
import json

import pytest

from tether_common.bus import Bus
from tether_common.errors import NotFoundError, TetherError
from tether_common.messages.outputs import OutputPage, QueryOutput
from tether_tools_runner.context import current_run_id
from tether_tools_runner.offload import threshold_for, upload
from tether_tools_runner.tool import ToolFailure
from tether_tools_runner.tools.retrieve import make_retrieve_tool


async def query(bus: Bus, ref: str, run_id: str, **kw: object) -> OutputPage:
    body = QueryOutput.model_validate({"ref": ref, "run_id": run_id, **kw})
    return await bus.request(bus.subjects.output_query, body, timeout=20)


async def test_lines_pages_and_end(obus: Bus, owner: str) -> None:
    data = b"".join(b"row %d\n" % i for i in range(1000))
    ref = (await upload(obus, owner, data)).ref
    page = await query(obus, ref, owner, offset=995, limit=10)
    assert page.content == "row 995\nrow 996\nrow 997\nrow 998\nrow 999\n"
    assert page.next_offset is None
    assert page.lines == 1000
    past = await query(obus, ref, owner, offset=5000)
    assert past.content == ""
    assert past.note is not None
    assert "past the end" in past.note


async def test_a_line_longer_than_the_page_points_to_bytes(obus: Bus, owner: str) -> None:
    ref = (await upload(obus, owner, b"x" * 5000 + b"\nshort\n")).ref
    page = await query(obus, ref, owner, max_bytes=1024)
    assert page.content == ""
    assert page.note is not None
    assert '"bytes"' in page.note
    chunk = await query(obus, ref, owner, mode="bytes", offset=4990, limit=20)
    assert chunk.content == "xxxxxxxxxx\nshort\n"
    assert chunk.next_offset is None


async def test_binary_pages_come_back_as_base64(obus: Bus, owner: str) -> None:
    data = bytes(range(256)) * 1000
    ref = (await upload(obus, owner, data, media_type="application/octet-stream")).ref
    got, offset = b"", 0
    while True:
        page = await query(obus, ref, owner, mode="bytes", offset=offset, limit=100_000)
        assert page.encoding == "base64"
        got += base64.b64decode(page.content)
        if page.next_offset is None:
            break
        offset = page.next_offset
    assert got == data


async def test_grep_with_context_finds_the_failing_test(obus: Bus, owner: str) -> None:
    lines = [f"tests/test_{i}.py::test_ok PASSED" for i in range(20000)]
    lines[12345] = "tests/test_12345.py::test_boom FAILED"
    ref = (await upload(obus, owner, ("\n".join(lines) + "\n").encode())).ref
    page = await query(obus, ref, owner, mode="grep", pattern="FAILED", context=1)
    assert page.matches == 1
    assert page.content == (
        "12345-tests/test_12344.py::test_ok PASSED\n"
        "12346:tests/test_12345.py::test_boom FAILED\n"
        "12347-tests/test_12346.py::test_ok PASSED\n"
    )
    many = await query(obus, ref, owner, mode="grep", pattern="passed", ignore_case=True, limit=3)
    assert many.matches == 19999
    assert many.next_offset == 3
    assert many.content.count("\n") == 3


async def test_a_catastrophic_pattern_answers_at_once(obus: Bus, owner: str) -> None:
    # Linear-time patterns (tests/outputs/test_outputs_patterns.py tries many more).
    ref = (await upload(obus, owner, b"a" * 40 + b"!\n")).ref
    page = await query(obus, ref, owner, mode="grep", pattern="^(a+)+$")
    assert page.matches == 0
    assert page.note is not None
    assert "budget" not in page.note
    with pytest.raises(TetherError) as bad:
        await query(obus, ref, owner, mode="grep", pattern="(unclosed")
    assert bad.value.code == "invalid_pattern"


async def test_json_path_and_csv_columns(obus: Bus, owner: str) -> None:
    doc = {"data": {"items": [{"name": "a", "n": 1}, {"name": "b", "n": 2}]}}
    ref = (await upload(obus, owner, json.dumps(doc).encode())).ref
    for path in ("$.data.items[1].name", "data.items.1.name"):
        assert json.loads((await query(obus, ref, owner, mode="json", path=path)).content) == "b"
    names = await query(obus, ref, owner, mode="json", path="$.data.items[*].n")
    assert json.loads(names.content) == [1, 2]
    with pytest.raises(TetherError, match="no key 'nope'") as bad:
        await query(obus, ref, owner, mode="json", path="$.nope")
    assert bad.value.code == "invalid_path"
    table = b"id,name,score\n1,ann,9\n2,bob,7\n3,cy,8\n"
    csv_ref = (await upload(obus, owner, table)).ref
    page = await query(obus, csv_ref, owner, mode="csv", columns=["name", "2"], offset=1, limit=1)
    assert page.content == "name,score\nbob,7\n"
    assert page.next_offset == 2


async def test_other_runs_get_not_found_and_the_tree_is_allowed(obus: Bus, owner: str) -> None:
    ref = (await upload(obus, owner, b"secret\n" * 10)).ref
    with pytest.raises(NotFoundError) as foreign:
        await query(obus, ref, "run_other")
    with pytest.raises(NotFoundError) as missing:
        await query(obus, "out_" + "f" * 32, "run_other")
    assert foreign.value.code == missing.value.code == "not_found"
    assert foreign.value.message.replace(ref, "R") == missing.value.message.replace(
        "out_" + "f" * 32, "R"
    )
    child = await query(obus, ref, "run_child", allowed_runs=[owner])
    assert child.content.startswith("secret")
    tool = make_retrieve_tool(obus)
    with pytest.raises(ToolFailure) as failure:
        await tool.run({"ref": ref}, "run_other")
    assert failure.value.code == "not_found"
    assert (await tool.run({"ref": ref}, "run_parent", [owner])).endswith("[end of output]")


async def test_a_large_answer_is_cut_with_a_note_never_stored_again(obus: Bus, owner: str) -> None:
    data = b"".join(b"error %d: something went wrong here\n" % i for i in range(5000))
    ref = (await upload(obus, owner, data)).ref
    tool = make_retrieve_tool(obus, threshold=2048)
    answer = await tool.run({"ref": ref, "mode": "grep", "pattern": "error", "limit": 5000}, owner)
    assert len(answer.encode()) <= 2048
    assert "[note: cut at" in answer
    assert "out_" not in answer.replace(ref, "")  # no new ref: nothing was offloaded again
    lines = await tool.run({"ref": ref, "limit": 5000}, owner)
    assert len(lines.encode()) <= 2048
    assert '[next: retrieve_output {"ref": ' in lines


def test_thresholds_default_to_8k_and_4k_for_shell() -> None:
    assert threshold_for("web_fetch") == 8192
    assert threshold_for("shell") == 4096
    assert threshold_for("web_fetch", {"web_fetch": 16384}) == 16384


async def test_the_registry_tool_reads_the_run_from_the_executor_context(
    obus: Bus, owner: str
) -> None:
    ref = (await upload(obus, owner, b"mine\n" * 3000)).ref
    tool = make_retrieve_tool(obus).as_tool()
    token = current_run_id.set(owner)
    try:
        assert (await tool.run({"ref": ref, "limit": 1})).split("\n")[1] == "mine"
    finally:
        current_run_id.reset(token)
    with pytest.raises(ToolFailure):
        await tool.run({"ref": ref})  # no run set: nobody's ref
