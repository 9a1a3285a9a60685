"""sed, read as GNU sed 4 reads it: which words are scripts, and whether a script only
prints. A script is allowed only when every command in it is one that cannot run a
program (`e`, `s///e`), write a file (`w`, `W`, `s///w`) or read another file (`r`, `R`);
a script file (`-f`), editing in place (`-i`) or a computed script makes sed ask.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from .shell_options import Options, Refusal, parse, words
from .shell_words import Word

# GNU sed 4.9: short options "bsnrzuEe:f:l:i::V:" (-V is undocumented --version);
# -i and -f (and --in-place, --file) are left out on purpose.
SED = Options(
    flags="nrsuzEb",
    valued="el",
    dash_values="e",
    long_flags=words(
        "quiet silent regexp-extended separate unbuffered null-data zero-terminated posix "
        "debug sandbox binary follow-symlinks help version"
    ),
    long_valued=words("expression line-length"),
)

_NUMBER = r"\d+"
_REGEX = r"/(?:[^/\\]|\\.)*/[IM]*|\\(?P<d{n}>[^\\\n])(?:(?!(?P=d{n}))[^\\]|\\.)*(?P=d{n})[IM]*"
_ADDRESS = re.compile(
    rf"\s*(?:{_NUMBER}(?:~{_NUMBER})?|\$|{_REGEX.format(n=1)})"
    rf"(?:\s*,\s*(?:[+~]?{_NUMBER}|\$|{_REGEX.format(n=2)}))?"
)
# Commands that only print, move between lines, hold or branch. `a`, `i`, `c` take the
# rest of the script line as text; `:`, `b`, `t`, `T` a label; `l`, `q`, `Q`, `L` a number.
_PLAIN = set("pPdDnNgGhHxzF=")
_TEXT = set("aic")
_LABEL = set(":btTv")
_COUNT = set("lqQL")
_SUBSTITUTE_FLAGS = set("gpiImM0123456789")


class _Script:
    """A cursor over one sed script chunk (one -e value or the script operand)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.at = 0

    def peek(self) -> str:
        return self.text[self.at] if self.at < len(self.text) else ""

    def skip_blanks(self, also: str = "") -> None:
        while self.peek() and (self.peek().isspace() or self.peek() in also):
            self.at += 1

    def delimited(self, delimiter: str) -> bool:
        """Move past text up to an unescaped `delimiter`; False when there is none."""
        while self.at < len(self.text):
            char = self.text[self.at]
            self.at += 2 if char == "\\" else 1
            if char == delimiter:
                return True
        return False


def _substitute(script: _Script, command: str) -> str | None:
    delimiter = script.peek()
    if not delimiter or delimiter in "\\\n":
        return "a malformed sed s or y command"
    script.at += 1
    if not (script.delimited(delimiter) and script.delimited(delimiter)):
        return "a malformed sed s or y command"
    if command == "y":
        return None
    while script.peek() and not (script.peek().isspace() or script.peek() in ";}#"):
        flag = script.peek()
        if flag == "e":
            return "the sed flag s///e runs the pattern space as a command"
        if flag == "w":
            return "the sed flag s///w writes to a file"
        if flag not in _SUBSTITUTE_FLAGS:
            return f"the sed flag {flag!r} is not one known to be read-only"
        script.at += 1
    return None


def _command(script: _Script) -> str | None:
    """Check one command at the cursor; None when it only prints or moves."""
    command = script.peek()
    script.at += 1
    if command in _PLAIN or command in "{}":
        return None
    if command in _TEXT or command == "#":
        script.at = len(script.text)  # the rest of the line is text or a comment
        return None
    if command in _LABEL:
        while script.peek() and script.peek() not in ";}":
            script.at += 1
        return None
    if command in _COUNT:
        script.skip_blanks()
        while script.peek().isdigit():
            script.at += 1
        return None
    if command in "sy":
        return _substitute(script, command)
    if command == "e":
        return "the sed command e runs a program"
    if command in "wW":
        return f"the sed command {command} writes to a file"
    if command in "rR":
        return f"the sed command {command} reads another file"
    return f"the sed command {command!r} is not one known to be read-only"


def script_problem(text: str) -> str | None:
    """Why one sed script chunk is not read-only, or None."""
    script = _Script(text)
    while True:
        script.skip_blanks(";")
        if not script.peek():
            return None
        address = _ADDRESS.match(script.text, script.at)
        if address and address.end() > script.at:
            script.at = address.end()
        script.skip_blanks("!")
        if not script.peek():
            return "a sed address without a command"
        opening = script.peek() == "{"
        problem = _command(script)
        if problem:
            return problem
        if opening:
            continue  # a block's first command follows `{` directly
        script.skip_blanks()
        if script.peek() and script.peek() not in ";}#":
            return "sed text that is not a command known to be read-only"


def check_sed(args: Sequence[Word]) -> Refusal | None:
    parsed = parse("sed", SED, args)
    if isinstance(parsed, tuple):
        return parsed
    scripts = parsed.values("e", "expression")
    if not scripts:
        if not parsed.operands:
            return None  # sed without a script only prints its usage
        first = parsed.operands[0]
        if not first.literal:
            return "opaque", "the sed script is computed at run time"
        chunks = [first.text]
    elif not all(value.literal for value in scripts):
        return "opaque", "the sed script is computed at run time"
    else:
        chunks = [value.text for value in scripts]
    for chunk in chunks:
        problem = script_problem(chunk)
        if problem:
            return "opaque", problem
    return None
