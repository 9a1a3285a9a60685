"""Reading a command's options the way getopt would, against an allow-list of the option
spellings the classifier understands; any other option makes the command ask.

Long options must be written in full. GNU getopt_long also accepts any unambiguous
prefix (`--expr=` for `--expression=`) and prefers an exact match to a prefix, so a
prefix that looks like an allowed option can be a different, forbidden one (`git log
--output` is not `--output-indicator-new`); an abbreviation is therefore never allowed.
Options are looked for in every word before `--`, since GNU tools take options after
operands too. A computed word (`$x`, `"$x"`, `*`) in a place where it could become an
option makes the command ask.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .shell_verdict import Category
from .shell_words import Word

Refusal = tuple[Category, str]


def long_option_hit(arg: str, options: frozenset[str]) -> bool:
    """True when `arg` is one of `options` or an abbreviation GNU getopt would accept."""
    name = arg.split("=", 1)[0]
    return len(name) > 2 and any(option.startswith(name) for option in options)


def short_option_hit(arg: str, letters: str) -> bool:
    """True when `arg` is a short-option cluster (`-rf`) containing one of `letters`."""
    return (
        len(arg) > 1
        and arg.startswith("-")
        and not arg.startswith("--")
        and any(letter in arg[1:] for letter in letters)
    )


def words(text: str) -> frozenset[str]:
    return frozenset(text.split())


@dataclass(frozen=True, slots=True)
class Options:
    """The option spellings one command understands (long names without `--`)."""

    flags: str = ""  # short options without a value; clusters (`-la`) allowed
    valued: str = ""  # short options taking a value: attached (`-n5`) or the next word
    attached: str = ""  # short options whose value, if any, is attached (`-U3`, `-uno`)
    long_flags: frozenset[str] = frozenset()
    long_valued: frozenset[str] = frozenset()  # --name=value or --name value
    long_optional: frozenset[str] = frozenset()  # --name or --name=value
    numeric: bool = False  # `-5` means a count (head, tail, git log)
    dash_values: str = ""  # short options whose separate value may start with `-`
    clusters: bool = True  # False for tools that take one option per word (git log)


@dataclass(frozen=True, slots=True)
class Value:
    """An option's value as the program receives it."""

    text: str
    literal: bool


@dataclass(frozen=True, slots=True)
class Parsed:
    options: tuple[tuple[str, Value | None], ...]
    operands: tuple[Word, ...]

    def has(self, *names: str) -> bool:
        return any(name in names for name, _ in self.options)

    def values(self, *names: str) -> list[Value]:
        return [value for name, value in self.options if name in names and value is not None]


def computed(name: str) -> Refusal:
    return "opaque", f"an argument of {name} is computed and could become an option"


def not_understood(name: str, option: str) -> Refusal:
    return "unknown", f"{name} option {option} is not one known to be read-only"


class _Reader:
    """One pass over a command's arguments."""

    def __init__(self, name: str, spec: Options, args: Sequence[Word]) -> None:
        self.name, self.spec, self.args = name, spec, args
        self.index = 0
        self.options: list[tuple[str, Value | None]] = []
        self.operands: list[Word] = []

    def next_value(self, option: str, dash_ok: bool) -> Value | Refusal | None:
        if self.index >= len(self.args):
            return None  # the program will complain about the missing value
        word = self.args[self.index]
        self.index += 1
        if word.splits:
            return computed(self.name)
        if word.literal and word.text.startswith("-") and not dash_ok:
            return "unknown", f"the value of {self.name} {option} looks like an option"
        return Value(word.text, word.literal)

    def long(self, text: str) -> Refusal | None:
        key, equals, value = text[2:].partition("=")
        spec = self.spec
        if key in spec.long_flags and not equals:
            self.options.append((key, None))
        elif key in spec.long_optional:
            self.options.append((key, Value(value, True) if equals else None))
        elif key in spec.long_valued:
            if equals:
                self.options.append((key, Value(value, True)))
                return None
            found = self.next_value(text, dash_ok=False)
            if isinstance(found, tuple):
                return found
            self.options.append((key, found))
        else:
            return not_understood(self.name, text.split("=", 1)[0])
        return None

    def short(self, text: str) -> Refusal | None:
        spec = self.spec
        if spec.numeric and text[1:].isdigit():
            self.options.append(("#", Value(text[1:], True)))
            return None
        if not spec.clusters and len(text) > 2 and text[1] not in spec.valued + spec.attached:
            return not_understood(self.name, text)
        position = 1
        while position < len(text):
            letter, rest = text[position], text[position + 1 :]
            if letter in spec.flags:
                self.options.append((letter, None))
                position += 1
                continue
            if letter in spec.attached:  # `-uno`, `-M50%`, or the letter alone
                self.options.append((letter, Value(rest, True) if rest else None))
            elif letter in spec.valued:
                found = (
                    Value(rest, True) if rest else self.next_value(text, letter in spec.dash_values)
                )
                if isinstance(found, tuple):
                    return found
                self.options.append((letter, found))
            else:
                return not_understood(self.name, f"-{letter}")
            return None
        return None

    def run(self) -> Parsed | Refusal:
        done = False
        while self.index < len(self.args):
            word = self.args[self.index]
            self.index += 1
            if done or (word.literal and (word.text == "-" or not word.text.startswith("-"))):
                self.operands.append(word)
                continue
            if not word.literal:
                if word.may_be_option:
                    return computed(self.name)
                self.operands.append(word)
                continue
            if word.text == "--":
                done = True
                continue
            refusal = self.long(word.text) if word.text.startswith("--") else self.short(word.text)
            if refusal is not None:
                return refusal
        return Parsed(tuple(self.options), tuple(self.operands))


def parse(name: str, spec: Options, args: Sequence[Word]) -> Parsed | Refusal:
    """The options and operands of `name args...`, or why they are not understood."""
    return _Reader(name, spec, args).run()
