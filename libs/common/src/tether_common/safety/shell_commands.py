"""What every other known command is: its category, whether it runs code we cannot see
(interpreters, `eval`), and how a wrapper (`sudo`, `timeout`, `xargs` ...) hands on to
the command it runs.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from .shell_verdict import Category


def names(text: str) -> frozenset[str]:
    """A set of command names written as one space-separated string, for readable tables."""
    return frozenset(text.split())


_CATEGORIES: tuple[tuple[Category, str, frozenset[str]], ...] = (
    (
        "destructive",
        "deletes or overwrites data",
        names("rm rmdir shred unlink truncate dd wipefs srm fallocate"),
    ),
    (
        "privileged",
        "needs or changes system privileges",
        names(
            "chown chgrp chmod chattr setfacl setcap mount umount systemctl service "
            "launchctl kill pkill killall useradd userdel usermod groupadd groupdel passwd "
            "chpasswd visudo crontab at iptables ip6tables nft ufw firewall-cmd modprobe "
            "insmod rmmod sysctl swapon swapoff hwclock timedatectl hostnamectl ifconfig "
            "route ip sudoedit"
        ),
    ),
    (
        "network",
        "talks to the network",
        names(
            "curl wget fetch aria2c http https xh lynx links w3m elinks ssh scp sftp rsync "
            "nc ncat netcat socat telnet ftp tftp ping ping6 dig nslookup host traceroute "
            "tracepath mtr nmap whois openssl gh"
        ),
    ),
    (
        "install",
        "installs or builds packages",
        names(
            "pipx uv poetry pdm conda mamba micromamba npm npx pnpm yarn apt apt-get "
            "aptitude dpkg yum dnf rpm apk pacman zypper emerge brew port snap flatpak "
            "nix-env nix gem bundle cargo go rustup composer cpan cpanm"
        ),
    ),
    (
        "write",
        "creates or changes files",
        names(
            "cp mv touch mkdir ln tee install patch tar zip unzip gzip gunzip bzip2 bunzip2 "
            "xz unxz zstd 7z split csplit vi vim nano emacs ed ex mktemp xxd yq"
        ),
    ),
    (
        "opaque",
        "runs code or changes the shell in ways we cannot see",
        names(
            "eval exec source . trap alias unalias enable coproc let declare typeset export "
            "readonly local shopt unset make cmake ninja read mapfile readarray hash"
        ),
    ),
)

CATEGORY_OF: dict[str, tuple[Category, str]] = {
    name: (category, reason) for category, reason, names in _CATEGORIES for name in names
}

# Commands that fetch data from the network, and commands that run the code they are fed.
FETCHERS = names(
    "curl wget fetch aria2c http https xh lynx links w3m elinks nc ncat netcat socat "
    "telnet ftp tftp"
)
SHELLS = names("sh bash zsh dash ksh mksh ash yash posh csh tcsh fish rbash")
_INTERPRETER = re.compile(
    r"(?:python|pypy|perl|ruby|php|lua|luajit|node|nodejs|deno|bun|tclsh|wish|rscript|"
    r"osascript|pwsh|powershell|jshell|irb|groovy|julia|guile|racket)[0-9.]*"
)
_PIP = re.compile(r"pip[0-9.]*")


def category_of(name: str) -> tuple[Category, str] | None:
    """The category and reason for a known, not read-only command."""
    if _PIP.fullmatch(name):
        return "install", "installs or builds packages"
    return CATEGORY_OF.get(name)


def is_interpreter(name: str) -> bool:
    """True for programs that run code handed to them (shells, python, node ...)."""
    return name in SHELLS or _INTERPRETER.fullmatch(name.lower()) is not None


CODE_BUILTINS = frozenset({"eval", "source", "."})

# Stands, among the names a command runs, for "reads its program from standard input",
# so `curl ... | sh` can be told apart from `curl ... | python3 -m json.tool`.
READS_STDIN_CODE = "<code from stdin>"

# For shells only a cluster holding `c` (-c, -ec, -lc) makes the first operand code;
# -e there is errexit. Other interpreters take code after -c/-e/--eval and the like.
_SHELL_CODE_FLAG = re.compile(r"-[A-Za-z]*c[A-Za-z]*")
_SHELL_VALUE_OPTIONS = frozenset({"-o", "+o", "-O", "+O", "--rcfile", "--init-file"})
_CODE_FLAGS = frozenset({"-c", "-e", "-r", "-p", "--eval", "--print", "--command", "eval"})


def is_code_flag(name: str, arg: str) -> bool:
    """True when, for interpreter `name`, `arg` announces code in the next argument."""
    if name in SHELLS:
        return _SHELL_CODE_FLAG.fullmatch(arg) is not None
    return arg in _CODE_FLAGS or (
        len(arg) > 2 and arg[0] == "-" and arg[1:].isalpha() and arg[-1] in "ce"
    )


def code_arguments(name: str, args: Sequence[str]) -> list[int]:
    """Indexes of the arguments an interpreter runs as code: the -c/-e value, else its
    script (first operand); every argument of `eval`/`source`/`.`."""
    if name in CODE_BUILTINS:
        return list(range(len(args)))
    if name in SHELLS:
        operand = _first_shell_operand(args)
        return [] if operand is None else [operand]
    flagged = [index + 1 for index, arg in enumerate(args[:-1]) if is_code_flag(name, arg)]
    if flagged:
        return flagged
    script = next((i for i, arg in enumerate(args) if not arg.startswith("-")), None)
    return [] if script is None else [script]


def _first_shell_operand(args: Sequence[str]) -> int | None:
    index = 0
    while index < len(args):
        arg = args[index]
        if arg == "--":
            return index + 1 if index + 1 < len(args) else None
        if arg in _SHELL_VALUE_OPTIONS:
            index += 2
        elif arg.startswith(("-", "+")) and arg != "-":
            index += 1
        else:
            return index
    return None


def inline_code(name: str, args: Sequence[str]) -> list[str]:
    """Code strings handed to interpreter `name` on its command line (`sh -c`, `perl -e`)."""
    if name in SHELLS:
        has_flag = any(_SHELL_CODE_FLAG.fullmatch(arg) for arg in args)
        operand = _first_shell_operand(args)
        return [args[operand]] if has_flag and operand is not None else []
    codes: list[str] = []
    for index, arg in enumerate(args):
        flag, eq, value = arg.partition("=")
        if eq and flag in _CODE_FLAGS:
            codes.append(value)
        elif is_code_flag(name, arg) and index + 1 < len(args):
            codes.append(args[index + 1])
        elif len(arg) > 2 and arg[:2] in {"-c", "-e", "-E"} and not arg.startswith("--"):
            codes.append(arg[2:])  # perl -e'...', python -c'...'
    return codes


def reads_stdin_code(name: str, args: Sequence[str]) -> bool:
    """True when interpreter `name` would take its program from standard input."""
    if name in CODE_BUILTINS or not is_interpreter(name):
        return False
    if inline_code(name, args) or "-m" in args:
        return False
    if name in SHELLS:
        if any(arg.startswith("-") and "s" in arg[1:] and arg[1] != "-" for arg in args):
            return True
        operand = _first_shell_operand(args)
        return operand is None or args[operand] == "-"
    script = next((arg for arg in args if not arg.startswith("-") or arg == "-"), None)
    return script in {None, "-"}


@dataclass(frozen=True, slots=True)
class Wrapper:
    """How a wrapper's own arguments are laid out before the command it runs."""

    category: Category
    value_options: frozenset[str] = frozenset()
    positionals: int = 0  # fixed arguments between the options and the command
    code_options: frozenset[str] = frozenset()  # options whose value is a shell command
    joined: bool = False  # the rest of the line is one shell command string
    assignments: bool = False  # NAME=value words may precede the command
    runs_rest: bool = True  # False when positionals never name a command (su)


def _wrapper(
    category: Category,
    values: str = "",
    *,
    positionals: int = 0,
    codes: str = "",
    joined: bool = False,
    assignments: bool = False,
    runs_rest: bool = True,
) -> Wrapper:
    return Wrapper(
        category, names(values), positionals, names(codes), joined, assignments, runs_rest
    )


WRAPPERS: dict[str, Wrapper] = {
    "sudo": _wrapper("privileged", "-u -g -C -D -h -p -r -t -U -T -R", assignments=True),
    "doas": _wrapper("privileged", "-u -C"),
    "pkexec": _wrapper("privileged", "--user"),
    "runuser": _wrapper("privileged", "-u -g -G", codes="-c --command"),
    "su": _wrapper("privileged", "-s --shell -g -G -w", codes="-c --command", runs_rest=False),
    "gosu": _wrapper("privileged", positionals=1),
    "su-exec": _wrapper("privileged", positionals=1),
    "chroot": _wrapper("privileged", "--userspec --groups", positionals=1),
    "unshare": _wrapper("privileged"),
    "nsenter": _wrapper("privileged", "-t --target"),
    "systemd-run": _wrapper("privileged", "-p -u -E --unit --property --setenv"),
    "sg": _wrapper("privileged", positionals=1, codes="-c"),
    "env": _wrapper(
        "opaque",
        "-u --unset -C --chdir",
        codes="-S --split-string",
        assignments=True,
    ),
    "busybox": _wrapper("opaque"),
    "command": _wrapper("opaque"),
    "builtin": _wrapper("opaque"),
    "exec": _wrapper("opaque", "-a"),
    "nice": _wrapper("opaque", "-n --adjustment"),
    "ionice": _wrapper("opaque", "-c -n -p --class --classdata --pid"),
    "timeout": _wrapper("opaque", "-s -k --signal --kill-after", positionals=1),
    "nohup": _wrapper("opaque"),
    "setsid": _wrapper("opaque"),
    "stdbuf": _wrapper("opaque", "-i -o -e"),
    "unbuffer": _wrapper("opaque"),
    "time": _wrapper("opaque", "-f -o --format --output"),
    "watch": _wrapper("opaque", "-n -d --interval", joined=True),
    "chrt": _wrapper("privileged", positionals=1),
    "taskset": _wrapper("opaque", positionals=1),
    "flock": _wrapper("opaque", "-w -E", positionals=1, codes="-c --command"),
    "xargs": _wrapper(
        "opaque",
        "-I -L -n -P -s -d -E -a --arg-file --delimiter --max-args --max-procs --max-lines "
        "--replace --eof",
    ),
    "parallel": _wrapper("opaque", "-j -S --jobs"),
    "strace": _wrapper("opaque", "-o -e -p -s -u -E -a -P -S -X"),
    "ltrace": _wrapper("opaque", "-o -e -p -s -u -a"),
    "firejail": _wrapper("opaque"),
    "caffeinate": _wrapper("opaque", "-t -w"),
    "script": _wrapper("opaque", codes="-c --command", runs_rest=False),
    "proxychains": _wrapper("network", "-f"),
    "proxychains4": _wrapper("network", "-f"),
    "torsocks": _wrapper("network"),
    "ssh": _wrapper(
        "network",
        "-b -c -D -E -e -F -I -i -J -L -l -m -O -o -p -Q -R -S -W -w -B",
        positionals=1,
        joined=True,
    ),
}


@dataclass(frozen=True, slots=True)
class Unwrapped:
    """Where a wrapper's command starts in its arguments, and command strings it runs."""

    inner: int | None
    codes: tuple[str, ...]


_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")


def unwrap(wrapper: Wrapper, args: Sequence[str]) -> Unwrapped:
    """Skip the wrapper's own options (and fixed arguments) to find what it runs."""
    codes = _code_values(wrapper, args)
    index = skip_options(wrapper, args)
    index += wrapper.positionals
    if wrapper.joined:
        rest = args[index:]
        return Unwrapped(None, (*codes, " ".join(rest)) if rest else codes)
    if not wrapper.runs_rest or index >= len(args):
        return Unwrapped(None, codes)
    return Unwrapped(index, codes)


def skip_options(wrapper: Wrapper, args: Sequence[str]) -> int:
    """How many leading arguments are the wrapper's own options (and their values)."""
    index = 0
    while index < len(args):
        arg = args[index]
        if arg == "--":
            return index + 1
        if wrapper.assignments and _ASSIGNMENT.match(arg):
            index += 1
        elif len(arg) > 1 and arg.startswith("-"):
            takes_value = arg in wrapper.value_options or arg in wrapper.code_options
            index += 2 if takes_value else 1
        else:
            return index
    return index


def _code_values(wrapper: Wrapper, args: Sequence[str]) -> tuple[str, ...]:
    codes: list[str] = []
    for index, arg in enumerate(args):
        flag, eq, value = arg.partition("=")
        if flag in wrapper.code_options:
            if eq:
                codes.append(value)
            elif index + 1 < len(args):
                codes.append(args[index + 1])
    return tuple(codes)
