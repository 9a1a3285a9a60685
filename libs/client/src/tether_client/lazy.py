"""Commands loaded when used: the root group of `tether`, which imports a command's module
only when that command runs, is completed or shows its own help.

`tether --help` and shell completion of a command name list each command by the summary
written beside it here, without importing it; `tether runs list` imports the runs
commands (httpx, the wire models, Rich) and nothing of the other groups, and `tether up`
alone the service stack. A start then costs what the command uses (a test pins which
modules `tether --help` imports).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, ClassVar

import typer

# Typer 0.29 vendors click: its `Context` and the rest are there (typer.Context is a subclass).
from typer._click import Command, Context, HelpFormatter
from typer._click.shell_completion import CompletionItem
from typer.core import TyperCommand, TyperGroup

__all__ = ["LazyCommand", "LazyGroup", "loaded"]

Loader = Callable[[], "typer.Typer | Callable[..., Any]"]


@dataclass(frozen=True, slots=True)
class LazyCommand:
    """A command of the root: what `tether --help` says of it, and how to load it (a Typer
    sub-app, or the function of a single command)."""

    summary: str
    load: Loader


@functools.cache
def loaded(name: str, load: Loader) -> TyperCommand | TyperGroup:
    """The click command `load` gives, named `name` (built once per process: a loader may
    add commands to its sub-app, which must happen once)."""
    found = load()
    # A sub-app is a group even with one command (`audit verify`), as `add_typer` made it.
    command = (
        typer.main.get_group(found)
        if isinstance(found, typer.Typer)
        else typer.main.get_command(_single(name, found))
    )
    command.name = name
    assert isinstance(command, TyperCommand | TyperGroup)
    return command


def _single(name: str, function: Callable[..., Any]) -> typer.Typer:
    # One command and no callback: Typer builds the command itself, not a group (and no
    # completion options: those are the root's).
    app = typer.Typer(add_completion=False)
    app.command(name)(function)
    return app


class LazyGroup(TyperGroup):
    """The root group: its own commands (`up`) plus `LAZY`, each loaded on first use. While
    it lists its commands (its help, completing a command name) a lazy one is a stand-in
    holding only its summary."""

    lazy: ClassVar[dict[str, LazyCommand]] = {}  # set by `tether_client.cli`, which owns the table

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        self._listing = False

    def list_commands(self, ctx: Context) -> list[str]:
        return [*super().list_commands(ctx), *(n for n in self.lazy if n not in self.commands)]

    def get_command(self, ctx: Context, cmd_name: str) -> Command | None:
        if (found := super().get_command(ctx, cmd_name)) is not None:
            return found
        entry = self.lazy.get(cmd_name)
        if entry is None:
            return None
        if self._listing:
            return TyperCommand(name=cmd_name, help=entry.summary)
        return loaded(cmd_name, entry.load)

    @contextmanager
    def _stand_ins(self) -> Iterator[None]:
        self._listing = True
        try:
            yield
        finally:
            self._listing = False

    def format_help(self, ctx: Context, formatter: HelpFormatter) -> None:
        with self._stand_ins():
            super().format_help(ctx, formatter)

    def shell_complete(self, ctx: Context, incomplete: str) -> list[CompletionItem]:
        with self._stand_ins():
            return super().shell_complete(ctx, incomplete)
