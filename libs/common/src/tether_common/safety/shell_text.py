"""The second, text layer of the shell classifier: deny patterns found in raw text.

It runs where the parser cannot see: input bashlex cannot parse, command lines with
opaque parts, and code handed to other interpreters (`python -c "os.system('rm -rf /')"`).
The text is normalised the way a shell would undo tricks (`${IFS}`, `$'\\x72m'`, quotes,
backslashes, brace lists), cut at every shell separator, and every place a deny-listed
command name appears is checked with the same rules as parsed commands. It over-matches
on purpose: it only ever runs on commands that already need an operator's approval.
"""

from __future__ import annotations

import posixpath
import re

from .shell_deny import denied_names, deny_reason

_ANSI_C = re.compile(r"\$'((?:[^'\\]|\\.)*)'")
_ANSI_ESCAPE = re.compile(r"\\(x[0-9a-fA-F]{1,2}|u[0-9a-fA-F]{1,4}|[0-7]{1,3}|.)", re.DOTALL)
_SIMPLE_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "e": "\x1b", "a": "\a", "b": "\b"}
_IFS = re.compile(r"\$\{IFS[^}]*\}|\$IFS\b")
_BRACED_NAME = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_EMPTY_EXPANSION = re.compile(r"\$@|\$\*|\$\{[@*]\}")
_BACKSLASH = re.compile(r"\\(.)", re.DOTALL)
_BRACE_LIST = re.compile(r"\{([^{}\s]*,[^{}\s]*)\}")
_SEPARATORS = re.compile(r"[;&|\n\r()`{}<>]|\$\(|\b(?:do|then|else|elif)\b")

_FETCH = r"(?:curl|wget|fetch|aria2c|https?|xh|lynx|links|w3m|nc|ncat|netcat|socat|ftp|tftp)"
_RUNNER = (
    r"(?:(?:ba|z|da|k|mk|a|c|tc|fi|ya|rba)?sh|busybox|python[0-9.]*|pypy[0-9.]*|perl|ruby"
    r"|node|nodejs|php|lua|deno|bun|eval|source)"
)
_WRAPPERS = r"(?:(?:sudo|doas|env|command|exec|nohup|time|xargs)\s+(?:-\S+\s+)*)*"
_FETCH_PIPE = re.compile(
    rf"\b{_FETCH}\b[^\n;]*?\|\s*{_WRAPPERS}(?:\S*/)?{_RUNNER}\b", re.IGNORECASE
)
_FETCH_SUBST = re.compile(
    rf"(?:\b{_RUNNER}\b|(?:^|[\s;&|])\.)[^\n;|]*?(?:\$\(|<\(|`)\s*(?:\S*/)?{_FETCH}\b",
    re.IGNORECASE,
)
_FORK_BOMB = re.compile(
    r"(?P<name>[\w:.-]+)\s*\(\s*\)\s*\{[^}]*?(?P=name)\s*\|\s*(?P=name)\s*&"
    r"|(?P<fn>[\w:.-]+)\s*\(\s*\)\s*\{[^}]*?(?P=fn)\s*&[^}]*?(?P=fn)\s*&"
)
_FATAL_REDIRECT = re.compile(
    r">\s*(?:/dev/(?:sd[a-z]|hd[a-z]|vd[a-z]|xvd[a-z]|nvme\d|mmcblk\d|r?disk\d|md\d|dm-\d)"
    r"|/etc/(?:passwd|shadow|group|gshadow|sudoers|fstab)\b|/proc/sysrq-trigger)"
)
_RESERVED_PREFIX = frozenset({"!", "time", "exec", "command", "builtin", "nohup", "sudo"})


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
    text = _BACKSLASH.sub(r"\1", text)
    text = text.replace("'", "").replace('"', "")
    return _BRACE_LIST.sub(lambda m: " ".join(m.group(1).split(",")), text)


def _segment_reasons(segment: str, names: frozenset[str]) -> list[str]:
    words = segment.split()
    reasons: list[str] = []
    for index, word in enumerate(words):
        name = posixpath.basename(word)
        if name in names or name.startswith("mkfs"):
            reason = deny_reason(name, words[index + 1 :])
            if reason:
                reasons.append(reason)
    return reasons


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
    names = denied_names()
    for segment in _SEPARATORS.split(flat):
        reasons.extend(_segment_reasons(segment, names))
    return list(dict.fromkeys(reasons))
