"""The built-in tools, one module per family."""

from tether_tools_runner.tool import Tool
from tether_tools_runner.tools.clock import clock_tools


def builtin_tools() -> list[Tool]:
    return [*clock_tools()]


__all__ = ["builtin_tools"]
