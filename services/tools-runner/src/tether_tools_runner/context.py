"""The call being executed, for tools that need more than their arguments (the run id).

The executor sets it around each call; a context variable keeps the tool signature
`(args) -> str` unchanged for tools that do not care."""

from __future__ import annotations

from contextvars import ContextVar

current_run_id: ContextVar[str] = ContextVar("current_run_id", default="")
current_run_tree: ContextVar[tuple[str, ...]] = ContextVar("current_run_tree", default=())
# The run tree's workspace folder the brain named (None: the run's own id).
current_workspace: ContextVar[str | None] = ContextVar("current_workspace", default=None)
# The call's idempotency key, passed on to MCP servers in the request's `_meta`.
current_key: ContextVar[str | None] = ContextVar("current_key", default=None)

__all__ = ["current_key", "current_run_id", "current_run_tree", "current_workspace"]
