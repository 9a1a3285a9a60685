"""`shell`: one bash command line in the sandbox, re-checked against the deny-list here
because the bus can be spoken to directly."""

from __future__ import annotations

import math
from typing import Any

from opentelemetry import trace

from tether_common.messages.tools import ToolDescriptor
from tether_common.safety import classify
from tether_tools_runner.sandbox import Attestation, SandboxLimits, run_sandboxed
from tether_tools_runner.tool import Tool, ToolFailure
from tether_tools_runner.workspace import Workspace

DEFAULT_TIMEOUT_S = 30.0
MAX_TIMEOUT_S = 120.0

SHELL = ToolDescriptor(
    name="shell",
    description=(
        "Runs one bash command line in a sandbox whose working folder is the workspace and "
        "returns its exit code and combined stdout/stderr. Use it to build, test or inspect "
        "things no other tool covers; prefer file_read/file_list/file_search for reading. "
        "`command` is one line of bash; `timeout_s` defaults to 30 and is clamped to 120 "
        "(the whole process tree is killed then, background children too). The sandbox has "
        "no network, a read-only system, a private empty /tmp, no stdin and no credentials "
        "in its environment; only the workspace is writable. Output over 20,000 characters "
        "keeps its head and tail. Destructive commands on the deny-list are refused with "
        '`deny_listed`. Example: {"command": "pytest -q tests/test_app.py", "timeout_s": 60}.'
    ),
    parameters={
        "type": "object",
        "properties": {
            "command": {"type": "string", "minLength": 1, "maxLength": 20_000},
            "timeout_s": {"type": "number", "exclusiveMinimum": 0},
        },
        "required": ["command"],
        "additionalProperties": False,
    },
    scope="update",
    reach="instance",
    effect="process",
    idempotent=False,
    aliases=["bash", "run_command", "execute_command", "terminal", "sh"],
)


class ShellTool:
    def __init__(
        self, workspace: Workspace, attestation: Attestation, limits: SandboxLimits
    ) -> None:
        self.workspace = workspace
        self.attestation = attestation
        self.limits = limits

    async def run(self, args: dict[str, Any]) -> str:
        command = str(args["command"])
        verdict = classify(command)
        if verdict.decision == "deny":
            raise ToolFailure("deny_listed", "refused: " + "; ".join(verdict.reasons))
        timeout = min(float(args.get("timeout_s") or DEFAULT_TIMEOUT_S), MAX_TIMEOUT_S)
        limits = SandboxLimits(
            cpu_s=math.ceil(timeout) + 1,
            memory_mb=self.limits.memory_mb,
            file_size_mb=self.limits.file_size_mb,
            processes=self.limits.processes,
            open_files=self.limits.open_files,
        )
        outcome = await run_sandboxed(
            command,
            self.workspace.root,
            attestation=self.attestation,
            timeout_s=timeout,
            limits=limits,
        )
        # On the runner's span for this call (the bus's server span is current here).
        span = trace.get_current_span()
        span.set_attribute("tether.shell.timed_out", outcome.timed_out)
        if outcome.exit_code is not None:
            span.set_attribute("process.exit.code", outcome.exit_code)
        if outcome.timed_out:
            raise ToolFailure(
                "timeout",
                f"the command did not finish within {timeout:g}s and was killed with its "
                f"children. Output so far:\n{outcome.output}",
            )
        return f"exit code {outcome.exit_code}\n{outcome.output}"


def shell_tools(
    workspace: Workspace, attestation: Attestation, limits: SandboxLimits
) -> list[Tool]:
    runner = ShellTool(workspace, attestation, limits)
    return [Tool(SHELL, runner.run, own_timeout_s=MAX_TIMEOUT_S + 10)]


__all__ = ["SHELL", "shell_tools"]
