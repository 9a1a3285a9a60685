"""Workspace confinement: escapes, protected names, malformed paths, real symlinks."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tether_common.errors import PathDenied
from tether_common.safety.paths import check_root, resolve
from tether_common.safety.protected import protected_component


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A workspace with files, secrets, and symlinks pointing in, out and in circles."""
    base = tmp_path_factory.mktemp("paths")
    root = base / "ws"
    outside = base / "outside"
    for folder in (root / "src", root / "docs", outside, base / "ws-evil"):
        folder.mkdir(parents=True)
    (root / "src" / "main.py").write_text("print(1)\n")
    (root / "docs" / "readme.md").write_text("hi\n")
    (root / ".env").write_text("SECRET=1\n")
    (outside / "secret.txt").write_text("secret\n")
    os.link(outside / "secret.txt", root / "hard.txt")
    links = {
        "link_out": outside,
        "link_file_out": outside / "secret.txt",
        "link_in": root / "src",
        "link_rel_in": Path("src"),
        "link_rel_out": Path("../outside"),
        "link_env": root / ".env",
        "link_root": Path("/"),
        "dangling_out": outside / "missing" / "x",
        "dangling_in": root / "newfile",
        "loop_a": root / "loop_b",
        "loop_b": root / "loop_a",
    }
    for name, target in links.items():
        (root / name).symlink_to(target)
    (root / "src" / "up").symlink_to(Path(".."))
    return root


ALLOWED = [
    ("src", "src"),
    ("src/", "src"),
    ("src/main.py", "src/main.py"),
    ("./src/./main.py", "src/main.py"),
    ("src//main.py", "src/main.py"),
    ("docs/../src/main.py", "src/main.py"),
    ("link_in/main.py", "src/main.py"),
    ("link_rel_in/main.py", "src/main.py"),
    ("src/up/docs/readme.md", "docs/readme.md"),
    ("new.txt", "new.txt"),
    ("deep/new/file.txt", "deep/new/file.txt"),
    ("dangling_in", "newfile"),
    (".gitignore", ".gitignore"),
    (".github/workflows/ci.yml", ".github/workflows/ci.yml"),
    ("env.txt", "env.txt"),
    (".environment", ".environment"),
    ("id_rsa_notes.md", "id_rsa_notes.md"),
    ("key.txt", "key.txt"),
    ("monkey", "monkey"),
    ("pem.txt", "pem.txt"),
    ("credentials.md", "credentials.md"),
    ("docker/config.json", "docker/config.json"),
    ("{root}/src/main.py", "src/main.py"),
    ("{root}/docs", "docs"),
    ("name with spaces.txt", "name with spaces.txt"),
    ("ünïcødé.txt", "ünïcødé.txt"),
    ("a" * 255, "a" * 255),
    ("src/..", "."),
    (".", "."),
    ("{root}", "."),
]

DENIED = [
    "../x",
    "../../etc/passwd",
    "..",
    "src/../../outside/secret.txt",
    "/etc/passwd",
    "/",
    "//",
    "/tmp",
    "{root}/../outside/secret.txt",
    "{root}-evil/x",
    "{root}/../ws-evil/x",
    "link_out",
    "link_out/secret.txt",
    "link_file_out",
    "link_rel_out/secret.txt",
    "link_root/etc/passwd",
    "link_root",
    "dangling_out",
    "src/up/../outside/secret.txt",
    "loop_a",
    "loop_a/x",
    "src/main.py/x",
    "~",
    "~/x",
    "~root/.ssh/id_rsa",
    "~/../../etc/passwd",
    ".env",
    ".env.local",
    ".env.production",
    ".ENV",
    ".Env.Local",
    ".envrc",
    "src/.env",
    "a/b/.env.production",
    ".git",
    ".git/config",
    ".git/hooks/pre-commit",
    "src/.git/HEAD",
    ".GIT/config",
    ".ssh/id_rsa",
    ".ssh",
    "keys/id_rsa",
    "keys/id_ed25519",
    "keys/id_ecdsa",
    "id_rsa.pub",
    "certs/server.pem",
    "certs/server.key",
    "CERT.PEM",
    "x.p12",
    "x.pfx",
    "store.jks",
    "vault.kdbx",
    "putty.ppk",
    "terraform.tfstate",
    "credentials.json",
    "credentials-prod.json",
    "client_secret_123.json",
    "service-account.json",
    ".aws/credentials",
    ".aws/config",
    ".gnupg/secring.gpg",
    ".kube/config",
    ".netrc",
    ".npmrc",
    ".pypirc",
    ".git-credentials",
    ".htpasswd",
    ".pgpass",
    ".docker/config.json",
    ".config/gcloud/credentials.db",
    "home/.ssh/authorized_keys",
    "link_env",
    "src/../.env",
    "./.git/../.env",
    "",
    " ",
    "\t",
    "a\x00b",
    "a\nb",
    "a\rb",
    "a\x1bb",
    "a\x7fb",
    "a" * 256,
    "d/" + "a" * 256,
    "é" * 128,
    "a/" * 2049,
    "\ud800",
    "x\udcff\ud800",
]


def _expand(path: str, root: Path) -> str:
    return path.replace("{root}", str(root))


@pytest.mark.parametrize(("path", "expected"), ALLOWED)
def test_paths_inside_the_workspace_resolve_for_reading(
    workspace: Path, path: str, expected: str
) -> None:
    resolved = resolve(workspace, _expand(path, workspace), write=False)
    assert resolved == (workspace / expected).resolve()
    assert protected_component(resolved.relative_to(workspace).parts) is None


@pytest.mark.parametrize(("path", "expected"), [case for case in ALLOWED if case[1] != "."])
def test_paths_inside_the_workspace_resolve_for_writing(
    workspace: Path, path: str, expected: str
) -> None:
    assert resolve(workspace, _expand(path, workspace), write=True) == workspace / expected


@pytest.mark.parametrize("write", [False, True])
@pytest.mark.parametrize("path", DENIED)
def test_escapes_protected_and_malformed_paths_are_denied(
    workspace: Path, path: str, write: bool
) -> None:
    with pytest.raises(PathDenied) as caught:
        resolve(workspace, _expand(path, workspace), write=write)
    assert caught.value.code == "path_denied"
    assert caught.value.message


@pytest.mark.parametrize("path", [".", "", "src/..", "{root}", "link_in/.."])
def test_the_root_itself_cannot_be_written(workspace: Path, path: str) -> None:
    with pytest.raises(PathDenied):
        resolve(workspace, _expand(path, workspace), write=True)


def test_a_hard_link_can_be_read_but_not_written(workspace: Path) -> None:
    assert resolve(workspace, "hard.txt", write=False) == workspace / "hard.txt"
    with pytest.raises(PathDenied, match="hard links"):
        resolve(workspace, "hard.txt", write=True)


@pytest.mark.parametrize(
    ("path", "fragment"),
    [
        ("../x", "outside the workspace"),
        (".env", "protected name .env"),
        ("~/x", "'~'"),
        ("", "empty"),
        ("a\x00b", "NUL"),
        ("a" * 256, "longer than 255 bytes"),
        ("a/" * 2049, "longer than 4096 bytes"),
        ("loop_a", "cannot be resolved"),
    ],
)
def test_refusals_say_why(workspace: Path, path: str, fragment: str) -> None:
    with pytest.raises(PathDenied, match=None) as caught:
        resolve(workspace, path, write=False)
    assert fragment in caught.value.message


def test_check_root_returns_the_real_path(workspace: Path, tmp_path: Path) -> None:
    alias = tmp_path / "alias"
    alias.symlink_to(workspace)
    assert check_root(alias) == workspace.resolve()
    assert check_root(str(workspace)) == workspace.resolve()
    assert resolve(alias, "src/main.py", write=False) == workspace / "src" / "main.py"


@pytest.mark.parametrize(
    "root", ["/", "//", "/etc", "/usr", "/proc", "", "rel\x00", "/nonexistent/x"]
)
def test_unusable_roots_are_refused(root: str) -> None:
    with pytest.raises(PathDenied):
        check_root(root)
    with pytest.raises(PathDenied):
        resolve(root, "x", write=False)


def test_a_file_is_not_a_root(workspace: Path) -> None:
    with pytest.raises(PathDenied, match="not an existing directory"):
        check_root(workspace / "src" / "main.py")


def test_a_root_inside_a_protected_folder_is_refused(tmp_path: Path) -> None:
    secret = tmp_path / ".ssh" / "work"
    secret.mkdir(parents=True)
    with pytest.raises(PathDenied, match="protected"):
        check_root(secret)


def test_a_symlink_to_root_is_not_a_root(tmp_path: Path) -> None:
    alias = tmp_path / "slash"
    alias.symlink_to("/")
    with pytest.raises(PathDenied, match="whole drive"):
        check_root(alias)


@settings(max_examples=300, deadline=None, database=None)
@given(path=st.text(max_size=80), write=st.booleans())
def test_resolve_only_ever_returns_a_path_inside_or_raises_path_denied(
    workspace: Path, path: str, write: bool
) -> None:
    try:
        resolved = resolve(workspace, path, write=write)
    except PathDenied:
        return
    assert resolved == workspace or resolved.is_relative_to(workspace)
    assert protected_component(resolved.relative_to(workspace).parts) is None


_SEGMENTS = st.sampled_from(
    ["..", ".", "src", "link_out", "link_in", "loop_a", ".env", "~", "", "/", "dangling_out"]
)


@settings(max_examples=300, deadline=None, database=None)
@given(parts=st.lists(_SEGMENTS, max_size=8), write=st.booleans())
def test_combinations_of_tricky_segments_never_escape(
    workspace: Path, parts: list[str], write: bool
) -> None:
    try:
        resolved = resolve(workspace, "/".join(parts), write=write)
    except PathDenied:
        return
    assert resolved == workspace or resolved.is_relative_to(workspace)
