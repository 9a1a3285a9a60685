"""No class in `libs/` or `services/` is over 300 lines (house style: split a class by
what it does before it gets there): an AST walk over every module, naming each offender
with its length, so a class that grows past the bound fails here, not in review."""

from __future__ import annotations

import ast
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MAX_CLASS_LINES = 300
# Not our code, or not code: virtualenvs, caches, built trees.
SKIPPED = frozenset({".venv", "__pycache__", "node_modules", "build", "dist", "site-packages"})


def class_lengths(source: str) -> Iterator[tuple[str, int, int]]:
    """Each class in `source` (nested ones too, by dotted name) as (name, first line,
    length in lines), its decorators counted as part of it."""

    def walk(node: ast.AST, prefix: str) -> Iterator[tuple[str, int, int]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                first = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                last = child.end_lineno or child.lineno
                name = f"{prefix}{child.name}"
                yield name, first, last - first + 1
                yield from walk(child, f"{name}.")
            else:
                yield from walk(child, prefix)

    yield from walk(ast.parse(source), "")


def modules() -> Iterator[Path]:
    for top in ("libs", "services"):
        for path in sorted((ROOT / top).rglob("*.py")):
            if not SKIPPED.intersection(path.relative_to(ROOT).parts):
                yield path


def offenders() -> list[str]:
    found = []
    for path in modules():
        for name, first, length in class_lengths(path.read_text(encoding="utf-8")):
            if length > MAX_CLASS_LINES:
                where = f"{path.relative_to(ROOT)}:{first}"
                found.append(f"{where} {name}: {length} lines")
    return found


def test_no_class_is_over_300_lines() -> None:
    assert list(modules()), "no module found under libs/ and services/"
    too_long = offenders()
    assert not too_long, f"classes over {MAX_CLASS_LINES} lines:\n" + "\n".join(too_long)


def _class_of(lines: int, *, decorators: int = 0, nested: bool = False) -> str:
    """A class of exactly `lines` lines (decorators included), inside a function if
    `nested`."""
    body = ["@dataclass"] * decorators + ["class Big:"]
    body += [f"    x{i} = {i}" for i in range(lines - len(body))]
    if not nested:
        return "\n".join(body)
    return "def outer() -> None:\n" + textwrap.indent("\n".join(body), "    ")


@pytest.mark.parametrize(
    ("source", "length"),
    [
        (_class_of(300), 300),
        (_class_of(301), 301),
        (_class_of(301, decorators=2), 301),
        (_class_of(350, nested=True), 350),
    ],
)
def test_a_class_is_measured_from_its_first_decorator_to_its_last_line(
    source: str, length: int
) -> None:
    assert [found[2] for found in class_lengths(source)] == [length]


def test_nested_classes_are_named_and_measured_on_their_own() -> None:
    source = "class Outer:\n    class Inner:\n        a = 1\n        b = 2\n    c = 3\n"
    assert list(class_lengths(source)) == [("Outer", 1, 5), ("Outer.Inner", 2, 3)]
