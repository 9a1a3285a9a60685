"""The syscall filter: on this host bubblewrap installs it (level `seccomp`), a command
under it cannot make a user namespace (refused by the filter itself; without it,
bubblewrap's `--disable-userns` still refuses, a second layer) or trace a process, and
ordinary commands are untouched."""

from __future__ import annotations

import dataclasses
import importlib
from pathlib import Path

import pytest

from tether_common.errors import ConfigError
from tether_tools_runner.sandbox import Attestation, SandboxLimits, missing_for, run_sandboxed
from tether_tools_runner.sandbox.seccomp import DENIED, program

LIMITS = SandboxLimits(cpu_s=10, memory_mb=512, file_size_mb=16, processes=64, open_files=256)
NEW_USER_NAMESPACE = 'unshare --user true; echo "exit $?"'


@pytest.fixture
def filtered(attestation: Attestation) -> Attestation:
    if attestation.level != "seccomp":
        pytest.fail(
            "the sandbox lacks its syscall filter (apt-get install bubblewrap libseccomp2): "
            f"{attestation.problems}"
        )
    return attestation


async def run(command: str, workspace: Path, attestation: Attestation) -> str:
    outcome = await run_sandboxed(
        command, workspace, attestation=attestation, timeout_s=20, limits=LIMITS
    )
    assert not outcome.timed_out
    return outcome.output


async def test_no_user_namespace_under_the_filter(filtered: Attestation, workspace: Path) -> None:
    refused = await run(NEW_USER_NAMESPACE, workspace, filtered)
    assert "Operation not permitted" in refused  # EPERM: the filter's answer
    assert refused.rstrip().endswith("exit 1")
    without = dataclasses.replace(filtered, level="bwrap", seccomp=None)
    second = await run(NEW_USER_NAMESPACE, workspace, without)
    assert "No space left on device" in second  # ENOSPC: no user namespaces left to make
    assert second.rstrip().endswith("exit 1")


async def test_ptrace_is_refused(filtered: Attestation, workspace: Path) -> None:
    # strace is rarely installed; python's ctypes makes the raw call (101: x86-64 ptrace).
    probe = (
        "/usr/bin/python3 -c 'import ctypes; l = ctypes.CDLL(None, use_errno=True); "
        "print(l.syscall(101, 0, 0, 0, 0), ctypes.get_errno())'"
    )
    assert (await run(probe, workspace, filtered)).split() == ["-1", "1"]  # EPERM


async def test_ordinary_commands_are_untouched(filtered: Attestation, workspace: Path) -> None:
    command = "mkdir -p a/b && echo hi > a/b/f && cat a/b/f | tr a-z A-Z && (sleep 0.1 &) && ls a"
    assert (await run(command, workspace, filtered)).split() == ["HI", "b"]


def test_the_filter_is_built_once_and_lists_its_refusals() -> None:
    assert program() is program()
    assert {"ptrace", "mount", "unshare", "setns", "bpf", "keyctl", "kexec_load"} <= set(DENIED)


def test_without_libseccomp_the_level_is_bwrap_and_says_why(
    monkeypatch: pytest.MonkeyPatch, filtered: Attestation
) -> None:
    def unusable() -> bytes:
        raise ConfigError("libseccomp is not usable: libseccomp.so.2: cannot open")

    # The module, not the package's `attest` function of the same name.
    attest_module = importlib.import_module("tether_tools_runner.sandbox.attest")
    monkeypatch.setattr(attest_module, "program", unusable)
    found = attest_module.attest()
    assert (found.level, found.seccomp) == ("bwrap", None)
    assert "libseccomp" in found.problems["seccomp"]
    assert found.features["seccomp"] == "not applied"
    assert missing_for(found, "seccomp") is not None
    assert missing_for(found, "bwrap") is None
