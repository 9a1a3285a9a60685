"""`scripted`: replays a script of normalized events, for tests and demos.

A script is a JSON file `<scripts_dir>/<model>.json`; its format, and how a request picks
its turn, is `tether_common.scripted` (the brain's in-process scripted model plays it
the same way). The provider keeps no state, so any gateway replica answers the same.
"""

from __future__ import annotations

import json
import stat
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

from tether_common.errors import ErrorCode
from tether_common.messages.gateway import (
    ErrorEvent,
    GenerateRequest,
    ModelEvent,
)
from tether_common.scripted import checked, play

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
        script = checked(json.loads(path.read_text()), model)
        self._cache[path] = (mtime, script)
        return script

    async def generate(self, request: GenerateRequest) -> AsyncGenerator[ModelEvent, None]:
        try:
            script = self._load(request.model)
        except (LookupError, ValueError, OSError) as exc:
            yield ErrorEvent(code=ErrorCode.SCRIPT_INVALID, message=str(exc))
            return
        async for event in play(script, request):
            yield event
