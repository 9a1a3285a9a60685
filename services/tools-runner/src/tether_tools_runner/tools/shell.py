"""`shell`: one bash command line in the sandbox, re-checked against the deny-list here
because the bus can be spoken to directly. A call that runs into a sandbox limit fails
with `sandbox_limit`, naming the limit; one that runs out of time, with `timeout`."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from opentelemetry import trace

from tether_common.messages.tools import ToolDescriptor
from tether_common.safety import classify
from tether_tools_runner.folders import Workspaces
from tether_tools_runner.sandbox import Attestation, SandboxLimits, describe, run_sandboxed
from tether_tools_runner.tool import Tool, ToolFailure

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
        "no network, a read-only system, a small private empty /tmp (also HOME), no stdin "
        "and no credentials in its environment; only the workspace is writable. Memory and "
        "process count are limited for the whole call; a call over a limit fails with "
        "`sandbox_limit` naming it (memory, processes, disk, file size, cpu time). Output "
        "over 20,000 characters keeps its head and tail. Destructive commands on the "
        "deny-list are refused with `deny_listed`. "
        'Example: {"command": "pytest -q tests/test_app.py", "timeout_s": 60}.'
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
    output_trust="untrusted",
    stageable=True,
)


class ShellTool:
    def __init__(
        self, workspaces: Workspaces, attestation: Attestation, limits: SandboxLimits
    ) -> None:
        self.workspaces = workspaces
        self.attestation = attestation
        self.limits = limits

    async def run(self, args: dict[str, Any]) -> str:
        command = str(args["command"])
        verdict = classify(command)
        if verdict.decision == "deny":
            raise ToolFailure("deny_listed", "refused: " + "; ".join(verdict.reasons))
        timeout = min(float(args.get("timeout_s") or DEFAULT_TIMEOUT_S), MAX_TIMEOUT_S)
        limits = dataclasses.replace(self.limits, cpu_s=math.ceil(timeout) + 1)
        outcome = await run_sandboxed(
            command,
            self.workspaces.current().root,
            attestation=self.attestation,
            timeout_s=timeout,
            limits=limits,
            # A command no operator looked at gets git's sanitised repository config;
            # an approved one the repository's own (under the pins).
            sanitise_git=verdict.allowed,
        )
        # On the runner's span for this call (the bus's server span is current here).
        span = trace.get_current_span()
        span.set_attribute("tether.shell.timed_out", outcome.timed_out)
        span.set_attribute("tether.shell.exceeded", outcome.exceeded or "")
        if outcome.exit_code is not None:
            span.set_attribute("process.exit.code", outcome.exit_code)
        if outcome.exceeded is not None:
            ended = "ran out of time" if outcome.timed_out else f"exit code {outcome.exit_code}"
            raise ToolFailure(
                "sandbox_limit",
                f"{outcome.exceeded} limit exceeded: {describe(outcome.exceeded, limits)}; "
                f"the command was stopped with all its processes ({ended}). "
                f"Output so far:\n{outcome.output}",
            )
        if outcome.timed_out:
            raise ToolFailure(
                "timeout",
                f"the command did not finish within {timeout:g}s and was killed with its "
                f"children. Output so far:\n{outcome.output}",
            )
        return f"exit code {outcome.exit_code}\n{outcome.output}"


def shell_tools(
    workspaces: Workspaces, attestation: Attestation, limits: SandboxLimits
) -> list[Tool]:
    runner = ShellTool(workspaces, attestation, limits)
    return [Tool(SHELL, runner.run, own_timeout_s=MAX_TIMEOUT_S + 10)]


__all__ = ["SHELL", "shell_tools"]
