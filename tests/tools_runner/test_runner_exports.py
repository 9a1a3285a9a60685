"""The runner's public surface: what the sandbox package and the tools package export,
and that every built-in is described the way the design asks."""

from __future__ import annotations

from pathlib import Path

import tether_tools_runner.sandbox as sandbox
import tether_tools_runner.tools as tools
from tether_tools_runner.sandbox import Attestation
from tether_tools_runner.settings import RunnerSettings


def test_exports() -> None:
    assert set(sandbox.__all__) == {
        "LEVELS",
        "Attestation",
        "Outcome",
        "SandboxLimits",
        "SandboxUser",
        "attest",
        "describe",
        "hand_over",
        "missing_for",
        "release_cgroups",
        "run_sandboxed",
        "sandbox_user",
    }
    assert tools.__all__ == ["Builtins"]


def test_every_builtin_is_described_and_strict(tmp_path: Path, attestation: Attestation) -> None:
    built = tools.Builtins(RunnerSettings(workspace=tmp_path), attestation).tools()
    names = [tool.name for tool in built]
    assert len(names) == len(set(names)) == 11
    for tool in built:
        descriptor = tool.descriptor
        assert descriptor.parameters["additionalProperties"] is False, descriptor.name
        assert "Example:" in descriptor.description, descriptor.name
        assert len(descriptor.description) > 200, descriptor.name
