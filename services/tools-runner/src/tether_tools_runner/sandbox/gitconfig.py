"""The git configuration the sandbox lets git read.

Two layers. For every call: no system or global config (`GIT_CONFIG_NOSYSTEM`,
`GIT_CONFIG_GLOBAL=/dev/null`; trace2 targets and `safe.*` are read only from those), and
every key with a fixed name that names a program, or a file git reads or writes, pinned
to a harmless value through `GIT_CONFIG_COUNT`, the highest precedence (`PINS`).

Pins cannot reach a key under a name the config chooses (`diff.<driver>.textconv`,
`filter.<driver>.clean`, `includeIf.<condition>.path`) nor take back an `include.path`.
So for a command the classifier allows without asking, the repository's own config is
replaced, for that call only, by a sanitised copy bound read-only over `.git/config`
(`repo_view`): only the keys a reading command needs (`KEEP`), remote URLs without
credentials. The copy is made from what was read, and git reads only the copy, so a
change to `.git/config` after the check does not reach git. A layout the view cannot
cover (`.git` a file or a link, a linked worktree's `commondir`, no regular config)
leaves that command without a repository. Commands an operator approved see the
repository's config as it is, under the pins.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import stat
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

# Fixed-name keys that name a program or a file; values that run nothing and read
# nothing the command wrote.
PINS: dict[str, str] = {
    "core.pager": "cat",
    "core.fsmonitor": "false",
    "core.hooksPath": "/dev/null",
    "core.sshCommand": "false",
    "core.askPass": "false",
    "core.editor": "true",
    "core.gitProxy": "false",
    "core.alternateRefsCommand": "true",
    "core.attributesFile": "/dev/null",
    "core.excludesFile": "/dev/null",
    "sequence.editor": "true",
    # Set at all, it is run (an empty value fails every `git diff`): a plain `diff -u`
    # of the two files git hands over, which never fails the diff.
    "diff.external": 'f() { diff -u --label "a/$1" --label "b/$1" -- "$2" "$5"; true; }; f',
    "diff.tool": "",
    "diff.guitool": "",
    "diff.orderFile": "/dev/null",
    "merge.tool": "",
    "merge.guitool": "",
    "credential.helper": "",
    "gpg.program": "false",
    "gpg.openpgp.program": "false",
    "gpg.ssh.program": "false",
    "gpg.x509.program": "false",
    "gpg.ssh.defaultKeyCommand": "false",
    "gpg.ssh.allowedSignersFile": "/dev/null",
    "gpg.ssh.revocationFile": "/dev/null",
    "protocol.ext.allow": "never",
    # A bare repository the command made from plain files (HEAD, config, objects/) is
    # not found by discovery; only an explicit --git-dir opens one.
    "safe.bareRepository": "explicit",
    "uploadpack.packObjectsHook": "",
    "receive.procReceiveRefs": "",
    "blame.ignoreRevsFile": "",
    "commit.template": "/dev/null",
    "fsck.skipList": "/dev/null",
    "fetch.fsck.skipList": "/dev/null",
    "receive.fsck.skipList": "/dev/null",
    "mailmap.file": "",
    "mailmap.blob": "",
    "format.signatureFile": "/dev/null",
    "format.outputDirectory": ".",
    "init.templateDir": "",
    "http.proxy": "",
    "http.cookieFile": "",
    "http.saveCookies": "false",
    "web.browser": "false",
    "help.browser": "false",
    "instaweb.browser": "false",
    "instaweb.modulePath": "/dev/null",
    "man.viewer": "man",
    "sendemail.toCmd": "",
    "sendemail.ccCmd": "",
    "sendemail.smtpServer": "localhost",
    "sendemail.aliasesFile": "/dev/null",
    "gitcvs.logFile": "/dev/null",
    "fsmonitor.socketDir": "/dev/null",
    "submodule.recurse": "false",
}

# The keys of a repository's config a reading command needs (lower-case; `*` is one
# subsection name); everything else is left out of the sanitised copy.
KEEP = (
    "core.repositoryformatversion",
    "core.bare",
    "core.filemode",
    "core.logallrefupdates",
    "core.ignorecase",
    "core.precomposeunicode",
    "core.symlinks",
    "core.autocrlf",
    "core.eol",
    "core.checkstat",
    "core.trustctime",
    "core.quotepath",
    "core.abbrev",
    "core.sparsecheckout",
    "core.sparsecheckoutcone",
    "extensions.objectformat",
    "init.defaultbranch",
    "user.name",
    "user.email",
    "remote.*.url",
    "remote.*.pushurl",
    "remote.*.fetch",
    "branch.*.remote",
    "branch.*.merge",
)
_KEEP = re.compile("|".join(re.escape(key).replace(r"\*", r".+") for key in KEEP), re.DOTALL)
_USERINFO = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://)[^/@]*@")
_MAX_CONFIG = 1024 * 1024
_GIT = "/usr/bin/git" if os.path.exists("/usr/bin/git") else (shutil.which("git") or "git")
# Where git is sent when the repository's layout cannot be covered by the view.
NO_REPOSITORY = "/nonexistent/the-sandbox-gives-git-no-repository-here"


# Pins needed only where git reads the repository's config as it is: set at all,
# `diff.external` is run (through `sh -c`) by every `git diff`.
_FOR_RAW_CONFIG = frozenset({"diff.external"})


def pin_env(*, sanitised: bool = False) -> dict[str, str]:
    """The environment that gives git no system or global config and pins `PINS`
    (`sanitised`: git reads the sanitised copy, which has none of `_FOR_RAW_CONFIG`)."""
    pins = {k: v for k, v in PINS.items() if not (sanitised and k in _FOR_RAW_CONFIG)}
    env = {
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "GIT_ATTR_NOSYSTEM": "1",
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_PAGER": "cat",
        "GIT_CONFIG_COUNT": str(len(pins)),
    }
    for index, (key, value) in enumerate(pins.items()):
        env[f"GIT_CONFIG_KEY_{index}"] = key
        env[f"GIT_CONFIG_VALUE_{index}"] = value
    return env


def kept(key: str) -> bool:
    """True when the sanitised copy keeps `key` (any spelling of its case)."""
    section, _, rest = key.partition(".")
    if "." in rest:  # section.subsection.name: the subsection keeps its case
        subsection, _, name = rest.rpartition(".")
        key = f"{section.lower()}.{subsection}.{name.lower()}"
    else:
        key = key.lower()
    return _KEEP.fullmatch(key) is not None


@dataclass(slots=True)
class RepoView:
    """What one call's bubblewrap binds and sets so git reads only the sanitised copy."""

    bwrap_args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    folder: str | None = None  # the copy's private folder, removed by `close`

    def close(self) -> None:
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None


def repo_view(workspace: Path) -> RepoView:
    """The sanitised view of the workspace's repository for one call (none without a
    `.git`). Reads through descriptors that follow no link."""
    real = os.path.realpath(workspace)
    try:
        root = os.open(real, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return RepoView()
    try:
        try:
            info = os.lstat(".git", dir_fd=root)
        except FileNotFoundError:
            return RepoView()
        text = _read_config(root) if stat.S_ISDIR(info.st_mode) else None
    finally:
        os.close(root)
    if text is None:
        return RepoView(env={"GIT_DIR": NO_REPOSITORY})
    folder = tempfile.mkdtemp(prefix="tether-gitview-")
    os.chmod(folder, 0o755)  # bubblewrap runs as the sandbox user and must reach it
    copy = os.path.join(folder, "config")
    with open(copy, "w", encoding="utf-8") as out:
        out.write(sanitise(text))
    os.chmod(copy, 0o644)
    return RepoView(["--ro-bind", copy, f"{real}/.git/config"], folder=folder)


def _read_config(root: int) -> str | None:
    """`.git/config` as text, or None when the layout is one the view cannot cover."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        git = os.open(".git", flags | os.O_DIRECTORY, dir_fd=root)
    except OSError:
        return None
    try:
        with contextlib.suppress(FileNotFoundError):
            os.lstat("commondir", dir_fd=git)
            return None  # a linked worktree: its config lives in the common folder
        try:
            fd = os.open("config", flags | os.O_NONBLOCK, dir_fd=git)
        except OSError:
            return None
        with os.fdopen(fd, "rb") as config:
            info = os.fstat(config.fileno())
            if not stat.S_ISREG(info.st_mode) or info.st_size > _MAX_CONFIG:
                return None
            return config.read(_MAX_CONFIG + 1).decode("utf-8", "replace")
    finally:
        os.close(git)


def sanitise(text: str) -> str:
    """A config file holding only the kept keys of `text` (parsed by git itself, with
    includes off), remote URLs without user names or passwords."""
    done = subprocess.run(
        [_GIT, "config", "--file", "-", "--no-includes", "--null", "--list"],
        input=text.encode(),
        capture_output=True,
        env={"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null", "HOME": "/"},
        timeout=10,
        check=False,
    )
    lines: list[str] = []
    for entry in done.stdout.decode("utf-8", "replace").split("\0"):
        key, newline, value = entry.partition("\n")
        if not key or not kept(key):
            continue
        if not newline:
            value = "true"  # a bare `key` line means true
        if key.lower().endswith("url"):
            value = _USERINFO.sub(r"\1", value)
        lines.append(_entry(key, value))
    return "".join(lines)


def _entry(key: str, value: str) -> str:
    section, _, rest = key.partition(".")
    subsection, _, name = rest.rpartition(".")
    header = f"[{section}]" if not subsection else f'[{section} "{_quote(subsection)}"]'
    return f'{header}\n\t{name} = "{_quote(value)}"\n'


def _quote(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t")


__all__ = ["KEEP", "NO_REPOSITORY", "PINS", "RepoView", "kept", "pin_env", "repo_view", "sanitise"]
