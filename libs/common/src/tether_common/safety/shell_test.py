"""`test` and `[`, which bash evaluates itself: `-v NAME` evaluates an array subscript in
NAME as arithmetic, and arithmetic runs the command substitutions it finds there
(`test -v 'a[$(id)]'` runs `id`). Everything else these builtins do is a comparison or
a file test. (`[[ ]]`, `(( ))` and `$(( ))` evaluate arithmetic too; the parser does not
read them, so they always ask.)

The expression's shape is fixed by its literal words only when few enough words are
computed: bash chooses between unary, binary and grouped forms by the words' values.
A computed word is accepted where its position makes it an operand whatever its value.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from .shell_options import Refusal, words
from .shell_words import Word

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_UNARY = words("-a -b -c -d -e -f -g -h -k -p -r -s -t -u -w -x -G -L -N -O -S -o -z -n -R")
# -eq ...: `test` wants integers and never evaluates them (unlike `[[`).
_BINARY = words("= == != < > -eq -ne -lt -le -gt -ge -nt -ot -ef -a -o")
_EVALUATES = "-v"


def _is(word: Word, texts: frozenset[str] | str) -> bool:
    return word.literal and (word.text == texts if isinstance(texts, str) else word.text in texts)


def _shape_safe(args: Sequence[Word]) -> bool:
    """True when no computed word can become an operator, given bash's rules for
    0 to 4 arguments (test.c: one_argument ... four_arguments)."""
    count = len(args)
    if count <= 1 or all(word.literal for word in args):
        return True
    if count == 2:
        return _is(args[0], "!") or (_is(args[0], _UNARY))
    if count == 3:
        if _is(args[1], _BINARY):
            return True
        if _is(args[0], "!"):
            return _shape_safe(args[1:])
        return _is(args[0], "(") and _is(args[2], ")")
    if count == 4:
        if _is(args[0], "!"):
            return _shape_safe(args[1:])
        return _is(args[0], "(") and _is(args[3], ")") and _shape_safe(args[1:3])
    return all(word.literal for word in args)


def check_test(args: Sequence[Word], *, bracket: bool = False) -> Refusal | None:
    if bracket:
        if not (args and _is(args[-1], "]")):
            return None  # `[` without `]` is a syntax error: nothing runs
        args = args[:-1]
    if any(word.splits for word in args):
        return "opaque", "an unquoted expansion in a test can change the expression"
    for index, word in enumerate(args):
        if _is(word, _EVALUATES):
            name = args[index + 1] if index + 1 < len(args) else None
            if name is not None and not (name.literal and _NAME.fullmatch(name.text)):
                return "opaque", "test -v evaluates an array subscript, which can run commands"
    if not _shape_safe(args):
        return "opaque", "a computed word in a test could become -v, which can run commands"
    return None
