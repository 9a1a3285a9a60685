"""The call being executed, for tools that need more than their arguments (the run id).

The executor sets it around each call; a context variable keeps the tool signature
`(args) -> str` unchanged for tools that do not care."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar

from tether_common.messages.tools import ExecuteTool

current_run_id: ContextVar[str] = ContextVar("current_run_id", default="")
current_run_tree: ContextVar[tuple[str, ...]] = ContextVar("current_run_tree", default=())
# The run tree's workspace folder the brain named (None: the run's own id).
current_workspace: ContextVar[str | None] = ContextVar("current_workspace", default=None)
# The call's idempotency key, passed on to MCP servers in the request's `_meta`.
current_key: ContextVar[str | None] = ContextVar("current_key", default=None)


@contextlib.contextmanager
def bound(call: ExecuteTool) -> Iterator[None]:
    """`call`'s run, tree, workspace and key as the current ones, for its length."""
    tokens = (
        current_run_id.set(call.run_id),
        current_run_tree.set(tuple(call.run_tree)),
        current_workspace.set(call.workspace),
        current_key.set(call.idempotency_key),
    )
    try:
        yield
    finally:
        current_run_id.reset(tokens[0])
        current_run_tree.reset(tokens[1])
        current_workspace.reset(tokens[2])
        current_key.reset(tokens[3])


__all__ = ["bound", "current_key", "current_run_id", "current_run_tree", "current_workspace"]
