"""Which folder a call works in, and making that folder safely.

`shared`: every call works in the workspace root (one user's project). `per_tree`: each run
tree (a run and its sub-agents, named by the root run's id, which the brain sends as the
call's `workspace`) works in its own folder directly under the root, on storage every
replica mounts, so any replica serves any call of the tree.

Containment of `per_tree`: the root stays the runner's own with mode 0711 (the sandbox user
may pass through it but neither list it nor create, rename or remove anything in it), so no
call can swap a folder there for a symlink or find another tree's folder. Each folder is
made by directory fd (`mkdir` beneath the root's fd, opened `O_NOFOLLOW`, checked with
`fstat`, then `fchown`/`fchmod` on that fd: 0700, the sandbox user's), and the file tools
reach it beneath the root's fd again (`workspace.opened`), never by path. A shell command
is given only its folder (bubblewrap binds that folder alone).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import stat
from pathlib import Path

from tether_common.messages.tools import WORKSPACE_PATTERN, Reach
from tether_tools_runner.context import current_run_id, current_workspace
from tether_tools_runner.sandbox import SandboxUser, hand_over
from tether_tools_runner.settings import WorkspaceLayout
from tether_tools_runner.tool import ToolFailure
from tether_tools_runner.workspace import Place, Workspace

log = logging.getLogger(__name__)
# How far a file tool reaches (DESIGN §4): the workspace is one user's project folder
# (`shared`) or one run tree's own (`per_tree`), confined by the path guard here and in
# the brain's gates, so `user`, never `instance`: reading it needs no grant (the default
# mode `allow-reads` runs such reads without asking); a write needs one, or an operator.
WORKSPACE_REACH: Reach = "user"
_NAME = re.compile(WORKSPACE_PATTERN)
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
ROOT_MODE = 0o711
FOLDER_MODE = 0o700


class Workspaces:
    """The workspace of the call being executed (read from the call's context)."""

    def __init__(self, root: Path, layout: WorkspaceLayout, user: SandboxUser) -> None:
        self.root = root
        self.layout = layout
        self.user = user

    def prepare(self) -> None:
        """At start: the root made and given its owner (see the module docstring)."""
        self.root.mkdir(parents=True, exist_ok=True)
        if self.layout == "shared":
            hand_over(self.root, self.user)  # the sandbox user writes there, never root
            return
        fd = os.open(self.root, _DIR_FLAGS)
        try:
            if os.geteuid() == 0 and os.fstat(fd).st_uid != 0:
                os.fchown(fd, 0, 0)  # a root handed over to the sandbox user earlier
            os.fchmod(fd, ROOT_MODE)
        except PermissionError:
            # Not ours to change (a volume mounted for our group, as Kubernetes' fsGroup
            # does): the folders made in it are still 0700 and ours.
            log.warning("the workspace root %s keeps its mode: not this user's", self.root)
        finally:
            os.close(fd)

    def current(self) -> Workspace:
        if self.layout == "shared":
            return Workspace(self.root)
        name = current_workspace.get() or current_run_id.get()
        if not _NAME.fullmatch(name) or name in (".", ".."):
            raise ToolFailure("workspace_invalid", f"no workspace folder can be named {name!r}.")
        make_folder(self.root, name, self.user)
        return Workspace(self.root / name, Place(str(self.root), name))


def make_folder(root: Path, name: str, user: SandboxUser) -> None:
    """`root/name` exists, is a real folder (never a symlink), mode 0700 and the sandbox
    user's; made now if missing. Two replicas making it at once both succeed."""
    top = os.open(root, _DIR_FLAGS)
    try:
        with contextlib.suppress(FileExistsError):
            os.mkdir(name, FOLDER_MODE, dir_fd=top)
        try:
            fd = os.open(name, _DIR_FLAGS, dir_fd=top)
        except OSError as exc:
            raise ToolFailure(
                "workspace_unavailable", f"the workspace folder is not usable ({exc.strerror})."
            ) from None
    finally:
        os.close(top)
    try:
        _settle(fd, user)
    finally:
        os.close(fd)


def _settle(fd: int, user: SandboxUser) -> None:
    info = os.fstat(fd)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid not in (user.uid, os.geteuid()):
        raise ToolFailure("workspace_unavailable", "the workspace folder has a foreign owner.")
    if info.st_uid != user.uid:  # made just now by a root runner: the sandbox user's
        os.fchown(fd, user.uid, user.gid)
    if stat.S_IMODE(info.st_mode) != FOLDER_MODE:
        os.fchmod(fd, FOLDER_MODE)


__all__ = ["FOLDER_MODE", "ROOT_MODE", "Workspaces", "make_folder"]
