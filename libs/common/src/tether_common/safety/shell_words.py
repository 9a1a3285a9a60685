"""One shell word as the classifier sees it: the text a command receives, what the user
wrote, and whether expansion (variables, substitutions, globs) can change it at run time.

Also holds the per-classification `Scope`: findings so far, literal variables set earlier
on the line, and whether the working directory is somewhere fatal.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .shell_verdict import Finding, ask

# bashlex has no type stubs; its nodes are duck-typed objects with `kind`, `pos`, `parts`.
Node = Any

_SIMPLE_PARAMETER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|[0-9]|[@*#?$!-]")
_BRACE_LIST = re.compile(r"\{([^{},]{0,256}(?:,[^{},]{0,256}){1,64})\}")
_MAX_BRACE_WORDS = 64
_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*|[@*])\}|\$([A-Za-z_][A-Za-z0-9_]*|[@*])")


@dataclass
class Scope:
    """Mutable state of one classification pass over one piece of shell text."""

    text: str
    depth: int
    nested: Callable[[str, int], list[Finding]]
    findings: list[Finding] = field(default_factory=list)
    variables: dict[str, str] = field(default_factory=dict)
    tainted: set[str] = field(default_factory=set)  # variables holding downloaded text
    cwd_critical: bool = False
    cwd_moved: bool = False  # a `cd` ran earlier on the line
    # Of stdout and stderr, those no redirection or `exec` on the line can have reopened
    # (tether_common.safety.shell_fds): only writes through these are harmless.
    outputs: frozenset[int] = frozenset()

    def add(self, finding: Finding) -> None:
        self.findings.append(finding)

    def add_nested(self, code: str) -> None:
        """Classify a shell script given as a string; keep what is not plainly allowed."""
        for finding in self.nested(code, self.depth + 1):
            if finding.decision != "allow":
                self.add(finding)

    def source(self, node: Node) -> str:
        start, end = node.pos
        return str(self.text[start:end])


@dataclass(frozen=True, slots=True)
class Word:
    """A word after parsing: `text` has quotes removed, `source` is as written."""

    text: str
    source: str
    expanded: bool = False  # holds $NAME or ${NAME}
    opaque: bool = False  # holds a command/process substitution or a complex expansion
    glob: bool = False  # holds an unquoted glob or brace list
    sub_names: frozenset[str] = frozenset()  # commands run inside its substitutions

    @property
    def literal(self) -> bool:
        return not (self.expanded or self.opaque or self.glob)

    @property
    def splits(self) -> bool:
        """True when expansion may turn this word into several words of any text: an
        unquoted `$x` or `$(...)`. (A glob's words all keep its literal prefix.)"""
        return not self.literal and any(char in unquoted(self.source) for char in "$`")

    @property
    def may_be_option(self) -> bool:
        """True when the program could receive this word (or a word split from it) as an
        option: it starts with `-`, or an expansion decides its first character."""
        if self.literal:
            return self.text.startswith("-")
        return self.splits or leading_char(self.source) in {"-", "?"}


Walker = Callable[[Node, Scope], frozenset[str]]


def make_word(node: Node, scope: Scope, walk: Walker) -> Word:
    """Build a Word from a bashlex word node, walking any substitution inside it."""
    expanded = opaque = False
    names: frozenset[str] = frozenset()
    for part in getattr(node, "parts", []):
        if part.kind in {"commandsubstitution", "processsubstitution"}:
            opaque = True
            what = "command" if part.kind == "commandsubstitution" else "process"
            scope.add(ask("opaque", f"{what} substitution runs a command whose output is unseen"))
            names |= walk(part.command, scope)
        elif part.kind == "parameter":
            expanded = True
            if not _SIMPLE_PARAMETER.fullmatch(str(getattr(part, "value", ""))):
                opaque = True
                scope.add(ask("opaque", "a complex parameter expansion can hide code or text"))
    source = scope.source(node)
    return Word(str(node.word), source, expanded, opaque, has_glob(source), names)


def unquoted(source: str) -> str:
    """The characters of `source` that are outside quotes and not backslash-escaped."""
    out: list[str] = []
    quote = ""
    index = 0
    while index < len(source):
        char = source[index]
        if quote == "'":
            quote = "" if char == "'" else quote
        elif char == "\\":
            index += 1  # the next character is literal (inside double quotes as well)
        elif quote == '"':
            quote = "" if char == '"' else quote
        elif char in "'\"":
            quote = char
        else:
            out.append(char)
        index += 1
    return "".join(out)


def arithmetic(text: str) -> bool:
    """True when bash may evaluate arithmetic in `text`: `((`, `$((` or `$[` outside
    single quotes (double quotes do not stop `$((`). Errs towards True."""
    kept: list[str] = []
    quote = ""
    index = 0
    while index < len(text):
        char = text[index]
        if quote == "'":
            quote = "" if char == "'" else quote
            char = " "  # single-quoted text is never evaluated
        elif char == "\\":
            index += 1  # an escaped character is literal; keep a gap in its place
            char = " "
        elif char == "'" and quote != '"':
            quote = "'"
        elif char == '"':
            quote = "" if quote == '"' else '"'
        kept.append(char)
        index += 1
    flat = "".join(kept)
    return "((" in flat or "$[" in flat


def leading_char(source: str) -> str:
    """The first character a word will have after expansion: `?` when an expansion,
    a glob or a brace list decides it, "" for an empty word."""
    quote = ""
    index = 0
    while index < len(source):
        char = source[index]
        nxt = source[index + 1] if index + 1 < len(source) else ""
        if quote == "'":
            if char != "'":
                return char
            quote = ""
        elif quote == '"':
            if char in "$`":
                return "?"
            if char == "\\" and nxt in '$`"\\':
                return nxt
            if char != '"':
                return char
            quote = ""
        elif char in "'\"":
            quote = char
        elif char == "\\":
            return nxt or char
        elif char in "$`*?[{":
            return "?"
        else:
            return char
        index += 1
    return ""


def has_glob(source: str) -> bool:
    """True when the shell would expand `source` as a glob or a brace list."""
    bare = unquoted(source)
    # A lone `[` (the test command) is literal; a glob needs its closing `]`.
    if "*" in bare or "?" in bare or re.search(r"\[.*\]", bare):
        return True
    return "{" in bare and ("," in bare or ".." in bare)


def substitute(text: str, variables: dict[str, str]) -> list[str]:
    """`text` with known variables replaced and split into words, as the shell would.

    Unknown variables stay as written (so `$HOME` is still recognisable); `$IFS` is a
    space and `$@`/`$*` are empty, the usual ways to smuggle separators.
    """

    def value(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        if name == "IFS":
            return " "
        if name in {"@", "*"}:
            return ""
        return variables.get(name, match.group(0))

    return _REFERENCE.sub(value, text).split() or [""]


def expand_braces(text: str) -> list[str]:
    """Brace lists expanded the way bash would (`{rm,-rf,/}`, `/{etc,usr}`), capped."""
    match = _BRACE_LIST.search(text)
    if match is None:
        return [text]
    head, tail = text[: match.start()], text[match.end() :]
    words: list[str] = []
    for choice in match.group(1).split(","):
        words.extend(expand_braces(head + choice + tail))
        if len(words) >= _MAX_BRACE_WORDS:
            break
    return words[:_MAX_BRACE_WORDS]
