"""The sandbox user: never root, and handing the workspace over to it gives it only what
is the workspace's own; never a host file reached through a link or a device."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tether_tools_runner.sandbox import hand_over, sandbox_user


def test_the_sandbox_user_is_never_root() -> None:
    for uid, gid in ((0, 64000), (64000, 0), (0, 0)):
        with pytest.raises(ValueError, match="cannot be root"):
            sandbox_user(uid, gid)
    assert sandbox_user(64001, 64002).uid == 64001


def test_hand_over_gives_the_workspace_and_nothing_else(tmp_path: Path) -> None:
    user = sandbox_user()
    host = tmp_path / "host-secret"  # stands for a host file on the same filesystem
    host.write_text("root only")
    host.chmod(0o600)
    root = tmp_path / "ws"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "file.txt").write_text("mine")
    os.symlink("/etc/passwd", root / "passwd-link")
    os.symlink(host, root / "sub" / "secret-link")
    os.link(host, root / "hard-link")
    os.mkfifo(root / "fifo")
    hand_over(root, user)
    mine = (root, root / "sub", root / "sub" / "file.txt")
    for path in mine:
        assert (path.lstat().st_uid, path.lstat().st_gid) == (user.uid, user.gid), path
    for link in (root / "passwd-link", root / "sub" / "secret-link"):
        assert link.lstat().st_uid == user.uid  # the link itself, never its target
    assert Path("/etc/passwd").stat().st_uid == 0
    assert host.stat().st_uid == 0  # reached through a hard link: left to root
    assert (root / "fifo").lstat().st_uid == 0
    assert root.stat().st_mode & 0o777 == 0o700
