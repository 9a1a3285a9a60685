"""The one helper for user-supplied regular expressions: RE2 semantics, caps, flags, and
refusals that say what to write instead."""

from __future__ import annotations

import pytest

from tether_common.patterns import (
    MAX_PATTERN_CHARS,
    PatternBudgetError,
    PatternProblem,
    UserPattern,
    compile_pattern,
)

REFUSED = [
    ("", "empty"),
    ("a" * (MAX_PATTERN_CHARS + 1), "too_long"),
    ("(", "syntax"),
    ("[a-", "syntax"),
    (r"(a)\1", "unsupported"),
    (r"(?P<n>a)(?P=n)", "unsupported"),
    (r"(?=a)", "unsupported"),
    (r"(?!a)", "unsupported"),
    (r"(?<=a)b", "unsupported"),
    (r"(?<!a)b", "unsupported"),
    (r"(?>a)", "unsupported"),
    ("a++", "unsupported"),
    ("a*+", "unsupported"),
    (r"a\Z", "unsupported"),
    ("(?x) a b", "unsupported"),
    ("a{1001}", "too_complex"),
    ("a{1000}{1000}", "too_complex"),
    ("(a{1000}){1000}", "too_complex"),
    ("(.*){1000}", "too_complex"),
    ("a.{999}c", "too_complex"),
    ("[a-z]{900}[0-9]{900}[A-Z]{900}", "too_complex"),
]


@pytest.mark.parametrize(("pattern", "kind"), REFUSED, ids=[p[:24] for p, _ in REFUSED])
def test_refused_with_a_kind_and_an_actionable_message(pattern: str, kind: str) -> None:
    problem = compile_pattern(pattern)
    assert isinstance(problem, PatternProblem), pattern
    assert problem.kind == kind
    assert problem.code == "invalid_pattern"
    assert len(problem.message) > 20


def compiled(pattern: str, **flags: bool) -> UserPattern:
    result = compile_pattern(pattern, **flags)
    assert isinstance(result, UserPattern), result
    return result


def test_flags_map_onto_re2() -> None:
    assert compiled("abc", ignore_case=True).search("xABCx")
    assert not compiled("abc").search("ABC")
    assert compiled("^b$", multiline=True).search("a\nb\nc")
    assert not compiled("^b$").search("a\nb\nc")
    assert compiled("a.c", dot_all=True).search("a\nc")
    assert not compiled("a.c").search("a\nc")
    assert compiled("a.c(", literal=True).search("xa.c(")
    assert not compiled("a.c", literal=True).search("abc")
    assert compiled(r"(?i)déjà\s+vu").search("DÉJÀ  VU")


def test_catastrophic_patterns_are_linear() -> None:
    text = "a" * 200_000 + "!"
    # Answers (right) at all: a backtracking engine would not. The `*$` ones match the
    # empty string at the end; the others never match text ending in "!".
    expected = {
        r"(a+)+$": False,
        r"(a|a)*$": True,
        r"(a*)*b": False,
        r"((a+)+)+b": False,
        r"(\w+\s?)*$": True,
    }
    found = {pattern: bool(compiled(pattern).search(text)) for pattern in expected}
    assert found == expected


def test_the_budget_stops_a_long_search_between_texts() -> None:
    pattern = compile_pattern("needle", budget_s=0.0)
    assert isinstance(pattern, UserPattern)
    assert not pattern.search("hay")  # the first call starts the clock
    with pytest.raises(PatternBudgetError) as stopped:
        pattern.search("hay")
    assert stopped.value.code == "pattern_budget"
