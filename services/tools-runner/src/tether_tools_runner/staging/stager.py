"""Staging a call and applying what an operator approved.

`stage`: a call of a stageable tool runs against a copy of what it touches (the file for
`file_write`/`file_edit`, the workspace for `shell`); its change set is stored under the
call's effect key and answered for the approval card. `apply`: the stored set with the
approved digest, for this very call (key, tool and arguments), is applied exactly, or
nothing is (`stale_effect`) when a touched path is no longer its base.

A stage request that fails for a reason of the runner's own (its staging folder cannot
be made, a scratch copy cannot be written, the set cannot be stored) answers a structured
error (`staging_unavailable`, `store_error`), logged here and counted by the bus; the
brain then asks without a diff and the card says why."""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy.exc import SQLAlchemyError

from tether_common.errors import ErrorCode, StoreError, TetherError
from tether_common.messages.staging import STALE_EFFECT, StagedEffect
from tether_common.messages.tools import ExecuteTool, ToolResult, effect_key
from tether_tools_runner.context import bound, current_run_id
from tether_tools_runner.effects import request_digest
from tether_tools_runner.executor import Executor
from tether_tools_runner.file_workers import FileWorkers
from tether_tools_runner.folders import Workspaces
from tether_tools_runner.revisions import Revisions, revision_of
from tether_tools_runner.staging.changes import Node, Staged, compare
from tether_tools_runner.staging.ops import Stale, Step, apply_steps, before_edit, before_write
from tether_tools_runner.staging.shell import ShellStaging
from tether_tools_runner.staging.store import StagedStore
from tether_tools_runner.tool import ToolFailure
from tether_tools_runner.tool import failed as _failed
from tether_tools_runner.tools.files_write import Change
from tether_tools_runner.workspace import Workspace, shown

log = logging.getLogger(__name__)
STAGED_UNKNOWN = "staged_unknown"


class Stager:
    def __init__(
        self,
        executor: Executor,
        workspaces: Workspaces,
        workers: FileWorkers,
        book: Revisions,
        store: StagedStore,
        shell: ShellStaging | None,
    ) -> None:
        self.executor = executor
        self.workspaces = workspaces
        self.workers = workers
        self.book = book
        self.store = store
        self.shell = shell

    async def stage(self, call: ExecuteTool) -> StagedEffect:
        """The call's change set, or why it cannot be staged (then it is approved the
        old way). Nothing in the workspace changes. Raises a `TetherError` when the
        runner itself cannot stage (see the module docstring)."""
        try:
            return await self._stage(call)
        except TetherError as exc:
            _logged(call, exc)
            raise
        except OSError as exc:
            what = exc.strerror or type(exc).__name__
            raise _logged(
                call,
                TetherError(f"staging failed: {what}", code=ErrorCode.STAGING_UNAVAILABLE),
            ) from exc
        except SQLAlchemyError as exc:
            raise _logged(
                call, StoreError(f"the change set could not be stored: {type(exc).__name__}")
            ) from exc

    async def _stage(self, call: ExecuteTool) -> StagedEffect:
        refusal = self.executor.refusal_for(call)
        if refusal is not None:
            return _unstageable(call, f"{refusal[0]}: {refusal[1]}")
        tool = self.executor.registry.get(call.name)
        if tool is None or not tool.descriptor.stageable:
            return _unstageable(call, f"{call.name} does not stage its effect")
        try:
            with bound(call):
                staged = await self._staged(call)
        except ToolFailure as failure:
            if call.name in _FILE_TOOLS:  # the file tool itself would fail the same way
                return StagedEffect(
                    call_id=call.call_id,
                    stageable=False,
                    reason=failure.message,
                    error_code=failure.code,
                )
            return _unstageable(call, f"staging failed: {failure.code}: {failure.message}")
        if isinstance(staged, str):
            return _unstageable(call, staged)
        key = effect_key(call.run_id, call.call_id)
        await self.store.save(key, call.run_id, request_digest(call.name, call.args), staged)
        return StagedEffect(call_id=call.call_id, stageable=True, changes=staged.changes)

    async def _staged(self, call: ExecuteTool) -> Staged | str:
        workspace = self.workspaces.current()
        args = call.args
        if call.name == "file_write":
            return await self._write(workspace, args)
        if call.name == "file_edit":
            return await self._edit(workspace, args)
        if call.name == "shell" and self.shell is not None:
            return await self.shell.stage(
                workspace.place, str(args["command"]), args.get("timeout_s")
            )
        return f"{call.name} does not stage its effect"

    async def _write(self, workspace: Workspace, args: dict[str, Any]) -> Staged:
        parts = workspace.parts(args["path"])
        if not parts:
            raise ToolFailure("path_denied", "the workspace root itself cannot be written.")
        old = await self.workers.run(before_write, workspace.place, parts)
        data = str(args["content"]).encode()
        new = Node("file", old.mode if old is not None else 0o644, data)
        return _single("file_write", shown(parts), old, new)

    async def _edit(self, workspace: Workspace, args: dict[str, Any]) -> Staged:
        parts = workspace.parts(args["path"])
        change = Change.of(args, await self.book.seen(current_run_id.get(), shown(parts)))
        old, data = await self.workers.run(before_edit, workspace.place, parts, change)
        return _single("file_edit", shown(parts), old, Node("file", old.mode, data))

    async def apply(self, call: ExecuteTool) -> ToolResult:
        """Apply the approved change set `call.staged` (see the module docstring)."""
        assert call.staged is not None
        key = effect_key(call.run_id, call.call_id)
        found = await self.store.load(key, call.staged, request_digest(call.name, call.args))
        if found is None:
            return _failed(
                call,
                STAGED_UNKNOWN,
                "no change set with that digest was staged for this call; nothing was applied.",
            )
        steps = [
            Step(
                parts=tuple(e.path.split("/")),
                change=e.change,
                is_dir=e.type == "dir",
                base=e.base,
                mode=e.mode,
                data=found.contents.get(e.path),
            )
            for e in found.changes.entries
        ]
        with bound(call):
            try:
                workspace = self.workspaces.current()
                done = await self.workers.run(apply_steps, workspace.place, steps)
            except ToolFailure as failure:
                return _failed(call, failure.code, f"{failure.message} Nothing was applied.")
            if isinstance(done, Stale):
                return _failed(
                    call,
                    STALE_EFFECT,
                    f"{', '.join(done.paths[:5])} changed since the call was staged, so nothing "
                    "was applied; it is staged again for a new approval.",
                )
            for path, data in found.contents.items():
                await self.book.record(call.run_id, path, revision_of(data))
        return ToolResult(
            call_id=call.call_id,
            name=call.name,
            ok=True,
            content=_applied_text(found),
            applied=found.changes.digest,
        )


_FILE_TOOLS = frozenset({"file_write", "file_edit"})


def _single(tool: str, path: str, old: Node | None, new: Node) -> Staged:
    return compare(tool, {} if old is None else {path: old}, {path: new})


def _applied_text(found: Staged) -> str:
    changes = found.changes
    done = [f"{e.change} {e.path}" for e in changes.entries] or ["no change"]
    head = f"{changes.output}\n" if changes.output else ""
    return f"{head}applied the approved change set {changes.digest[:12]}: " + "; ".join(done)


def _unstageable(call: ExecuteTool, reason: str) -> StagedEffect:
    return StagedEffect(call_id=call.call_id, stageable=False, reason=reason)


def _logged(call: ExecuteTool, exc: TetherError) -> TetherError:
    log.warning(
        "run %s call %s (%s) could not be staged: %s (%s)",
        call.run_id,
        call.call_id,
        call.name,
        exc.message,
        exc.code,
    )
    return exc


__all__ = ["STAGED_UNKNOWN", "Stager"]
