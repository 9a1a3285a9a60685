"""The issue's own case: a 65,552-byte, 12,775-line shell log from a real command goes
through offload, digest and `retrieve_output` paging, and comes back byte for byte."""

from __future__ import annotations

import asyncio
import json
import re

from tether_common.bus import Bus
from tether_tools_runner.offload import maybe_offload, threshold_for
from tether_tools_runner.tools.retrieve import make_retrieve_tool

# `seq` gives 12,772 lines (65,526 bytes); three more lines bring it to the size.
COMMAND = "seq 1 12772; echo 'ERROR: disk'; echo x; echo 'exit code 1'"
NEXT = re.compile(r"^\[next: retrieve_output (\{.*\})\]$")


async def shell_log() -> bytes:
    proc = await asyncio.create_subprocess_exec("sh", "-c", COMMAND, stdout=asyncio.subprocess.PIPE)
    out, _ = await proc.communicate()
    return out


def page_body(answer: str) -> tuple[list[str], dict[str, object] | None]:
    """The content lines of one rendered page, and the arguments of the next call."""
    lines = answer.split("\n")
    assert lines[0].startswith("[out_")
    footer = lines[-1]
    match = NEXT.match(footer)
    body = lines[1:-1]
    if body and body[-1].startswith("[note:"):
        body = body[:-1]
    return body, (json.loads(match.group(1)) if match else None)


async def test_shell_log_round_trips_through_offload_digest_and_paging(
    obus: Bus, owner: str
) -> None:
    log = await shell_log()
    assert len(log) == 65_552
    assert log.count(b"\n") == 12_775
    threshold = threshold_for("shell")

    seen, ref = await maybe_offload(obus, owner, "shell", log.decode(), threshold=threshold)
    assert ref is not None
    assert len(seen.encode()) <= threshold
    assert "65552 bytes, 12775 lines" in seen
    assert "12773: ERROR: disk" in seen
    assert "Exit code: 1" in seen
    assert f'retrieve_output {{"ref": "{ref}", "offset": 0, "limit": 200}}' in seen

    tool = make_retrieve_tool(obus, threshold=threshold)
    args: dict[str, object] | None = {"ref": ref, "offset": 0, "limit": 5000}
    collected: list[str] = []
    pages = 0
    while args is not None:
        answer = await tool.run(dict(args), owner)
        assert len(answer.encode()) <= threshold
        body, args = page_body(answer)
        collected += body
        pages += 1
    assert pages > 10
    assert ("\n".join(collected) + "\n").encode() == log


async def test_digest_of_the_same_log_is_deterministic(obus: Bus, owner: str) -> None:
    log = await shell_log()
    first, ref_a = await maybe_offload(obus, owner, "shell", log, threshold=4096)
    second, ref_b = await maybe_offload(obus, owner, "shell", log, threshold=4096)
    assert ref_a != ref_b
    assert ref_a is not None
    assert ref_b is not None
    assert first.replace(ref_a, "REF") == second.replace(ref_b, "REF")


async def test_small_results_stay_inline(obus: Bus, owner: str) -> None:
    seen, ref = await maybe_offload(obus, owner, "current_time", "12:00", threshold=8192)
    assert (seen, ref) == ("12:00", None)
