"""What a tool is inside the runner: its descriptor and the coroutine that runs it.

A tool signals failure by raising `ToolFailure(code, message)`; the executor turns that
into a `FAILED:` result, so nothing ever raises past the runner."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from tether_common.messages.tools import ExecuteTool, ToolDescriptor, ToolResult


class ToolFailure(Exception):  # noqa: N818 - a control signal inside the runner, never on the wire
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


ToolFn = Callable[[dict[str, Any]], Awaitable[str]]
# A tool source's answer for a name of its own that cannot run now: (code, message), or
# None when the registry decides (the tool is there, or it does not exist).
Hold = Callable[[str], tuple[str, str] | None]


def failed(call: ExecuteTool, code: str, message: str) -> ToolResult:
    """`call`'s answer when it was not run (or applied nothing): `FAILED: code: message`."""
    return ToolResult(
        call_id=call.call_id,
        name=call.name,
        ok=False,
        content=f"FAILED: {code}: {message}",
        error_code=code,
    )


@dataclass(frozen=True, slots=True)
class Tool:
    descriptor: ToolDescriptor
    run: ToolFn
    # A tool that enforces its own time limit (and cleans up after it) gets this many
    # seconds from the executor instead of the call's timeout.
    own_timeout_s: float | None = None

    @property
    def name(self) -> str:
        return self.descriptor.name


class Registry:
    """The catalogue: every tool by name."""

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        self._holds: list[Hold] = []
        for tool in tools:
            self.add(tool)

    def hold_with(self, hold: Hold) -> None:
        """Let a tool source (the MCP hub) answer for its names while it cannot serve
        them: a server still connecting has no tools here yet, and that is no reason to
        call its tools unknown."""
        self._holds.append(hold)

    def held(self, name: str) -> tuple[str, str] | None:
        """Why a call of `name` cannot run now, by the source it belongs to, or None."""
        for hold in self._holds:
            if (why := hold(name)) is not None:
                return why
        return None

    def add(self, tool: Tool) -> None:
        self._tools[tool.name] = tool

    def remove(self, name: str) -> None:
        self._tools.pop(name, None)

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def descriptors(self) -> list[ToolDescriptor]:
        return [tool.descriptor for tool in self._tools.values()]

    def names(self) -> list[str]:
        return sorted(self._tools)


class Overlay:
    """The tools one tenant's call may name: the shared registry, then the tenant's own
    servers' (a shared name wins, as in the brain's catalogue). Another tenant's tools
    are in neither, so a call naming one is `unknown_tool`, like a name never made."""

    def __init__(self, shared: Registry, own: Registry) -> None:
        self.shared = shared
        self.own = own

    def held(self, name: str) -> tuple[str, str] | None:
        if (why := self.shared.held(name)) is not None or self.shared.get(name) is not None:
            return why
        return self.own.held(name)

    def get(self, name: str) -> Tool | None:
        return self.shared.get(name) or self.own.get(name)

    def names(self) -> list[str]:
        return sorted({*self.shared.names(), *self.own.names()})
