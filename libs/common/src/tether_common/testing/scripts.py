"""Scripts for the gateway's `scripted` provider: turns of normalized events."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from tether_common.messages.runs import RunEvent, RunView

Turn = list[dict[str, Any]]
# A test fixture's signature: run these turns (prompt, options) to the end.
RunScript = Callable[..., Coroutine[Any, Any, tuple[RunView, list[RunEvent]]]]


def say(text: str) -> Turn:
    """A turn that answers `text`."""
    return [{"kind": "chunk", "text": text}]


def call(tool: str, /, **arguments: Any) -> dict[str, Any]:
    """One `tool_call` event with a fresh id."""
    return {
        "kind": "tool_call",
        "id": f"c_{uuid.uuid4().hex[:8]}",
        "name": tool,
        "arguments": arguments,
    }


def write_script(
    scripts: Path, turns: list[Turn], helpers: dict[str, list[Turn]] | None = None
) -> str:
    """Write a script into the scripts folder; returns its name (the run's `model`).
    `helpers` maps a sub-agent's task to the turns that sub-agent replays."""
    name = f"s{uuid.uuid4().hex[:10]}"
    body: dict[str, Any] = {"turns": turns}
    if helpers:
        body["helpers"] = {task: {"turns": t} for task, t in helpers.items()}
    (scripts / f"{name}.json").write_text(json.dumps(body))
    return name


def event_data(events: list[RunEvent], kind: str) -> list[dict[str, Any]]:
    """The data of every event of one kind, in order."""
    return [e.data for e in events if e.kind == kind]
