"""`retrieve_output`: page a large stored result back, or query it server-side.

It needs the calling run (a ref is readable only by its run tree): call
`RetrieveTool.run(args, run_id, allowed_runs)`, or register `RetrieveTool.as_tool()`, which
reads the run from the executor's `current_run_id`.
Its own answer obeys the offload rule by being cut to the threshold with a note, never by
being stored again, so paging cannot chase its tail.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from tether_common.bus import Bus
from tether_common.errors import TetherError
from tether_common.messages.outputs import OutputPage, QueryOutput
from tether_common.messages.tools import ToolDescriptor
from tether_tools_runner.context import current_run_id, current_run_tree
from tether_tools_runner.offload import DEFAULT_THRESHOLD
from tether_tools_runner.tool import Tool, ToolFailure

# Room kept for the header, the note and the footer (which repeats the arguments).
FRAME_BYTES = 400

RETRIEVE_OUTPUT = ToolDescriptor(
    name="retrieve_output",
    description=(
        "Reads back a large tool result that was stored instead of shown (you saw a digest "
        "naming its ref, e.g. out_3f2a...). Modes: 'lines' (default) returns `limit` lines "
        "from line `offset` (0-based); 'bytes' pages binary content by byte; 'grep' returns "
        "lines matching the regular expression `pattern` with `context` lines around them "
        "(offset/limit count matches); 'json' returns the value at `path` such as "
        "'$.items[0].name' or 'items.0.name'; 'csv' returns rows offset..offset+limit with "
        "only `columns` (names or 0-based indexes). A long page is cut with a note saying "
        "where to continue. An unknown or foreign ref fails with `not_found`, an old one with "
        "`expired`; do not guess its content then. "
        'Example: {"ref": "out_3f2a...", "mode": "grep", "pattern": "FAILED|Error", '
        '"context": 2}.'
    ),
    parameters={
        "type": "object",
        "properties": {
            "ref": {"type": "string", "pattern": "^out_[0-9a-f]{32}$"},
            "mode": {"type": "string", "enum": ["lines", "bytes", "grep", "json", "csv"]},
            "offset": {"type": "integer", "minimum": 0},
            "limit": {"type": "integer", "minimum": 1, "maximum": 100000},
            "pattern": {"type": "string", "minLength": 1, "maxLength": 1000},
            "context": {"type": "integer", "minimum": 0, "maximum": 20},
            "ignore_case": {"type": "boolean"},
            "path": {"type": "string", "minLength": 1, "maxLength": 500},
            "columns": {
                "type": "array",
                "items": {"type": "string", "minLength": 1},
                "maxItems": 100,
            },
        },
        "required": ["ref"],
        "additionalProperties": False,
    },
    scope="read",
    reach="self",
    effect="read",
    idempotent=True,
    aliases=["read_output", "get_output", "page_output"],
    output_trust="untrusted",
)


ARGUMENTS = frozenset(RETRIEVE_OUTPUT.parameters["properties"])


def render(page: OutputPage, args: dict[str, Any]) -> str:
    """The page with a header saying what it is and a footer saying how to go on."""
    unit = "byte" if page.mode == "bytes" else "line"
    header = (
        f"[{page.ref}: {page.mode} from {unit} {page.offset}; output has {page.size} bytes, "
        f"{page.lines} lines"
        + (f"; content is {page.encoding}" if page.encoding != "utf-8" else "")
        + "]"
    )
    footer = []
    if page.note:
        footer.append(f"[note: {page.note}]")
    if page.next_offset is not None:
        follow = {k: v for k, v in args.items() if k != "offset"} | {"offset": page.next_offset}
        footer.append(f"[next: retrieve_output {json.dumps(follow)}]")
    else:
        footer.append("[end of output]")
    return "\n".join([header, page.content.rstrip("\n"), *footer])


@dataclass(frozen=True, slots=True)
class RetrieveTool:
    """The `retrieve_output` tool bound to a bus; `threshold` caps each answer in bytes."""

    bus: Bus
    threshold: int = DEFAULT_THRESHOLD

    @property
    def descriptor(self) -> ToolDescriptor:
        return RETRIEVE_OUTPUT

    @property
    def name(self) -> str:
        return RETRIEVE_OUTPUT.name

    async def run(self, args: dict[str, Any], run_id: str, allowed_runs: Sequence[str] = ()) -> str:
        """Answer one call for run `run_id` (its run tree in `allowed_runs`); failures raise
        `ToolFailure(code, message)` like every tool, so the executor reports them."""
        known = {k: v for k, v in args.items() if k in ARGUMENTS}
        frame = FRAME_BYTES + len(json.dumps(known).encode())
        try:
            query = QueryOutput.model_validate(
                known
                | {
                    "run_id": run_id,
                    "allowed_runs": list(allowed_runs),
                    "max_bytes": max(self.threshold - frame, 256),
                }
            )
            page = await self.bus.request(self.bus.subjects.output_query, query, timeout=30.0)
        except ValidationError as exc:
            raise ToolFailure(
                "schema_invalid", f"bad arguments: {exc.errors()[0]['msg']}"
            ) from None
        except TetherError as exc:
            raise ToolFailure(exc.code, exc.message) from None
        return render(page, known)

    def as_tool(self) -> Tool:
        """A plain registry `Tool` that takes the run and its tree (parent and children, sent
        by the brain) from the executor's context."""

        async def run(args: dict[str, Any]) -> str:
            return await self.run(args, current_run_id.get(), current_run_tree.get())

        return Tool(RETRIEVE_OUTPUT, run)


def make_retrieve_tool(bus: Bus, *, threshold: int = DEFAULT_THRESHOLD) -> RetrieveTool:
    return RetrieveTool(bus, threshold)


__all__ = ["RETRIEVE_OUTPUT", "RetrieveTool", "make_retrieve_tool"]
