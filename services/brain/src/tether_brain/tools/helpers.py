"""The `run_agent` tool as the model is offered it: its name, depth limit, step budget and
descriptor. Starting children is the loop's (`loop/subagents.py`): it must park the parent."""

from __future__ import annotations

from tether_brain.state.run import RunState
from tether_brain.tools.results import refused
from tether_common.errors import ErrorCode
from tether_common.messages.gateway import CallRecord
from tether_common.messages.tools import ToolDescriptor, ToolResult

RUN_AGENT = "run_agent"
MAX_DEPTH = 2
DEFAULT_CHILD_STEPS = 4
MAX_CHILD_STEPS = 8

DESCRIPTOR = ToolDescriptor(
    name=RUN_AGENT,
    description=(
        "Starts a helper agent for a self-contained sub-task and returns its final summary. "
        "Use it to split work that needs several steps of its own (e.g. research one "
        "question while you handle another); several calls in one step run in parallel. "
        "`task` says everything the helper needs (it sees none of this conversation); "
        "`tools` names the tools it may use (a subset of yours; default: all of yours); "
        "`max_steps` is its step budget (default 4, at most 8). "
        'Example: {"task": "Find the time in Tokyo and in Lima", "tools": ["current_time"]}.'
    ),
    parameters={
        "type": "object",
        "properties": {
            "task": {"type": "string", "minLength": 1, "maxLength": 20000},
            "tools": {"type": "array", "items": {"type": "string"}, "maxItems": 50},
            "max_steps": {"type": "integer", "minimum": 1, "maximum": MAX_CHILD_STEPS},
        },
        "required": ["task"],
        "additionalProperties": False,
    },
    scope="read",
    reach="self",
    effect="none",
    idempotent=False,
    # The summary's trust is the child's: `Children.collect_summaries` carries its taint back.
    output_trust="trusted",
)


class AgentTool:
    """The descriptor only: the loop starts children itself (it must park the parent)."""

    name = RUN_AGENT

    def descriptor(self) -> ToolDescriptor | None:
        return DESCRIPTOR

    async def run(self, state: RunState, call: CallRecord) -> ToolResult:
        return refused(call, ErrorCode.INTERNAL, "run_agent is handled by the loop")
