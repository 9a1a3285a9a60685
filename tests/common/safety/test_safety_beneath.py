"""The race-free open beneath a root: hostile paths of every kind are refused by both
resolvers (the kernel's openat2 and the O_NOFOLLOW walk), nothing blocks on a special
file, and a folder swapped between steps never leads outside."""

from __future__ import annotations

import ctypes
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tether_common.errors import PathDenied
from tether_common.safety import beneath
from tether_common.safety.beneath import (
    Kind,
    open_beneath,
    open_child,
    open_parent,
    open_root,
    read_limited,
    relative_parts,
    replace_file,
)

SECRET = b"outside secret\n"
RENAME_EXCHANGE = 2


def exchange(a: Path, b: Path) -> None:
    """Swap two names atomically, as a sandboxed shell can (renameat2 RENAME_EXCHANGE)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.renameat2(-100, os.fsencode(a), -100, os.fsencode(b), RENAME_EXCHANGE) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))


@pytest.fixture(params=["openat2", "walk"])
def resolver(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each test runs with the kernel's resolver and with the fallback walk."""
    if request.param == "openat2":
        assert beneath.openat2_available(), "this kernel should have openat2 (Linux >= 5.6)"
    else:
        monkeypatch.setattr(beneath, "openat2_available", lambda: False)
    return str(request.param)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """root/a/b/c/file.txt and an outside folder holding a secret."""
    root = tmp_path / "ws"
    (root / "a" / "b" / "c").mkdir(parents=True)
    (root / "a" / "b" / "c" / "file.txt").write_text("inside\n")
    (root / "top.txt").write_text("top\n")
    outside = tmp_path / "outside"
    (outside / "b" / "c").mkdir(parents=True)
    (outside / "secret.txt").write_bytes(SECRET)
    (outside / "b" / "c" / "file.txt").write_bytes(SECRET)
    return root


@pytest.fixture
def root_fd(tree: Path) -> Iterator[int]:
    fd = open_root(tree)
    try:
        yield fd
    finally:
        os.close(fd)


def read(root_fd: int, path: str) -> bytes:
    fd = open_beneath(root_fd, relative_parts("/nowhere", path), kind="file")
    try:
        return read_limited(fd, 1 << 20)
    finally:
        os.close(fd)


def test_plain_paths_open(resolver: str, root_fd: int) -> None:
    assert read(root_fd, "a/b/c/file.txt") == b"inside\n"
    assert read(root_fd, "./a//b/./c/file.txt") == b"inside\n"
    assert read(root_fd, "a/x/../b/c/file.txt") == b"inside\n"  # lexical: `x` is never touched
    os.close(open_beneath(root_fd, ("a", "b"), kind="dir"))
    os.close(open_beneath(root_fd, (), kind="dir"))


def _links(tree: Path) -> dict[str, Path]:
    outside = tree.parent / "outside"
    return {
        "to-outside-dir": outside,
        "to-outside-file": outside / "secret.txt",
        "to-inside-dir": tree / "a",
        "to-inside-file": tree / "top.txt",
        "relative-up": Path("../../outside"),
        "dangling": outside / "missing",
        "to-root": Path("/"),
        "to-proc-self": Path("/proc/self/root"),
        "loop": Path("loop"),
        "to-env": tree / ".env",
    }


DEPTHS = [("a",), ("a", "b"), ("a", "b", "c"), ("a", "b", "c", "file.txt")]


@pytest.mark.parametrize("depth", DEPTHS, ids=lambda parts: "/".join(parts))
@pytest.mark.parametrize("kind", ["file", "dir"])
def test_a_symlink_at_any_depth_is_refused(
    resolver: str, tree: Path, root_fd: int, depth: tuple[str, ...], kind: Kind
) -> None:
    """Every link kind, replacing each component of the path in turn: never followed."""
    full = ("a", "b", "c", "file.txt")
    for label, target in _links(tree).items():
        place = tree.joinpath(*depth)
        moved = place.with_name(place.name + ".real")
        place.rename(moved)
        place.symlink_to(target)
        try:
            with pytest.raises(PathDenied) as caught:
                os.close(open_beneath(root_fd, full if kind == "file" else depth, kind=kind))
            assert "symbolic link" in caught.value.message, label
        finally:
            place.unlink()
            moved.rename(place)


@pytest.mark.parametrize(
    "path",
    [
        *("../x", "..", "a/../../x", "a/b/../../../outside/secret.txt", "/etc/passwd", "/"),
        *("~/x", "~root/.ssh", "{root}/../outside/secret.txt", "{root}-evil/x", "a/../.."),
        "./../.",
    ],
)
def test_lexical_escapes_are_refused(tree: Path, path: str) -> None:
    with pytest.raises(PathDenied):
        relative_parts(tree, path.replace("{root}", str(tree)))


@pytest.mark.parametrize(
    ("path", "parts"),
    [
        ("{root}", ()),
        ("{root}/a/b", ("a", "b")),
        ("{root}//a/./b/", ("a", "b")),
        ("a/b/..", ("a",)),
        ("a/../a/b", ("a", "b")),
        (".", ()),
    ],
)
def test_lexical_paths_inside(tree: Path, path: str, parts: tuple[str, ...]) -> None:
    assert relative_parts(tree, path.replace("{root}", str(tree))) == parts


@pytest.mark.parametrize(
    "parts",
    [
        *[(".env",), ("a", ".git", "config"), ("keys", "id_rsa"), ("x.pem",), (".ssh",)],
        *[("..",), ("a", ".."), (".",), ("",), ("a/b",), ("a\x00",)],
    ],
)
def test_protected_and_malformed_names_are_refused_by_the_opener_itself(
    resolver: str, root_fd: int, parts: tuple[str, ...]
) -> None:
    kinds: tuple[Kind, ...] = ("file", "dir")
    for kind in kinds:
        with pytest.raises(PathDenied):
            os.close(open_beneath(root_fd, parts, kind=kind))


def test_missing_and_wrong_kinds(resolver: str, root_fd: int) -> None:
    with pytest.raises(FileNotFoundError):
        open_beneath(root_fd, ("a", "nope"), kind="file")
    with pytest.raises(NotADirectoryError):
        open_beneath(root_fd, ("top.txt",), kind="dir")
    with pytest.raises(NotADirectoryError):
        open_beneath(root_fd, ("top.txt", "x"), kind="file")
    with pytest.raises(IsADirectoryError):
        open_beneath(root_fd, ("a",), kind="file")


def test_special_files_are_refused_without_blocking(
    resolver: str, tree: Path, root_fd: int
) -> None:
    os.mkfifo(tree / "fifo")  # a reader would wait forever for a writer
    os.mknod(tree / "null", stat.S_IFCHR | 0o666, os.makedev(1, 3))
    for name in ("fifo", "null"):
        with pytest.raises(PathDenied) as caught:
            open_beneath(root_fd, (name,), kind="file")
        assert caught.value.code == "not_a_file"
        with pytest.raises(PathDenied):
            replace_file(root_fd, name, b"x")
    assert stat.S_ISFIFO(os.lstat(tree / "fifo").st_mode)


def test_hard_links_are_read_but_never_written(resolver: str, tree: Path, root_fd: int) -> None:
    os.link(tree.parent / "outside" / "secret.txt", tree / "hard.txt")
    assert read(root_fd, "hard.txt") == SECRET  # what the sandbox user could read anyway
    with pytest.raises(PathDenied, match="hard links"):
        replace_file(root_fd, "hard.txt", b"overwritten")
    assert (tree.parent / "outside" / "secret.txt").read_bytes() == SECRET


def test_replace_keeps_mode_and_refuses_links_and_folders(tree: Path, root_fd: int) -> None:
    script = tree / "run.sh"
    script.write_text("old")
    script.chmod(0o4755)
    assert replace_file(root_fd, "run.sh", b"new") is True
    assert script.read_bytes() == b"new"
    assert stat.S_IMODE(script.stat().st_mode) == 0o755  # set-uid dropped
    assert replace_file(root_fd, "fresh.txt", b"x") is False
    (tree / "link").symlink_to(tree.parent / "outside" / "secret.txt")
    with pytest.raises(PathDenied, match="symbolic link"):
        replace_file(root_fd, "link", b"x")
    with pytest.raises(IsADirectoryError):
        replace_file(root_fd, "a", b"x")
    assert not [p for p in os.listdir(tree) if ".tether-" in p]  # no temporary left behind
    assert (tree.parent / "outside" / "secret.txt").read_bytes() == SECRET


def test_open_parent_makes_folders_one_at_a_time_and_never_through_a_link(
    resolver: str, tree: Path, root_fd: int
) -> None:
    fd, name = open_parent(root_fd, ("new", "deep", "f.txt"), create=True)
    try:
        assert name == "f.txt"
        replace_file(fd, name, b"made")
    finally:
        os.close(fd)
    assert (tree / "new" / "deep" / "f.txt").read_bytes() == b"made"
    (tree / "out").symlink_to(tree.parent / "outside")
    for create in (True, False):
        with pytest.raises(PathDenied):
            open_parent(root_fd, ("out", "b", "new.txt"), create=create)
    with pytest.raises(PathDenied, match="root itself"):
        open_parent(root_fd, (), create=True)
    assert sorted(os.listdir(tree.parent / "outside")) == ["b", "secret.txt"]


def test_a_folder_swapped_between_walk_steps_keeps_the_walk_inside(
    tree: Path, root_fd: int
) -> None:
    """The walk holds the fd of each folder it entered: swapping the name afterwards (with
    a symlink to outside) changes what the name means, not what the fd is."""
    outside = tree.parent / "outside"
    a_fd = open_child(root_fd, "a", kind="dir")
    link = tree / "swap"
    link.symlink_to(outside)
    try:
        exchange(tree / "a", link)  # `a` is now the link to outside
        b_fd = open_child(a_fd, "b", kind="dir")
        file_fd = open_child(b_fd, "c", kind="dir")
        inner = open_child(file_fd, "file.txt", kind="file")
        assert read_limited(inner, 100) == b"inside\n"
        for fd in (b_fd, file_fd, inner):
            os.close(fd)
        with pytest.raises(PathDenied):  # a fresh open now meets the link
            open_beneath(root_fd, ("a", "b", "c", "file.txt"), kind="file")
        # A write through the parent fd opened before the swap lands inside, by fd.
        dir_fd, name = open_parent(root_fd, ("swap", "b", "new.txt"), create=False)
        exchange(tree / "a", link)  # and back again: `swap` is the link once more
        replace_file(dir_fd, name, b"written")
        os.close(dir_fd)
    finally:
        os.close(a_fd)
    assert (tree / "a" / "b" / "new.txt").read_bytes() == b"written"
    assert not (outside / "b" / "new.txt").exists()


def test_a_root_that_is_a_system_folder_is_refused() -> None:
    for root in ("/", "/etc", "/proc"):
        with pytest.raises(PathDenied):
            open_root(root)


def test_read_limited_stops_one_past_the_limit(tree: Path, root_fd: int) -> None:
    (tree / "big").write_bytes(b"x" * 5000)
    fd = open_beneath(root_fd, ("big",), kind="file")
    try:
        assert len(read_limited(fd, 100)) == 101
    finally:
        os.close(fd)


SWAPPER = r"""
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
a, b = (os.fsencode(p) for p in sys.argv[1:3])
print("ready", flush=True)
while True:
    libc.renameat2(-100, a, -100, b, 2)
"""


def test_thousands_of_opens_and_writes_under_a_swap_loop_stay_inside(
    resolver: str, tree: Path, root_fd: int
) -> None:
    """Both resolvers, against a process exchanging `a` with a link to outside."""
    outside = tree.parent / "outside"
    before = {p: p.read_bytes() for p in outside.rglob("*") if p.is_file()}
    (tree / "swap").symlink_to(outside)
    inside = refused = 0
    with subprocess.Popen(
        [sys.executable, "-c", SWAPPER, str(tree / "a"), str(tree / "swap")],
        stdout=subprocess.PIPE,
    ) as swapper:
        try:
            assert swapper.stdout is not None
            assert swapper.stdout.readline() == b"ready\n"
            for attempt in range(3000):
                if _attempt(root_fd, attempt):
                    inside += 1
                else:
                    refused += 1
        finally:
            swapper.kill()
    assert inside
    assert refused  # the loop really raced the opens
    assert {p: p.read_bytes() for p in outside.rglob("*") if p.is_file()} == before


def _attempt(root_fd: int, attempt: int) -> bool:
    """One read and one write through `a`; False when refused (the link was met)."""
    try:
        data = read(root_fd, "a/b/c/file.txt")
        dir_fd, name = open_parent(root_fd, ("a", "b", f"w{attempt}"), create=True)
    except (PathDenied, OSError):
        return False
    assert data == b"inside\n"
    try:
        replace_file(dir_fd, name, b"w")
    finally:
        os.close(dir_fd)
    return True


def test_the_longest_names_can_be_replaced(tree: Path, root_fd: int) -> None:
    for name in ("a" * 255, "é" * 127):  # 255 and 254 bytes
        assert replace_file(root_fd, name, b"1") is False
        assert replace_file(root_fd, name, b"2") is True
        assert (tree / name).read_bytes() == b"2"


@pytest.mark.parametrize("name", ["..", ".", "", "a/b", "../outside", "/etc", ".env", "x.pem"])
def test_open_child_takes_one_plain_name_only(root_fd: int, name: str) -> None:
    kinds: tuple[Kind, ...] = ("file", "dir")
    for kind in kinds:
        with pytest.raises(PathDenied):
            os.close(open_child(root_fd, name, kind=kind))
