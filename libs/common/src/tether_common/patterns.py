"""Regular expressions that a model or a user supplies: compiled by RE2 (linear time, no
backtracking), capped in size and in compiled program, and refused with a reason the model
can act on. Callers run the search itself off the event loop (the runner's file workers,
the output-store's grep process): RE2 releases the GIL while it matches.

Python's `re` backtracks, so one pattern such as `(a+)+$` can hold a thread (and, run on
the event loop, a whole service) for minutes. RE2 answers in time linear in the text for
any pattern it accepts; what it gives up (backreferences, lookaround, atomic groups) is
refused here with a message saying what to write instead. Linear is not free: the cost
per character grows with the compiled program (`.{999}` compiles to ~8,000 steps), so the
program is capped too, and a search still runs under a time budget.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Literal, Protocol, cast

import re2

from tether_common.errors import ErrorCode, TetherError

# The longest pattern accepted, in characters (tool schemas may say less).
MAX_PATTERN_CHARS = 1000
# The largest compiled program accepted, in RE2 instructions: the per-character cost of a
# search when RE2 must fall back from its DFA. Real searches stay far below it (a
# 1,000-character literal is ~1,000; `def\s+\w+` is ~10); `.{300}` is about the limit.
MAX_PROGRAM_SIZE = 2500
# RE2's memory budget per compiled pattern (program and DFA cache together). The default
# (8 MiB) is kept: a smaller one starves the DFA and makes searches slower, not safer.
MAX_MEM_BYTES = 8 << 20
# How long one search may run before it stops with `pattern_budget` (seconds).
SEARCH_BUDGET_S = 10.0

PatternKind = Literal["empty", "too_long", "syntax", "unsupported", "too_complex"]

# RE2's error text → (kind, what to write instead). Checked in order; first hit wins.
_UNSUPPORTED: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"invalid escape sequence: \\[1-9]"), "backreferences (\\1) are not supported"),
    (re.compile(r"invalid perl operator: \(\?P$"), "backreferences ((?P=name)) are not supported"),
    (re.compile(r"invalid perl operator: \(\?<?[=!]"), "lookahead/lookbehind is not supported"),
    (re.compile(r"invalid perl operator: \(\?>"), "atomic groups ((?>...)) are not supported"),
    (re.compile(r"bad repetition operator: [*+?}]\+"), "possessive quantifiers are not supported"),
    (re.compile(r"invalid escape sequence: \\Z"), "\\Z is written \\z here"),
    (re.compile(r"invalid perl operator: \(\?[a-zA-Z]*x"), "verbose mode ((?x)) is not supported"),
)


@dataclass(frozen=True, slots=True)
class PatternProblem:
    """Why a pattern was refused; `message` is written for the model that sent it."""

    kind: PatternKind
    message: str
    code: str = ErrorCode.INVALID_PATTERN


class _Program(Protocol):
    def ProgramSize(self) -> int: ...  # noqa: N802 - RE2's own name


class PatternBudgetError(TetherError):
    """A search ran past its time budget (the pattern is valid; the text is too large)."""

    default_code = ErrorCode.PATTERN_BUDGET


@dataclass(slots=True)
class UserPattern:
    """A compiled user pattern: `search(text)` says whether it occurs in `text`, and raises
    `PatternBudgetError` once the search has run `budget_s` since its first call."""

    source: str
    regex: re2._Regexp[str] = field(repr=False)
    budget_s: float = SEARCH_BUDGET_S
    _deadline: float | None = field(default=None, repr=False)

    def search(self, text: str) -> bool:
        now = time.monotonic()
        if self._deadline is None:
            self._deadline = now + self.budget_s
        elif now > self._deadline:
            raise PatternBudgetError(
                f"the search ran past its {self.budget_s:g}s budget; search fewer or smaller "
                "files (a narrower path or glob) or use a simpler pattern"
            )
        return self.regex.search(text) is not None


def _options(ignore_case: bool) -> re2.Options:
    options = re2.Options()
    options.max_mem = MAX_MEM_BYTES
    options.case_sensitive = not ignore_case
    options.log_errors = False  # a bad user pattern is an answer, not a log line
    # Only "does it occur" is asked: without captures RE2 can answer from its DFA alone.
    options.never_capture = True
    return options


def _explain(pattern: str, error: str) -> PatternProblem:
    for signature, what in _UNSUPPORTED:
        if signature.search(error):
            return PatternProblem(
                "unsupported",
                f"{what} (the search engine is RE2, linear-time; RE2 error: {error}). "
                "Rewrite the pattern without it, or search for plain text.",
            )
    if "pattern too large" in error:
        return _too_complex(pattern)
    if "repetition" in error:
        return PatternProblem(
            "too_complex",
            f"{error}: a counted repetition may be at most {{1000}}, and nested counts "
            "may not multiply past 1000. Use a smaller count, or + / *.",
        )
    return PatternProblem("syntax", f"the regular expression is invalid: {error}.")


def _too_complex(pattern: str) -> PatternProblem:
    return PatternProblem(
        "too_complex",
        f"the pattern {pattern[:60]!r} compiles to more than {MAX_PROGRAM_SIZE} steps; "
        "large counted repetitions (e.g. .{500}) or long alternations are the usual cause. "
        "Use smaller counts, + / *, or several simpler searches.",
    )


def compile_pattern(
    pattern: str,
    *,
    literal: bool = False,
    ignore_case: bool = False,
    multiline: bool = False,
    dot_all: bool = False,
    budget_s: float = SEARCH_BUDGET_S,
) -> UserPattern | PatternProblem:
    """Compile a pattern a model or user sent, or say why not. `literal` searches for the
    text itself; `multiline` lets ^/$ match at line breaks; `dot_all` lets . match one."""
    if not pattern:
        return PatternProblem("empty", "the pattern is empty; give the text to search for.")
    if len(pattern) > MAX_PATTERN_CHARS:
        return PatternProblem(
            "too_long",
            f"the pattern is {len(pattern)} characters; at most {MAX_PATTERN_CHARS} are "
            "accepted. Search for a shorter, distinctive part.",
        )
    source = re2.escape(pattern) if literal else pattern
    flags = ("m" if multiline else "") + ("s" if dot_all else "")
    if flags:
        source = f"(?{flags}){source}"
    try:
        # Not `re2.compile`: it keeps the last 128 patterns in a process-wide cache, each
        # with up to `max_mem` of DFA, so a stream of distinct user patterns would pin
        # ~1 GiB. Built directly, each regexp dies with its search.
        regex = re2._Regexp(source, _options(ignore_case))
    except re2.error as exc:
        return _explain(pattern, _error_text(exc))
    if cast(_Program, regex._regexp).ProgramSize() > MAX_PROGRAM_SIZE:  # type: ignore[attr-defined]
        return _too_complex(pattern)
    return UserPattern(pattern, regex, budget_s)


def _error_text(exc: re2.error) -> str:
    text = exc.args[0] if exc.args else str(exc)
    return text.decode(errors="replace") if isinstance(text, bytes) else str(text)


__all__ = [
    "MAX_PATTERN_CHARS",
    "MAX_PROGRAM_SIZE",
    "PatternBudgetError",
    "PatternKind",
    "PatternProblem",
    "UserPattern",
    "compile_pattern",
]
