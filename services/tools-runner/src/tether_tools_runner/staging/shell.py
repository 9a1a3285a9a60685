"""Staging a `shell` call: the command runs in the ordinary sandbox, but with a scratch
copy of the call's workspace as its only writable place; the change set is the
difference between the copy before and after.

bubblewrap here (0.8.0 as Debian builds it) has no `--overlay`, so the copy is a real
one, bounded by `max_bytes`: made by the runner by directory fd (never following a link)
into a folder of the sandbox user's under the runner's own 0711 staging folder, read back
the same way after the command, then removed. The command sees the copy at the
copy's path (its working folder), not at the workspace's. A command whose effect could
leave the workspace (the classifier finds a network, install or privileged part), a
weaker sandbox than bubblewrap, or a result the set cannot express (a symlink made or
changed, a special file, too much data) is not stageable: it is approved the old way."""

from __future__ import annotations

import asyncio
import dataclasses
import math
import os
import secrets
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tether_common.errors import ErrorCode, TetherError
from tether_common.safety import classify
from tether_tools_runner.sandbox import Attestation, SandboxLimits, SandboxUser, run_sandboxed
from tether_tools_runner.staging.changes import Staged, compare
from tether_tools_runner.staging.ops import Tree, copy_into, scan
from tether_tools_runner.tool import ToolFailure
from tether_tools_runner.tools.shell import DEFAULT_TIMEOUT_S, MAX_TIMEOUT_S
from tether_tools_runner.workspace import Failed, Place

# Effects these categories name may leave the workspace: never staged.
LEAVES_WORKSPACE = frozenset({"network", "install", "privileged"})
# The staged command's output shown on the card (the whole of it goes to the model).
MAX_SHOWN_OUTPUT = 4_000
_ROOT_MODE = 0o711


@dataclass(frozen=True, slots=True)
class ShellStaging:
    attestation: Attestation
    limits: SandboxLimits
    user: SandboxUser
    root: Path  # the runner's staging folder (0711, the runner's own)
    max_bytes: int

    def refusal(self, command: str) -> str | None:
        """Why `command` cannot be staged (None: it can)."""
        if self.attestation.level not in ("bwrap", "seccomp"):
            return f"the sandbox level {self.attestation.level!r} does not confine writes to the workspace"
        verdict = classify(command)
        if verdict.denied:
            return "the command is on the deny-list"
        leaving = sorted(LEAVES_WORKSPACE & verdict.categories)
        if leaving:
            return f"its effect may leave the workspace ({', '.join(leaving)})"
        return None

    async def stage(self, place: Place, command: str, timeout_s: float | None) -> Staged | str:
        """The change set of `command`, or why there is none."""
        refusal = self.refusal(command)
        if refusal is not None:
            return refusal
        scratch = self._make_scratch()
        try:
            owner = (self.user.uid, self.user.gid) if self.user.drops else None
            before = await _in_thread(copy_into, place, str(scratch), self.max_bytes, owner)
            if before.problems:
                return "the workspace cannot be copied: " + "; ".join(before.problems[:3])
            timeout = min(float(timeout_s or DEFAULT_TIMEOUT_S), MAX_TIMEOUT_S)
            limits = dataclasses.replace(self.limits, cpu_s=math.ceil(timeout) + 1)
            outcome = await run_sandboxed(
                command,
                scratch,
                attestation=self.attestation,
                timeout_s=timeout,
                limits=limits,
                sanitise_git=classify(command).allowed,  # as the shell tool runs it
            )
            if outcome.timed_out or outcome.exceeded is not None:
                return "the staged run did not finish (" + (outcome.exceeded or "time") + ")"
            after = await _in_thread(scan, str(scratch), self.max_bytes)
        finally:
            self._remove(scratch)
        problem = _inexpressible(before, after)
        if problem is not None:
            return problem
        text = f"exit code {outcome.exit_code}\n{outcome.output}".replace("\x00", "\ufffd")
        if len(text) > MAX_SHOWN_OUTPUT:
            # An apply answers the staged output, which the card (and so the stored set)
            # holds only up to this size: the model would get it cut. Run it the old way,
            # so its whole output reaches the model (offloaded if large).
            return f"its output is longer than a card shows ({len(text)} characters)"
        return compare("shell", before.nodes, after.nodes, output=text)

    def prepare(self) -> None:
        """The staging folder: made, the runner's own, 0711 (the sandbox user may pass
        through it to its scratch folder but neither list it nor rename anything in it).
        Raises `staging_unavailable` naming the folder when it cannot be that."""
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as exc:
            raise self._unusable(exc) from exc
        try:
            if os.fstat(fd).st_uid != os.geteuid():
                raise self._unusable("it has a foreign owner")
            os.fchmod(fd, _ROOT_MODE)
        except OSError as exc:
            raise self._unusable(exc) from exc
        finally:
            os.close(fd)

    def _make_scratch(self) -> Path:
        self.prepare()
        scratch = self.root / secrets.token_hex(12)
        try:
            scratch.mkdir(mode=0o700)
            if self.user.drops:
                os.chown(scratch, self.user.uid, self.user.gid, follow_symlinks=False)
        except OSError as exc:
            self._remove(scratch)
            raise self._unusable(exc) from exc
        return scratch

    def _unusable(self, why: OSError | str) -> TetherError:
        reason = why if isinstance(why, str) else why.strerror or type(why).__name__
        return TetherError(
            f"the staging folder {self.root} cannot be used: {reason} (set "
            "TETHER_RUNNER_STAGING_DIR to a folder the runner may create)",
            code=ErrorCode.STAGING_UNAVAILABLE,
        )

    @staticmethod
    def _remove(scratch: Path) -> None:
        # By directory fd, never following a symlink; a root runner passes any mode the
        # command left (a runner that is the sandbox user owns everything there).
        shutil.rmtree(scratch, ignore_errors=True)


async def _in_thread(fn: Callable[..., Tree | Failed], *args: Any) -> Tree:
    found = await asyncio.to_thread(fn, *args)
    if isinstance(found, Failed):
        raise ToolFailure(found.code, found.message)
    return found


def _inexpressible(before: Tree, after: Tree) -> str | None:
    """Why the difference cannot be applied as a change set (None: it can)."""
    if after.problems:
        return "the staged run left " + "; ".join(after.problems[:3])
    if before.links != after.links:
        changed = sorted(set(before.links.items()) ^ set(after.links.items()))
        return f"the staged run made or changed a symbolic link ({changed[0][0]})"
    return None


__all__ = ["LEAVES_WORKSPACE", "ShellStaging"]
