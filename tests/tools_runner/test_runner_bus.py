"""Through the bus against the real services: the catalogue carries every built-in and
the sandbox level, and a deny-listed command or an escaping path sent straight onto
the bus (skipping the brain's gates) is refused by the runner itself."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from tether_common.bus import Bus
from tether_common.messages.tools import CatalogRequest, ExecuteTool, ToolResult
from tether_common.supervisor import Supervisor

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def runner_workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("runner-ws")


@pytest.fixture(scope="module")
def stack_extra_env(runner_workspace: Path) -> dict[str, str]:
    return {
        "TETHER_RUNNER_WORKSPACE": str(runner_workspace),
        "TETHER_RUNNER_MIN_SANDBOX": json.dumps({"shell": "rlimits"}),
    }


async def execute(bus: Bus, name: str, args: dict[str, Any]) -> ToolResult:
    call = ExecuteTool(run_id="run-bus", call_id=uuid.uuid4().hex[:8], name=name, args=args)
    return await bus.request(bus.subjects.tool_execute, call, timeout=30)


async def test_catalogue_lists_builtins_and_sandbox_level(stack_bus: Bus) -> None:
    catalog = await stack_bus.request(stack_bus.subjects.tool_catalog, CatalogRequest())
    names = {tool.name for tool in catalog.tools}
    assert names >= {"current_time", "calculate", "file_read", "file_edit", "shell", "web_fetch"}
    assert catalog.sandbox_level in {"none", "rlimits", "bwrap", "seccomp"}
    for tool in catalog.tools:
        assert tool.parameters["additionalProperties"] is False


async def test_deny_listed_command_on_the_bus_is_refused(
    stack_bus: Bus, runner_workspace: Path
) -> None:
    (runner_workspace / "keep.txt").write_text("still here")
    for command in ("rm -rf / --no-preserve-root", "rm -rf ~", "mkfs.ext4 /dev/sda"):
        result = await execute(stack_bus, "shell", {"command": command})
        assert result.error_code == "deny_listed", result.content
    assert (runner_workspace / "keep.txt").read_text() == "still here"
    served = await execute(stack_bus, "shell", {"command": "cat keep.txt"})
    assert served.content == "exit code 0\nstill here"


async def test_escaping_paths_and_urls_on_the_bus_are_refused(stack_bus: Bus) -> None:
    read = await execute(stack_bus, "file_read", {"path": "../../etc/passwd"})
    assert read.error_code == "path_denied"
    fetch = await execute(stack_bus, "web_fetch", {"url": "http://169.254.169.254/"})
    assert fetch.error_code == "blocked_destination"


async def test_sandbox_attestation_is_served_over_http(stack: Supervisor, stack_bus: Bus) -> None:
    async with httpx.AsyncClient(base_url=stack.child("tools-runner").url) as client:
        assert (await client.get("/sandbox")).status_code == 401  # a token is required
        admin = {"Authorization": f"Bearer {stack.env['TETHER_OPERATOR_TOKEN']}"}
        report = (await client.get("/sandbox", headers=admin)).json()
    catalog = await stack_bus.request(stack_bus.subjects.tool_catalog, CatalogRequest())
    assert report["level"] == catalog.sandbox_level
    assert {"seccomp", "landlock_abi", "process_limit"} <= set(report["features"])
