"""Who the sandbox and the file tools act as on the host: never root.

When the runner is root, shell commands (bubblewrap started as this user, so the sandbox's
real uid is unprivileged) and the file tools' I/O drop to one dedicated unprivileged
uid/gid (`TETHER_RUNNER_SANDBOX_UID` / `_GID`, default 64000, no passwd entry needed). A
command or a file tool tricked out of the workspace then meets the host's permission
checks as a nobody: root-only files stay unreadable, system folders unwritable.
When the runner already runs unprivileged, it is its own sandbox user and drops nothing.
"""

from __future__ import annotations

import logging
import os
import stat
from dataclasses import dataclass
from pathlib import Path

DEFAULT_SANDBOX_ID = 64000
log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SandboxUser:
    uid: int
    gid: int

    @property
    def drops(self) -> bool:
        """Whether acting as this user means giving up the runner's own identity."""
        return (self.uid, self.gid) != (os.geteuid(), os.getegid())


def sandbox_user(uid: int = DEFAULT_SANDBOX_ID, gid: int = DEFAULT_SANDBOX_ID) -> SandboxUser:
    """The configured uid/gid when the runner is root, else the runner's own."""
    if os.geteuid() != 0:
        return SandboxUser(os.geteuid(), os.getegid())
    if uid == 0 or gid == 0:
        raise ValueError("the sandbox user cannot be root (uid or gid 0)")
    return SandboxUser(uid, gid)


def hand_over(root: Path, user: SandboxUser) -> None:
    """Make the workspace root (and what an earlier root-run runner left in it) the
    sandbox user's, so its commands and the file tools can write there. Symlinks are
    changed themselves, never followed. A file with several hard links is left as it
    is (its other name may be a host file, linked in by a sandbox that ran as root), and
    so is anything but a folder, a regular file or a symlink (a device node would hand
    the device over)."""
    if not user.drops or os.geteuid() != 0:
        return
    os.chown(root, user.uid, user.gid, follow_symlinks=False)
    os.chmod(root, 0o700)
    # By directory fd (fwalk checks each folder it enters is the one it listed): a folder
    # swapped for a symlink mid-walk must not lead a root chown outside the workspace.
    for folder, dirs, files, dir_fd in os.fwalk(root, follow_symlinks=False):
        for name in (*dirs, *files):
            info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            if info.st_uid != 0:
                continue
            if _safe_to_give(info):
                os.chown(name, user.uid, user.gid, dir_fd=dir_fd, follow_symlinks=False)
            else:
                path = os.path.join(folder, name)
                log.warning("left %s to root: a hard-linked file or a special file", path)


def _safe_to_give(info: os.stat_result) -> bool:
    if stat.S_ISDIR(info.st_mode) or stat.S_ISLNK(info.st_mode):
        return True
    return stat.S_ISREG(info.st_mode) and info.st_nlink == 1


__all__ = ["DEFAULT_SANDBOX_ID", "SandboxUser", "hand_over", "sandbox_user"]
