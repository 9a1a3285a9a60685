"""`calculate`: arithmetic is exact, anything that is not arithmetic or that would blow
up (huge powers, factorials, digit counts) fails fast with a code."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tether_common.messages.tools import ToolResult
from tether_tools_runner.executor import Executor
from tether_tools_runner.tool import ToolFailure
from tether_tools_runner.tools.calculate import FUNCTIONS, evaluate

Call = Callable[..., Awaitable[ToolResult]]

GOOD = [
    ("1 + 2 * 3", "7"),
    ("2 ** 10", "1024"),
    ("(1 + 2) * 3", "9"),
    ("7 // 2", "3"),
    ("7 % 4", "3"),
    ("10 / 4", "2.5"),
    ("-3 ** 2", "-9"),
    ("sqrt(16)", "4"),
    ("round(2.675, 2)", "2.67"),
    ("max(1, 5, 3)", "5"),
    ("factorial(20)", "2432902008176640000"),
    ("comb(10, 3)", "120"),
    ("log(8, 2)", "3"),
    ("1 < 2 <= 3", "True"),
    ("1 < 2 > 3", "False"),
    ("not 0", "True"),
    ("pi > 3 and e < 3", "True"),
    ("2 ** -1", "0.5"),
    ("gcd(12, 18)", "6"),
    ("abs(-4.5)", "4.5"),
    ("10 ** 3000 > 0", "True"),
    # Binary rounding noise of decimal input is not part of the answer.
    ("17.5 / 100 * 2380", "416.5"),
    ("0.1 + 0.2", "0.3"),
    ("1 / 3", "0.333333333333333"),
    ("2.5e-300 * 2", "5e-300"),
    ("1000 / 8", "125"),
    ("1e20 / 2", "5e+19"),
]

BAD = [
    ("9 ** 9 ** 9", "too_large"),
    ("10 ** 5000", "too_large"),
    ("factorial(100000)", "too_large"),
    ("(10 ** 3000) * (10 ** 3000)", "too_large"),
    ("__import__('os')", "unsupported"),
    ("().__class__", "unsupported"),
    ("x + 1", "unsupported"),
    ("'a' * 3", "unsupported"),
    ("[1, 2]", "unsupported"),
    ("lambda: 1", "unsupported"),
    ("1 / 0", "math_error"),
    ("sqrt(-1)", "math_error"),
    ("2.0 ** 10000", "math_error"),
    ("(-8) ** 0.5", "unsupported"),
    ("1 +", "syntax_error"),
    ("round(1.5, 10 ** 9)", "math_error"),
    ("perm(5000, 5000)", "too_large"),
    ("1 << 100000", "unsupported"),
    ("+".join(["1"] * 300), "too_large"),
    ("print(1)", "unsupported"),
]


@pytest.mark.parametrize(("expression", "value"), GOOD)
async def test_arithmetic_is_exact(
    executor: Executor, call: Call, expression: str, value: str
) -> None:
    result = await call(executor, "calculate", {"expression": expression})
    assert result.ok, result.content
    assert result.content == f"{expression} = {value}"


@pytest.mark.parametrize(("expression", "code"), BAD)
async def test_refusals_are_fast_and_coded(
    executor: Executor, call: Call, expression: str, code: str
) -> None:
    started = time.perf_counter()
    result = await call(executor, "calculate", {"expression": expression})
    assert not result.ok
    assert result.error_code == code, result.content
    assert result.content.startswith(f"FAILED: {code}:")
    # Not a timing: 9 ** 9 ** 9 computed would take hours; a refusal takes milliseconds.
    assert time.perf_counter() - started < 30.0


async def test_extra_arguments_are_refused_by_the_schema(executor: Executor, call: Call) -> None:
    result = await call(executor, "calculate", {"expression": "1", "mode": "eval"})
    assert result.error_code == "schema_invalid"


OPERATORS = ["+", "-", "*", "/", "//", "%", "**", "<", "==", "and", "or"]
NUMBERS = st.one_of(
    st.integers(-(10**6), 10**6).map(str), st.floats(allow_nan=False).map(repr), st.just("pi")
)
EXPRESSIONS = st.recursive(
    NUMBERS,
    lambda inner: st.one_of(
        st.tuples(inner, st.sampled_from(OPERATORS), inner).map(
            lambda t: f"({t[0]} {t[1]} {t[2]})"
        ),
        st.tuples(st.sampled_from(sorted(FUNCTIONS)), inner).map(lambda t: f"{t[0]}({t[1]})"),
        st.tuples(inner, inner).map(lambda t: f"max({t[0]}, {t[1]})"),
    ),
    max_leaves=12,
)


CODES = {None, "too_large", "math_error", "unsupported", "syntax_error"}


def failure_code(expression: str) -> str | None:
    """None when `expression` evaluates; its code when it fails; anything else propagates."""
    try:
        evaluate(expression)
    except ToolFailure as failure:
        return failure.code
    return None


@settings(max_examples=300, deadline=1000)
@given(EXPRESSIONS)
def test_generated_arithmetic_only_fails_with_codes(expression: str) -> None:
    assert failure_code(expression) in CODES


@settings(max_examples=300, deadline=1000)
@given(st.text(max_size=80))
def test_arbitrary_text_only_fails_with_codes(expression: str) -> None:
    assert failure_code(expression) in CODES
