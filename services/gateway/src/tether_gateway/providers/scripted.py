"""`scripted`: replays a script of normalized events, for tests and demos.

A script is a JSON file `<scripts_dir>/<model>.json` holding `{"turns": [[event, ...], ...]}`
and optionally `"helpers": {"<task>": {"turns": [...]}}` — the turns a sub-agent started
with that task replays (its first user message is the task);
the turn replayed is the number of assistant messages already in the request, so the
provider keeps no state and any gateway replica answers the same. An entry
`{"pause_s": x}` waits before the next event (to test stops and timeouts).
"""

from __future__ import annotations

import asyncio
import json
import stat
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from tether_common.errors import ErrorCode
from tether_common.messages.gateway import (
    MODEL_EVENT,
    DoneEvent,
    ErrorEvent,
    GenerateRequest,
    ModelEvent,
)

NAME_PATTERN_OK = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.")


class ScriptedProvider:
    name = "scripted"

    def __init__(self, scripts_dir: Path | None) -> None:
        self.scripts_dir = scripts_dir
        self._cache: dict[Path, tuple[int, dict[str, Any]]] = {}

    def _load(self, model: str | None) -> dict[str, Any]:
        if self.scripts_dir is None:
            raise LookupError("no scripts folder is configured (TETHER_GATEWAY_SCRIPTS_DIR)")
        if not model or not set(model) <= NAME_PATTERN_OK or model.startswith("."):
            raise LookupError(f"'{model}' is not a script name")
        path = self.scripts_dir / f"{model}.json"
        try:
            found = path.stat()  # one look per turn: a script edited meanwhile is re-read
        except FileNotFoundError:
            found = None
        if found is None or not stat.S_ISREG(found.st_mode):
            raise LookupError(f"no script named '{model}' in {self.scripts_dir}")
        mtime = found.st_mtime_ns
        cached = self._cache.get(path)
        if cached is not None and cached[0] == mtime:
            return cached[1]
        script = json.loads(path.read_text())
        if not isinstance(script, dict) or not isinstance(script.get("turns"), list):
            raise LookupError(f"script '{model}' has no list of turns")
        self._cache[path] = (mtime, script)
        return script

    async def generate(self, request: GenerateRequest) -> AsyncGenerator[ModelEvent, None]:
        try:
            turns = _turns_for(self._load(request.model), request)
        except (LookupError, ValueError, KeyError, OSError) as exc:
            yield ErrorEvent(code=ErrorCode.SCRIPT_INVALID, message=str(exc))
            return
        index = sum(1 for m in request.messages if m.role == "assistant")
        if index >= len(turns):
            yield ErrorEvent(
                code=ErrorCode.SCRIPT_EXHAUSTED,
                message=f"script has {len(turns)} turns; turn {index + 1} asked",
            )
            return
        async for event in self._replay(turns[index]):
            yield event

    async def _replay(self, entries: list[dict[str, Any]]) -> AsyncGenerator[ModelEvent, None]:
        for entry in entries:
            if "pause_s" in entry:
                await asyncio.sleep(float(entry["pause_s"]))
                continue
            try:
                event = MODEL_EVENT.validate_python(entry)
            except ValidationError as exc:
                yield ErrorEvent(code=ErrorCode.SCRIPT_INVALID, message=f"bad script event: {exc}")
                return
            yield event
            if event.kind in ("done", "error"):
                return
        yield DoneEvent(finish_reason="stop")


def _turns_for(script: dict[str, Any], request: GenerateRequest) -> list[list[dict[str, Any]]]:
    """The main turns, or a helper's when the request's first user message is its task."""
    first_user = next((m.content for m in request.messages if m.role == "user"), None)
    helper = script.get("helpers", {}).get(first_user)
    turns = helper["turns"] if isinstance(helper, dict) else script["turns"]
    if not isinstance(turns, list):
        raise LookupError("a helper script has no list of turns")
    return turns
