"""The built-in tools as the tools-runner declares them, as the brain offers them to a
model (for the prompt-size and prefix tests of the compact tier)."""

from __future__ import annotations

from tether_common.messages.gateway import OfferedToolSpec
from tether_common.messages.tools import ToolDescriptor
from tether_tools_runner.tools.calculate import CALCULATE
from tether_tools_runner.tools.clock import CONVERT_TIME, CURRENT_TIME
from tether_tools_runner.tools.files_read import FILE_LIST, FILE_READ, FILE_SEARCH
from tether_tools_runner.tools.files_write import FILE_EDIT, FILE_WRITE
from tether_tools_runner.tools.retrieve import RETRIEVE_OUTPUT
from tether_tools_runner.tools.shell import SHELL
from tether_tools_runner.tools.web_fetch import WEB_FETCH
from tether_tools_runner.tools.web_search import WEB_SEARCH

RUNNER_TOOLS: list[ToolDescriptor] = [
    CURRENT_TIME,
    CONVERT_TIME,
    CALCULATE,
    FILE_READ,
    FILE_LIST,
    FILE_SEARCH,
    FILE_WRITE,
    FILE_EDIT,
    SHELL,
    WEB_FETCH,
    WEB_SEARCH,
    RETRIEVE_OUTPUT,
]


def offered(tools: list[ToolDescriptor]) -> list[OfferedToolSpec]:
    return [
        OfferedToolSpec(name=t.name, description=t.description, parameters=t.parameters)
        for t in tools
    ]
