"""The second, text layer of the shell classifier: deny patterns found in raw text.

It runs where the parser cannot see: input bashlex cannot parse, command lines with
opaque parts, and code handed to other interpreters (`python -c "os.system('rm -rf /')"`).
The text is normalised the way a shell would undo tricks (`${IFS}`, `$'\\x72m'`, quotes,
backslashes, brace lists), cut at every shell separator; in each piece the command that
would run (past assignments, wrappers such as `sudo`, and `-c`/`-e` flags) is checked
with the same rules as parsed commands. `echo` and `printf` count as launchers too,
since what they print is often piped into a shell.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Sequence

from .shell_commands import WRAPPERS, is_code_flag, is_interpreter, skip_options
from .shell_deny import deny_reason

_ANSI_C = re.compile(r"\$'((?:[^'\\]|\\.)*)'")
_ANSI_ESCAPE = re.compile(r"\\(x[0-9a-fA-F]{1,2}|u[0-9a-fA-F]{1,4}|[0-7]{1,3}|.)", re.DOTALL)
_SIMPLE_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "e": "\x1b", "a": "\a", "b": "\b"}
_IFS = re.compile(r"\$\{IFS[^}]{0,64}\}|\$IFS\b")
# ${HOME}, ${HOME:?}, ${HOME%/} all name $HOME for the rules.
_BRACED_NAME = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?:[:#%/^,@][^}]{0,64})?\}")
_EMPTY_EXPANSION = re.compile(r"\$@|\$\*|\$\{[@*]\}")
_BRACE_LIST = re.compile(r"\{([^{}\s,]{0,256}(?:,[^{}\s,]{0,256}){1,64})\}")
_SEPARATORS = re.compile(r"[;&|\n\r()`{}<>]|\$\(|\b(?:do|then|else|elif)\b")

_FETCH = r"(?:curl|wget|fetch|aria2c|https?|xh|lynx|links|w3m|nc|ncat|netcat|socat|ftp|tftp)"
_RUNNER = (
    r"(?:(?:ba|z|da|k|mk|a|c|tc|fi|ya|rba)?sh|busybox|python[0-9.]*|pypy[0-9.]*|perl|ruby"
    r"|node|nodejs|php|lua|deno|bun|eval|source)"
)
_WRAPPERS = r"(?:(?:sudo|doas|env|command|exec|nohup|time|xargs)\s+(?:-\S{1,32}\s+){0,8}){0,4}"
# Only an interpreter given no script reads its program from the pipe (`| sh`, `| sh -s`,
# `| python3 -`), unlike `| python3 -m json.tool`.
_STDIN_PROGRAM = r"(?=(?:\s+-[\w-]*)*\s*(?:$|[;&|)\n]))"
_FETCH_PIPE = re.compile(
    rf"\b{_FETCH}\b[^\n;]{{0,512}}?\|\s*{_WRAPPERS}(?:[^\s/]*/){{0,8}}{_RUNNER}\b"
    rf"{_STDIN_PROGRAM}",
    re.IGNORECASE,
)
# Downloaded text in the place an interpreter takes its program from: the script
# argument, the -c value, or standard input (`bash <(curl ..)`, `sh -c "$(curl ..)"`).
_FETCH_SUBST = re.compile(
    rf"(?:\b{_RUNNER}\b|(?:^|(?<=[\s;&|]))\.)(?:\s+-[\w-]{{1,32}}){{0,8}}\s*(?:<{{1,3}}\s*)?"
    rf"(?:\$\(|<\(|`)\s*(?:[^\s/]*/){{0,8}}{_FETCH}\b",
    re.IGNORECASE,
)
_FORK_BOMB = re.compile(
    r"(?<![\w:.-])(?P<name>[\w:.-]{1,64})\s*\(\s*\)\s*\{[^}]{0,256}?"
    r"(?P=name)\s*\|\s*(?P=name)\s*&"
)
_FATAL_REDIRECT = re.compile(
    r">\s*(?:/dev/(?:sd[a-z]|hd[a-z]|vd[a-z]|xvd[a-z]|nvme\d|mmcblk\d|r?disk\d|md\d|dm-\d)"
    r"|/etc/(?:passwd|shadow|group|gshadow|sudoers|fstab)\b|/proc/sysrq-trigger)"
)
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
# Words after which the next word is still run as (or printed into) a command.
_LAUNCHERS = frozenset({"!", "eval", "echo", "printf", "then", "do", "else", "elif", "if"})


def _ansi_c_char(match: re.Match[str]) -> str:
    escape = match.group(1)
    if escape[0] in "xu" and len(escape) > 1:
        return chr(int(escape[1:], 16))
    if escape.isdigit():
        return chr(int(escape, 8) % 256)
    return _SIMPLE_ESCAPES.get(escape, escape)


def normalise(text: str) -> str:
    """Undo the quoting and expansion tricks that hide a command name or argument."""
    text = _ANSI_C.sub(lambda m: _ANSI_ESCAPE.sub(_ansi_c_char, m.group(1)), text)
    text = _IFS.sub(" ", text)
    text = _EMPTY_EXPANSION.sub("", text)
    text = _BRACED_NAME.sub(r"$\1", text)
    text = text.replace("\\\n", "")
    text = text.replace("\\", "")  # every level of escaping at once
    text = text.replace("'", "").replace('"', "")
    return _BRACE_LIST.sub(lambda m: " ".join(m.group(1).split(",")), text)


def _command_start(words: Sequence[str]) -> int:
    """Index of the command a segment runs, past assignments, wrappers and `-c` flags."""
    index = 0
    while index < len(words):
        word = words[index]
        name = posixpath.basename(word)
        wrapper = WRAPPERS.get(name)
        if _ASSIGNMENT.match(word) or name in _LAUNCHERS:
            index += 1
        elif wrapper is not None:
            rest = words[index + 1 :]
            code = next((i for i, arg in enumerate(rest) if arg in wrapper.code_options), None)
            skip = skip_options(wrapper, rest) + wrapper.positionals if code is None else code + 1
            index += 1 + max(skip, 0)
        elif is_interpreter(name):
            flags = range(index + 1, len(words))
            code = next((i for i in flags if is_code_flag(name, words[i])), None)
            if code is None:
                return index
            index = code + 1
        else:
            return index
    return index


def _segment_reason(segment: str) -> str | None:
    words = segment.split()
    start = _command_start(words)
    if start >= len(words):
        return None
    return deny_reason(posixpath.basename(words[start]), words[start + 1 :])


def scan(text: str) -> list[str]:
    """Deny reasons visible in raw text, parsed or not; empty when none."""
    flat = normalise(text)
    reasons: list[str] = []
    if _FORK_BOMB.search(flat) or ":(){" in flat.replace(" ", ""):
        reasons.append("a fork bomb exhausts the machine")
    if _FETCH_PIPE.search(flat) or _FETCH_SUBST.search(flat):
        reasons.append("runs code downloaded from the network")
    if _FATAL_REDIRECT.search(flat):
        reasons.append("redirects output onto a raw disk or a system file")
    for segment in _SEPARATORS.split(flat):
        reason = _segment_reason(segment)
        if reason:
            reasons.append(reason)
    return list(dict.fromkeys(reasons))
