"""find and awk, whose arguments are a small program: allowed only when every word of it
is a primary (find) or a construct (awk) known to read and print, never to run a
command, write a file or delete one.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from .shell_options import Refusal, words
from .shell_words import Word

# GNU findutils 4.9 primaries that only test, print or steer the walk.
_FIND_FLAGS = words(
    "-daystart -follow -nowarn -warn -depth -mount -noleaf -xdev -ignore_readdir_race "
    "-noignore_readdir_race -empty -false -true -nouser -nogroup -readable -writable "
    "-executable -print -print0 -ls -prune -quit -not -a -and -o -or , ( ) !"
)
_FIND_VALUED = words(
    "-regextype -files0-from -maxdepth -mindepth -amin -anewer -atime -cmin -cnewer "
    "-context -ctime -fstype -gid -group -ilname -iname -inum -ipath -iregex -iwholename "
    "-links -lname -mmin -mtime -name -newer -path -perm -regex -size -type -uid -used "
    "-user -wholename -xtype -printf -samefile"
)
_NEWER_XY = re.compile(r"-newer[aBcmt][aBcmt]")
_FIND_GLOBAL = words("-H -L -P")
_FIND_FORBIDDEN = {
    "-exec": "runs a command for every file",
    "-execdir": "runs a command for every file",
    "-ok": "runs a command for every file",
    "-okdir": "runs a command for every file",
    "-delete": "deletes every file it matches",
    "-fprint": "writes to a file",
    "-fprint0": "writes to a file",
    "-fprintf": "writes to a file",
    "-fls": "writes to a file",
}


def _starts_expression(word: Word) -> bool:
    return word.may_be_option or (word.literal and word.text in {"(", "!", ")", ","})


def check_find(args: Sequence[Word]) -> Refusal | None:
    index = 0
    while index < len(args) and args[index].literal and args[index].text in _FIND_GLOBAL:
        index += 1
    if index < len(args) and args[index].literal and args[index].text == "-D":
        index += 2  # debug options only print
    elif index < len(args) and args[index].literal and re.fullmatch(r"-O\d", args[index].text):
        index += 1
    while index < len(args) and not _starts_expression(args[index]):
        index += 1  # the starting points
    while index < len(args):
        word = args[index]
        index += 1
        if not word.literal:
            return "opaque", "a find expression word is computed and could become -exec"
        text = word.text
        if text in _FIND_FORBIDDEN:
            reason = f"find {text} {_FIND_FORBIDDEN[text]}"
            return ("destructive", reason) if text == "-delete" else ("opaque", reason)
        if text in _FIND_FLAGS:
            continue
        if text in _FIND_VALUED or _NEWER_XY.fullmatch(text):
            value = args[index] if index < len(args) else None
            if value is not None and (value.splits or (value.glob and value.may_be_option)):
                return "opaque", f"the value of find {text} could expand to several words"
            index += 1
            continue
        return "unknown", f"find {text} is not a primary known to be read-only"
    return None


# awk can run commands (system, pipes, getline from a command) and write files (>). The
# program is refused if any of these appear anywhere in it, inside strings too: telling
# strings from regular expressions (`/"/`) needs awk's own grammar.
_AWK_UNSAFE = re.compile(r"system|getline|[|>]|@|\bclose\b|fflush")


def check_awk(args: Sequence[Word]) -> Refusal | None:
    index = 0
    while index < len(args) and args[index].may_be_option:
        word = args[index]
        if not word.literal:
            return "opaque", "a computed awk option could load a program file"
        if word.text in ("-F", "-v"):
            if index + 1 < len(args) and args[index + 1].splits:
                return "opaque", f"the value of awk {word.text} is computed and could split"
            index += 2
        elif word.text.startswith(("-F", "-v")) or word.text == "--":
            index += 1
            if word.text == "--":
                break
        else:
            return "opaque", f"awk option {word.text} loads or runs a program we cannot see"
    if index >= len(args):
        return None  # awk without a program prints its usage
    program = args[index]
    if not program.literal:
        return "opaque", "the awk program is computed at run time"
    if _AWK_UNSAFE.search(program.text):
        return "opaque", "the awk program can run commands or write files"
    if any(word.may_be_option for word in args[index + 1 :]):
        return "opaque", "an awk operand could become an option"
    return None
