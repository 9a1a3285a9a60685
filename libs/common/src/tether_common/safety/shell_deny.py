"""The destructive deny-list: rules that refuse one command outright, whatever a grant or
an operator says, and the targets (whole trees, raw disks, system files) that make a
delete or a write fatal.

Each rule takes the command's arguments as the command would receive them (quotes
removed) and returns the reason to refuse, or None.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable, Sequence
from typing import Literal

from .shell_commands import names
from .shell_options import long_option_hit, short_option_hit

_TOP_LEVEL = names(
    "bin boot dev etc home lib lib32 lib64 libx32 media mnt opt proc root run sbin snap srv "
    "sys usr var Users System Library Applications private Volumes"
)
_SECOND_LEVEL = names(
    "/usr/bin /usr/sbin /usr/lib /usr/lib64 /usr/local /usr/share /usr/include /usr/libexec "
    "/var/lib /var/log /var/spool /var/mail /etc/ssh /etc/ssl"
)
_HOME = re.compile(r"~[\w.-]*|\$HOME|\$\{HOME\}")
_GLOB_CHARS = re.compile(r"[*?\[]")
_DRIVE = re.compile(r"[A-Za-z]:[/\\]*\*?")
_SYSTEM_DIRS = ("/etc", "/boot", "/bin", "/sbin", "/usr/bin", "/usr/sbin", "/usr/lib", "/lib")
_SYSTEM_DIRS_ALSO = ("/usr/lib64", "/lib64", "/proc/sys", "/sys")
_RAW_DISK = re.compile(
    r"/dev/(?:sd[a-z]|hd[a-z]|vd[a-z]|xvd[a-z]|nvme\d|mmcblk\d|r?disk\d|md\d|dm-\d|mapper/"
    r"|disk/|loop\d|sr\d|mem$|kmem$|port$)"
)
# Paths that name an open descriptor of the writing process: bash (and the kernel)
# open them anew, so `3<app.py >/dev/fd/3` opens app.py again, this time for writing.
_DESCRIPTOR = re.compile(r"/(?:dev/fd|proc/(?:self|thread-self)/fd)/(\d+)")
_STANDARD = {"/dev/stdin": 0, "/dev/stdout": 1, "/dev/stderr": 2}


def _normalise(path: str) -> str:
    collapsed = posixpath.normpath(re.sub(r"/+", "/", path)) if path.startswith("/") else path
    while collapsed.endswith(("/*", "/.", "/.*")):
        collapsed = posixpath.normpath(collapsed.rsplit("/", 1)[0] or "/")
    return collapsed


def critical_tree(path: str) -> bool:
    """True for `/`, a top-level system directory, a home directory, or a drive, in any
    spelling (`//`, `/./`, `/usr/..`, `/*`, `~/`, `$HOME/*`, `C:\\`)."""
    if _DRIVE.fullmatch(path):
        return True
    home = _HOME.match(path)
    if home:
        return _normalise("/" + path[home.end() :]) == "/"
    if not path.startswith("/"):
        return False
    normal = _normalise(path)
    if normal == "/":
        return True
    parts = normal.strip("/").split("/")
    if len(parts) == 1:
        # `/e*` or `/[e]tc` can expand to /etc; a glob in the first component is fatal.
        return parts[0] in _TOP_LEVEL or _GLOB_CHARS.search(parts[0]) is not None
    return normal in _SECOND_LEVEL


def system_file(path: str) -> bool:
    """True for a path inside the directories the operating system runs from."""
    if not path.startswith("/"):
        return False
    normal = _normalise(path)
    return normal == "/proc/sysrq-trigger" or any(
        normal == top or normal.startswith(top + "/") for top in _SYSTEM_DIRS + _SYSTEM_DIRS_ALSO
    )


def raw_disk(path: str) -> bool:
    return _RAW_DISK.match(_normalise(path)) is not None


WriteTarget = Literal["harmless", "descriptor", "network", "disk", "system", "file"]


def descriptor_of(path: str) -> int | None:
    """The descriptor number a path reopens (`/dev/stdout`, `/dev/fd/3`,
    `/proc/self/fd/3`), or None when it names no descriptor of the process itself."""
    normal = _normalise(path)
    if normal in _STANDARD:
        return _STANDARD[normal]
    found = _DESCRIPTOR.fullmatch(normal)
    return None if found is None else int(found.group(1))


def write_target(path: str) -> WriteTarget:
    """What writing to `path` means, for redirections, `tee`, `dd of=` and copies.

    Only `/dev/null` is harmless by itself. A descriptor path is as harmless as the file
    behind that descriptor, which only the caller can tell; every other device (a
    terminal, `/dev/zero`, another process's `/proc/<pid>/fd/N`) counts as a file."""
    normal = _normalise(path)
    if normal == "/dev/null":
        return "harmless"
    if descriptor_of(normal) is not None:
        return "descriptor"
    if normal.startswith(("/dev/tcp/", "/dev/udp/")):
        return "network"
    if raw_disk(normal):
        return "disk"
    if system_file(normal):
        return "system"
    return "file"


def _fatal_write(path: str) -> str | None:
    target = write_target(path)
    if target == "disk":
        return f"writes to the raw disk {path}"
    if target == "system":
        return f"overwrites the system file {path}"
    return None


def _positional(args: Sequence[str]) -> list[str]:
    if "--" in args:
        cut = args.index("--")
        return [a for a in args[:cut] if not a.startswith("-")] + list(args[cut + 1 :])
    return [arg for arg in args if not arg.startswith("-") or arg == "-"]


def _recursive(args: Sequence[str]) -> bool:
    return any(
        short_option_hit(arg, "rR") or long_option_hit(arg, frozenset({"--recursive"}))
        for arg in args
        if arg.startswith("-")
    )


_HERE = frozenset({"*", ".", "./", "./*", ".*", "./.*"})


def _rm(args: Sequence[str], cwd_critical: bool) -> str | None:
    if any(long_option_hit(arg, frozenset({"--no-preserve-root"})) for arg in args):
        return "rm --no-preserve-root exists only to delete the whole system"
    targets = _positional(args)
    if _recursive(args):
        for target in targets:
            if critical_tree(target) or (cwd_critical and target in _HERE):
                return f"rm -r of {target} would destroy the system or a home directory"
    for target in targets:
        if system_file(target) or raw_disk(target):
            return f"deletes the system file {target}"
    return None


def _dd(args: Sequence[str], _cwd: bool) -> str | None:
    for arg in args:
        if arg.startswith("of="):
            return _fatal_write(arg[3:])
    return None


def _always(reason: str) -> Callable[[Sequence[str], bool], str | None]:
    return lambda _args, _cwd: reason


def _init(args: Sequence[str], _cwd: bool) -> str | None:
    if args and args[0] in {"0", "6"}:
        return f"init {args[0]} halts or reboots the machine"
    return None


_POWER = re.compile(r"(?:poweroff|reboot|halt|kexec|soft-reboot|emergency|rescue)(?:\.target)?")


def _systemctl(args: Sequence[str], _cwd: bool) -> str | None:
    hit = next((arg for arg in args if _POWER.fullmatch(arg)), None)
    return None if hit is None else f"{hit} takes the machine down"


def _kill(args: Sequence[str], _cwd: bool) -> str | None:
    pids: list[str] = []
    signal_given = False
    index = 0
    while index < len(args):
        arg = args[index]
        index += 1
        if arg == "--":
            pids.extend(args[index:])
            break
        if arg in {"-s", "-n", "--signal"}:
            index += 1
            signal_given = True
        elif arg.startswith("-") and not signal_given and not pids:
            signal_given = True
        else:
            pids.append(arg)
    if "-1" in pids:
        return "kill -1 signals every process the user can reach"
    if "1" in pids:
        return "kill 1 signals init"
    return None


_MATCH_ALL = re.compile(r"\^?(?:\.[*+]?)?\$?")
_PKILL_VALUES = frozenset({"-u", "-U", "-g", "-G", "-P", "-s", "-t", "-F", "-o", "-y"})


def _pkill(args: Sequence[str], _cwd: bool) -> str | None:
    patterns = [
        arg
        for index, arg in enumerate(args)
        if not arg.startswith("-") and (index == 0 or args[index - 1] not in _PKILL_VALUES)
    ]
    if any(_MATCH_ALL.fullmatch(pattern) for pattern in patterns):
        return "the pattern matches every process"
    return None


def _chmod(args: Sequence[str], _cwd: bool) -> str | None:
    # The first operand is the mode or owner, unless --reference names it instead.
    with_reference = any(arg.startswith("--reference") for arg in args)
    targets = _positional(args)[0 if with_reference else 1 :]
    for target in targets:
        if critical_tree(target) and (_recursive(args) or _normalise(target) == "/"):
            return f"changes ownership or permissions of all of {target}"
    return None


def _mv(args: Sequence[str], _cwd: bool) -> str | None:
    targets = _positional(args)
    for source in targets[:-1]:
        if critical_tree(source) or system_file(source):
            return f"moves {source} away, which breaks the system"
    return _fatal_write(targets[-1]) if targets else None


def _last_target(args: Sequence[str], _cwd: bool) -> str | None:
    targets = _positional(args)
    return _fatal_write(targets[-1]) if len(targets) > 1 else None


def _every_target(args: Sequence[str], _cwd: bool) -> str | None:
    return next(filter(None, map(_fatal_write, _positional(args))), None)


def _shred(args: Sequence[str], cwd: bool) -> str | None:
    for target in _positional(args):
        if critical_tree(target):
            return f"shreds {target}"
    return _every_target(args, cwd)


def _sed(args: Sequence[str], cwd: bool) -> str | None:
    in_place = any(
        short_option_hit(arg, "i") or long_option_hit(arg, frozenset({"--in-place"}))
        for arg in args
    )
    return _every_target(args, cwd) if in_place else None


def _find(args: Sequence[str], _cwd: bool) -> str | None:
    starts = [arg for arg in args if not arg.startswith(("-", "(", "!", ")"))][:1]
    deletes = "-delete" in args or any(
        arg in {"-exec", "-execdir"} and index + 1 < len(args) and args[index + 1] == "rm"
        for index, arg in enumerate(args)
    )
    if deletes and starts and critical_tree(starts[0]):
        return f"find {starts[0]} deletes everything below it"
    return None


Rule = Callable[[Sequence[str], bool], str | None]

RULES: dict[str, Rule] = {
    "rm": _rm,
    "dd": _dd,
    "shutdown": _always("shuts the machine down"),
    "reboot": _always("reboots the machine"),
    "halt": _always("halts the machine"),
    "poweroff": _always("powers the machine off"),
    "kexec": _always("replaces the running kernel"),
    "killall5": _always("killall5 signals every process"),
    "wipefs": _always("erases file system signatures"),
    "blkdiscard": _always("discards every block on a device"),
    "mkswap": _always("formats a device"),
    "mke2fs": _always("formats a device"),
    "init": _init,
    "telinit": _init,
    "systemctl": _systemctl,
    "loginctl": _systemctl,
    "kill": _kill,
    "pkill": _pkill,
    "killall": _pkill,
    "chmod": _chmod,
    "chown": _chmod,
    "chgrp": _chmod,
    "mv": _mv,
    "cp": _last_target,
    "install": _last_target,
    "rsync": _last_target,
    "ln": _last_target,
    "tee": _every_target,
    "truncate": _every_target,
    "shred": _shred,
    "sed": _sed,
    "find": _find,
}


def deny_reason(name: str, args: Sequence[str], *, cwd_critical: bool = False) -> str | None:
    """Why `name args...` is on the deny-list, or None. `name` is a bare program name."""
    if name.startswith(("mkfs", "mkdosfs", "mkntfs", "newfs")):
        return f"{name} formats a file system"
    rule = RULES.get(name)
    return None if rule is None else rule(args, cwd_critical)
