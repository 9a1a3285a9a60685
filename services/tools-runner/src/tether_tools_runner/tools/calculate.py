"""`calculate`: a safe arithmetic evaluator over Python's `ast`, never `eval`.

Only numbers, arithmetic, comparisons, boolean operators and a whitelist of math
functions and constants are understood; anything else is refused. Sizes are capped
before the work is done, so `9**9**9` or `factorial(10**6)` fail fast instead of
eating the runner."""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable
from typing import Any

from tether_common.messages.tools import ToolDescriptor
from tether_tools_runner.tool import Tool, ToolFailure

MAX_EXPRESSION = 1000
MAX_NODES = 200
MAX_DIGITS = 4000  # below Python's int->str limit (4300)
MAX_BITS = int(MAX_DIGITS * math.log2(10))
MAX_FACTORIAL = 1000

Number = int | float

CALCULATE = ToolDescriptor(
    name="calculate",
    description=(
        "Evaluates one arithmetic expression exactly and returns its value. Use it for any "
        "sum, percentage, unit conversion factor or comparison instead of doing the maths "
        "yourself. `expression` uses Python syntax: + - * / // % ** and parentheses, "
        "comparisons (< <= == != > >=), and/or/not, the constants pi, e, tau, inf, and the "
        "functions sqrt, cbrt, exp, log(x[, base]), log2, log10, sin, cos, tan, asin, acos, "
        "atan, atan2, sinh, cosh, tanh, degrees, radians, hypot, floor, ceil, trunc, abs, "
        "round(x[, digits]), min, max, gcd, lcm, factorial, comb, perm. Integers are exact; "
        "results over 4000 digits, factorial above 1000 and huge powers fail with "
        "`too_large`; division by zero fails with `math_error`. No variables, strings or "
        'attribute access. Example: {"expression": "round(1234.5 * 1.2 ** 3, 2)"}.'
    ),
    parameters={
        "type": "object",
        "properties": {
            "expression": {"type": "string", "minLength": 1, "maxLength": MAX_EXPRESSION}
        },
        "required": ["expression"],
        "additionalProperties": False,
    },
    scope="read",
    reach="self",
    effect="none",
    idempotent=True,
    aliases=["calculator", "calc", "math", "evaluate"],
    output_trust="trusted",
)


def _factorial(n: Number) -> int:
    if not isinstance(n, int) or n > MAX_FACTORIAL:
        raise ToolFailure("too_large", f"factorial takes a whole number up to {MAX_FACTORIAL}.")
    return math.factorial(n)


def _combinatoric(fn: Callable[..., int]) -> Callable[..., int]:
    def bounded(n: Number, k: Number | None = None) -> int:
        if not isinstance(n, int) or n > MAX_FACTORIAL:
            raise ToolFailure("too_large", f"{fn.__name__} takes whole numbers up to 1000.")
        return fn(n) if k is None else fn(n, k)

    return bounded


def _round(x: Number, digits: Number | None = None) -> Number:
    if digits is None:
        return round(x)
    if not isinstance(digits, int) or abs(digits) > 100:
        raise ToolFailure("math_error", "round() takes a whole number of digits up to 100.")
    return round(x, digits)


FUNCTIONS: dict[str, Callable[..., Any]] = {
    "sqrt": math.sqrt,
    "cbrt": lambda x: math.copysign(abs(x) ** (1 / 3), x),
    "exp": math.exp,
    "log": math.log,
    "log2": math.log2,
    "log10": math.log10,
    **{name: getattr(math, name) for name in ("sin", "cos", "tan", "asin", "acos", "atan")},
    **{name: getattr(math, name) for name in ("atan2", "sinh", "cosh", "tanh", "hypot")},
    **{name: getattr(math, name) for name in ("degrees", "radians", "floor", "ceil", "trunc")},
    "gcd": math.gcd,
    "lcm": math.lcm,
    "abs": abs,
    "round": _round,
    "min": min,
    "max": max,
    "factorial": _factorial,
    "comb": _combinatoric(math.comb),
    "perm": _combinatoric(math.perm),
}
CONSTANTS: dict[str, Number] = {"pi": math.pi, "e": math.e, "tau": math.tau, "inf": math.inf}

_BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
}
_COMPARE: dict[type[ast.cmpop], Callable[[Any, Any], bool]] = {
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
}


def _checked(value: Any) -> Number:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value.bit_length() > MAX_BITS:
        raise ToolFailure("too_large", f"the result has more than {MAX_DIGITS} digits.")
    if not isinstance(value, int | float):
        raise ToolFailure("unsupported", "only real numbers are supported (no complex results).")
    return value


def _power(base: Number, exponent: Number) -> Number:
    exact = isinstance(base, int) and isinstance(exponent, int)
    if exact and exponent > 0 and abs(base) > 1 and exponent * math.log2(abs(base)) > MAX_BITS:
        raise ToolFailure("too_large", f"the power has more than {MAX_DIGITS} digits.")
    result: Number = base**exponent
    return result


class _Evaluator:
    def __init__(self) -> None:
        self.nodes = 0

    def eval(self, node: ast.AST) -> Number:
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise ToolFailure("too_large", f"the expression has more than {MAX_NODES} parts.")
        return _checked(self._eval(node))

    def _eval(self, node: ast.AST) -> Any:
        match node:
            case ast.Constant(value=value) if isinstance(value, int | float):
                return value
            case ast.Name(id=name) if name in CONSTANTS:
                return CONSTANTS[name]
            case ast.UnaryOp(op=ast.USub(), operand=operand):
                return -self.eval(operand)
            case ast.UnaryOp(op=ast.UAdd(), operand=operand):
                return +self.eval(operand)
            case ast.UnaryOp(op=ast.Not(), operand=operand):
                return not self.eval(operand)
            case ast.BinOp(left=left, op=ast.Pow(), right=right):
                return _power(self.eval(left), self.eval(right))
            case ast.BinOp(left=left, op=op, right=right) if type(op) in _BINARY:
                return _BINARY[type(op)](self.eval(left), self.eval(right))
            case ast.BoolOp(op=op, values=values):
                results = [self.eval(v) for v in values]
                return all(results) if isinstance(op, ast.And) else any(results)
            case ast.Compare(left=left, ops=ops, comparators=rest):
                return self._compare(left, ops, rest)
            case ast.Call(func=ast.Name(id=name), args=args, keywords=[]) if name in FUNCTIONS:
                return FUNCTIONS[name](*(self.eval(a) for a in args))
        raise ToolFailure("unsupported", f"'{ast.unparse(node)}' is not supported by calculate.")

    def _compare(self, left: ast.expr, ops: list[ast.cmpop], rest: list[ast.expr]) -> bool:
        current = self.eval(left)
        for op, node in zip(ops, rest, strict=True):
            if type(op) not in _COMPARE:
                raise ToolFailure("unsupported", "only < <= == != > >= comparisons are supported.")
            value = self.eval(node)
            if not _COMPARE[type(op)](current, value):
                return False
            current = value
        return True


def evaluate(expression: str) -> Number:
    """The value of `expression`, or ToolFailure saying why not."""
    if len(expression) > MAX_EXPRESSION:
        raise ToolFailure(
            "too_large", f"the expression is longer than {MAX_EXPRESSION} characters."
        )
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as exc:
        raise ToolFailure("syntax_error", f"the expression does not parse: {exc.msg}.") from None
    try:
        return _Evaluator().eval(tree.body)
    except ToolFailure:
        raise
    except (ArithmeticError, ValueError, TypeError) as exc:
        raise ToolFailure("math_error", f"{type(exc).__name__}: {exc}.") from None


def _format(value: Number) -> str:
    """Integers and booleans exactly; a float to 15 significant digits, which drops the
    binary rounding noise of decimal input (`17.5 / 100 * 2380` is 416.5, not
    416.50000000000006: a model copies every digit it is shown into its answer), and a
    whole one as the whole number a calculator shows (`1000 / 8` is 125, not 125.0)."""
    if not isinstance(value, float):
        return str(value)
    value = float(f"{value:.15g}")
    return str(int(value)) if value.is_integer() and abs(value) < 1e16 else repr(value)


async def calculate(args: dict[str, Any]) -> str:
    expression = str(args["expression"])
    return f"{expression} = {_format(evaluate(expression))}"


def calculate_tools() -> list[Tool]:
    return [Tool(CALCULATE, calculate)]


__all__ = ["CALCULATE", "calculate_tools", "evaluate"]
