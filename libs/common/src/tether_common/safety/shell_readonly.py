"""The closed allow-list of read-only commands, each with the check that keeps it read-only.

A command is "allow" only if it is named here and its check finds nothing; a check
returns the category and reason that make the command ask instead. GNU tools accept any
unambiguous prefix of a long option (`--out` for `--output`), so long options are
compared by prefix.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence

from .shell_commands import names
from .shell_verdict import Category

Refusal = tuple[Category, str]
Check = Callable[[Sequence[str]], Refusal | None]


def long_option_hit(arg: str, options: frozenset[str]) -> bool:
    """True when `arg` is one of `options` or an abbreviation GNU getopt would accept."""
    name = arg.split("=", 1)[0]
    return len(name) > 2 and any(option.startswith(name) for option in options)


def short_option_hit(arg: str, letters: str) -> bool:
    """True when `arg` is a short-option cluster (`-rf`) containing one of `letters`."""
    return (
        len(arg) > 1
        and arg.startswith("-")
        and not arg.startswith("--")
        and any(letter in arg[1:] for letter in letters)
    )


def _first_hit(args: Sequence[str], long: frozenset[str], short: str) -> str | None:
    for arg in args:
        if arg == "--":
            return None
        if long_option_hit(arg, long) if arg.startswith("--") else short_option_hit(arg, short):
            return arg
    return None


def _refuse(category: Category, long: Sequence[str] = (), short: str = "") -> Check:
    """A check that refuses the given options and accepts everything else."""
    options = frozenset(long)

    def check(args: Sequence[str]) -> Refusal | None:
        hit = _first_hit(args, options, short)
        return None if hit is None else (category, f"option {hit} is not read-only")

    return check


def _no_check(_args: Sequence[str]) -> Refusal | None:
    return None


_FIND_EXEC = frozenset({"-exec", "-execdir", "-ok", "-okdir"})
_FIND_WRITE = frozenset({"-fprint", "-fprint0", "-fprintf", "-fls"})


def _check_find(args: Sequence[str]) -> Refusal | None:
    for arg in args:
        if arg in _FIND_EXEC:
            return "opaque", f"find {arg} runs another command for every file"
        if arg == "-delete":
            return "destructive", "find -delete removes every file it matches"
        if arg in _FIND_WRITE:
            return "write", f"find {arg} writes to a file"
    return None


_GIT_READ = frozenset(
    {"status", "log", "diff", "show", "blame", "ls-files", "rev-parse", "shortlog", "describe"}
)
_GIT_NETWORK = frozenset({"clone", "fetch", "pull", "push", "ls-remote", "submodule", "remote"})
_GIT_DESTRUCTIVE = frozenset({"clean", "reset", "rm", "gc", "prune", "filter-branch", "restore"})
_GIT_SAFE_GLOBAL = frozenset({"--no-pager", "-P", "--no-optional-locks", "--literal-pathspecs"})
_GIT_BAD = frozenset({"--output", "--ext-diff", "--open-files-in-pager"})


def _check_git(args: Sequence[str]) -> Refusal | None:
    index = 0
    while index < len(args) and args[index].startswith("-"):
        if args[index] not in _GIT_SAFE_GLOBAL:
            # -c, -C, --exec-path, --git-dir ... can point git at other code or config.
            return "opaque", f"git option {args[index]} can change what git runs"
        index += 1
    if index == len(args):
        return "unknown", "git without a subcommand"
    sub, rest = args[index], args[index + 1 :]
    if sub in _GIT_READ or sub == "grep":
        hit = _first_hit(rest, _GIT_BAD, "O" if sub == "grep" else "")
        return None if hit is None else ("write", f"git {sub} {hit} is not read-only")
    if sub in _GIT_NETWORK:
        return "network", f"git {sub} talks to a remote"
    if sub in _GIT_DESTRUCTIVE:
        return "destructive", f"git {sub} can discard work"
    return "write", f"git {sub} can change the repository"


# awk can run commands (system, pipes, getline from a command) and write files (>).
_AWK_UNSAFE = re.compile(r"system|getline|[|>]|@|\bclose\b|fflush")


def _check_awk(args: Sequence[str]) -> Refusal | None:
    index = 0
    while index < len(args) and args[index].startswith("-"):
        arg = args[index]
        if arg in ("-F", "-v"):
            index += 2
        elif arg.startswith(("-F", "-v")):
            index += 1
        elif arg == "--":
            index += 1
            break
        else:
            return "opaque", f"awk option {arg} loads or runs a program we cannot see"
    if index >= len(args):
        return "opaque", "awk without a program"
    if _AWK_UNSAFE.search(args[index]):
        return "opaque", "the awk program can run commands or write files"
    return None


_SED_ADDRESS = r"(?:\d+|\$|/(?:[^/\\]|\\.)*/)"
_SED_COMMAND = re.compile(
    rf"""\s*(?:{_SED_ADDRESS}(?:,{_SED_ADDRESS})?)?\s*!?\s*
    (?:[pdqQ=nNgGhHxlz]
      |s/(?:[^/\\]|\\.)*/(?:[^/\\]|\\.)*/[gpiImM0-9]*
      |y/[^/]*/[^/]*/)?\s*""",
    re.VERBOSE,
)
_SED_FLAGS = set("nErsuz")


def _sed_scripts(args: Sequence[str]) -> list[str] | Refusal:
    scripts: list[str] = []
    positional: list[str] = []
    index = 0
    while index < len(args):
        arg = args[index]
        index += 1
        if arg.startswith("--"):
            if long_option_hit(arg, frozenset({"--in-place", "--file"})):
                return "write", f"sed {arg} edits files or reads a script file"
            if arg.startswith("--expression="):
                scripts.append(arg.partition("=")[2])
        elif arg.startswith("-") and len(arg) > 1:
            if "e" in arg and index < len(args):
                scripts.append(args[index])
                index += 1
            if not set(arg[1:]) <= _SED_FLAGS | {"e"}:
                return "write", f"sed option {arg} is not read-only"
        else:
            positional.append(arg)
    if not scripts and positional:
        scripts.append(positional[0])
    return scripts


def _check_sed(args: Sequence[str]) -> Refusal | None:
    scripts = _sed_scripts(args)
    if isinstance(scripts, tuple):
        return scripts
    for script in scripts:
        # A `;` inside an s/// pattern splits wrongly; that only makes sed ask.
        for command in re.split(r"[;\n]", script):
            if not _SED_COMMAND.fullmatch(command):
                return "write", "the sed script may write files or run commands"
    return None


def _check_uniq(args: Sequence[str]) -> Refusal | None:
    positional = [arg for arg in args if not arg.startswith("-") or arg == "-"]
    if len(positional) > 1:
        return "write", "uniq writes its output to the second file named"
    return None


_DATE_VALUES = frozenset({"-d", "--date", "-r", "--reference", "-f", "--file"})


def _check_date(args: Sequence[str]) -> Refusal | None:
    refusal = _refuse("privileged", ["--set"], "s")(args)
    bare = [
        arg
        for index, arg in enumerate(args)
        if not arg.startswith(("-", "+")) and (index == 0 or args[index - 1] not in _DATE_VALUES)
    ]
    if refusal is None and bare:
        return "privileged", "date with a bare argument sets the clock"
    return refusal


_HOSTNAME_READ = frozenset({"-s", "-f", "-i", "-I", "-d", "-A", "-a", "--short", "--fqdn"})


def _check_hostname(args: Sequence[str]) -> Refusal | None:
    extra = [arg for arg in args if arg not in _HOSTNAME_READ]
    return ("privileged", "hostname with arguments can set the host name") if extra else None


_SET_READ = frozenset(
    {"-e", "-u", "-x", "+e", "+u", "+x", "-o", "+o", "pipefail", "-eu", "-ex", "-euo", "-eux"}
)


def _check_set(args: Sequence[str]) -> Refusal | None:
    # Bare `set` prints every variable; other options change how later words expand.
    if not args or any(arg not in _SET_READ for arg in args):
        return "opaque", "set with these options changes the shell"
    return None


READ_ONLY: Mapping[str, Check] = {
    **dict.fromkeys(
        names(
            "ls cat head tail wc grep egrep fgrep pwd echo whoami id groups uname "
            "arch nproc uptime free df du stat which type whereis basename dirname realpath "
            "readlink cut tr diff cmp nl tac rev fold column paste comm join expand unexpand "
            "md5sum sha1sum sha224sum sha256sum sha384sum sha512sum b2sum cksum base64 "
            "base32 od hexdump strings seq true false test [ sleep cd jq ps getconf locale "
            "tty cal exit"
        ),
        _no_check,
    ),
    "find": _check_find,
    "git": _check_git,
    # printf -v NAME assigns a variable, e.g. PATH, which changes what later commands run.
    "printf": _refuse("opaque", [], "v"),
    "rg": _refuse("opaque", ["--pre", "--pre-glob", "--hostname-bin"]),
    "sort": _refuse("write", ["--output", "--compress-program"], "o"),
    "tree": _refuse("write", ["--output"], "oR"),
    "file": _refuse("write", ["--compile"], "C"),
    "uniq": _check_uniq,
    "date": _check_date,
    "hostname": _check_hostname,
    "awk": _check_awk,
    "gawk": _check_awk,
    "mawk": _check_awk,
    "nawk": _check_awk,
    "sed": _check_sed,
    "set": _check_set,
}

# Commands where no option can write or run anything, so an argument that is a variable
# or a glob (and could therefore become any option) is still harmless.
OPAQUE_ARGS_SAFE = names(
    "ls cat head tail wc grep egrep fgrep echo pwd stat du df basename dirname "
    "realpath readlink cut tr diff cmp nl tac rev fold column paste comm join expand "
    "unexpand md5sum sha1sum sha256sum sha512sum base64 od hexdump strings seq true false "
    "test [ whoami id groups uname nproc which type cd sleep jq exit"
)
