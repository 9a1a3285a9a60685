"""The tool catalogue and tool execution between brain and tools-runner."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from tether_common.messages.base import WireModel

Scope = Literal["read", "create", "update", "delete"]
Reach = Literal["self", "user", "instance", "external"]
Effect = Literal["none", "read", "write", "process", "network", "admin", "mcp", "unclassified"]
# `trusted`: a result holds only text under the code's control (the tool's own words, the
# model's own arguments, a clock, a sum). `untrusted`: it can hold text from outside (file
# names and contents, command output, the web, another server), and reading it raises the
# run's untrusted-content bar. Undeclared is untrusted: an unknown tool's output must taint.
OutputTrust = Literal["trusted", "untrusted"]


class ToolDescriptor(WireModel):
    name: str
    description: str
    parameters: dict[str, Any]
    scope: Scope = "read"
    reach: Reach = "external"
    effect: Effect = "unclassified"
    idempotent: bool = False
    available: bool = True
    aliases: list[str] = Field(default_factory=list)
    # Added in place (version 1): readers of an older catalogue get the safe default.
    output_trust: OutputTrust = "untrusted"
    # The runner can run a call of it against a copy of the workspace and show the change
    # set on the approval card (`messages.staging`); approving applies exactly that.
    stageable: bool = False


class CatalogRequest(WireModel):
    # Added in place (version 1): None asks for the shared catalogue (built-in tools and
    # shared MCP servers); a tenant asks for that tenant's own servers' tools only.
    tenant: str | None = Field(default=None, max_length=200)


class Catalog(WireModel):
    tools: list[ToolDescriptor]
    sandbox_level: str = "none"
    # Added in place (version 1): the MCP servers configured on this runner that are
    # still connecting (starting, or restarting after a drop). Their tools may be missing
    # from `tools` or marked unavailable for now; a call of one is answered TOOL_NOT_READY.
    connecting: list[str] = Field(default_factory=list)


# A workspace folder's name: one plain path component (never `.`/`..`, never a slash).
WORKSPACE_PATTERN = r"^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,99}$"
IN_DOUBT = "in_doubt"  # a keyed call started before and its outcome was never recorded
# A keyed call not started because the runner could not record that it starts.
EFFECTS_UNAVAILABLE = "effects_unavailable"
# A call of a tool whose source (an MCP server) is still connecting: not run, and the
# same call sent again once the source is up will be. Retryable, unlike `unknown_tool`.
TOOL_NOT_READY = "tool_not_ready"
# A call of a tool whose MCP server failed for good (its command cannot start, it keeps
# exiting, it gave up after its retries): not run; final, the message names the server.
MCP_FAILED = "mcp_failed"
MCP_PREFIX = "mcp."


def mcp_tool_name(server: str, tool: str) -> str:
    """The catalogue name of an MCP server's tool: `mcp.<server>.<tool>`."""
    return f"{MCP_PREFIX}{server}.{tool}"


def mcp_server_of(name: str) -> str | None:
    """The MCP server a catalogue name belongs to (server names hold no dot), or None."""
    if not name.startswith(MCP_PREFIX):
        return None
    server, dot, tool = name[len(MCP_PREFIX) :].partition(".")
    return server if server and dot and tool else None


def effect_key(run_id: str, call_id: str) -> str:
    """The idempotency key of one tool call: the same call of the same run, sent again
    (a retry, a takeover), is the same effect."""
    return f"{run_id}:{call_id}"


class ExecuteTool(WireModel):
    run_id: str
    # The run's tree (parent and children): who else may read outputs this run reads.
    run_tree: list[str] = Field(default_factory=list, max_length=1000)
    call_id: str
    name: str
    args: dict[str, Any]
    timeout_s: float | None = Field(default=None, gt=0, le=600)
    # The three below were added in place (version 1): an older brain sends none, and its
    # calls run unkeyed, in the run's own folder.
    # `effect_key(run_id, call_id)`: a non-idempotent call is run at most once per key;
    # a repeat gets the recorded result (or `in_doubt`).
    idempotency_key: str | None = Field(default=None, min_length=1, max_length=300)
    # Only an operator's "run it again" on an in-doubt card: take over a key whose first
    # run stopped without a recorded outcome (a recorded outcome is still replayed).
    retry_in_doubt: bool = False
    # The run tree's workspace folder (the root run's id; children share it). Used when
    # the runner keeps one folder per run tree; None: the run's own id.
    workspace: str | None = Field(default=None, pattern=WORKSPACE_PATTERN)
    # An approved staged effect: apply the change set with this digest (staged for this
    # run, call and arguments) instead of running the tool (`messages.staging`).
    staged: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")
    # Added in place (version 1): the run's tenant, whose own tool servers the call may
    # name; None (an older brain, a call of no run's): shared tools only.
    tenant: str | None = Field(default=None, max_length=200)


class ToolResult(WireModel):
    """A tool never raises to its caller: a failure is `ok=False` with a code."""

    call_id: str
    name: str
    ok: bool
    content: str
    error_code: str | None = None
    duration_ms: float = 0.0
    output_ref: str | None = None
    sandbox_level: str | None = None
    # What the tool read generously to run the call (a place name as its IANA zone, a
    # 12-hour time as 24-hour), in words; the brain records them on the step.
    repairs: list[str] = Field(default_factory=list, max_length=50)
    # The digest of the staged change set this call applied (None: it ran the tool).
    applied: str | None = None
