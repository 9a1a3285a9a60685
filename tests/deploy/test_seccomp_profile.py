"""The seccomp profile the runner's container runs under (deploy/seccomp/tether-bwrap.json,
copied for Kubernetes as deploy/k8s/base/tether-bwrap.json): it keeps the runtime's
default deny, refuses what the sandbox's own filter calls dangerous, and allows every
syscall bubblewrap really makes with the runner's own arguments, recorded with strace
as an unprivileged user (as in the container)."""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest

from tether_tools_runner.sandbox.container_profile import FOR_BWRAP, OBSOLETE
from tether_tools_runner.sandbox.identity import SandboxUser
from tether_tools_runner.sandbox.limits import SandboxLimits
from tether_tools_runner.sandbox.run import bwrap_args
from tether_tools_runner.sandbox.seccomp import DENIED, program

ROOT = Path(__file__).resolve().parents[2]
PROFILE = ROOT / "deploy" / "seccomp" / "tether-bwrap.json"
K8S_COPY = ROOT / "deploy" / "k8s" / "base" / "tether-bwrap.json"
# `1234 name(` or `1234 <... name resumed>`; signals and exits start otherwise.
SYSCALL = re.compile(r"^\d+\s+(?:<\.\.\. )?([a-z_][a-z0-9_]*)[( ]")
UNPRIVILEGED = "nobody"


@pytest.fixture(scope="module")
def profile() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(PROFILE.read_text())
    return loaded


def rules_for(profile: dict[str, Any], action: str) -> set[str]:
    return {n for rule in profile["syscalls"] if rule["action"] == action for n in rule["names"]}


def test_kubernetes_installs_the_same_profile() -> None:
    assert K8S_COPY.read_bytes() == PROFILE.read_bytes()


def test_the_default_is_deny(profile: dict[str, Any]) -> None:
    assert profile["defaultAction"] == "SCMP_ACT_ERRNO"
    assert profile["defaultErrnoRet"] == errno.EPERM
    assert {r["action"] for r in profile["syscalls"]} == {"SCMP_ACT_ALLOW", "SCMP_ACT_ERRNO"}
    arches = {a["architecture"] for a in profile["archMap"]}
    assert arches == {"SCMP_ARCH_X86_64", "SCMP_ARCH_AARCH64"}


def test_dangerous_calls_stay_refused(profile: dict[str, Any]) -> None:
    """One list with the sandbox's own filter: only what bwrap needs is let through."""
    allowed = rules_for(profile, "SCMP_ACT_ALLOW")
    assert not (set(DENIED) - FOR_BWRAP) & allowed
    assert not OBSOLETE & allowed
    for must_stay_out in ("kexec_load", "init_module", "bpf", "ptrace", "keyctl", "setns"):
        assert must_stay_out not in allowed
    # clone3 hides its flags from a filter: ENOSYS sends libc back to clone.
    (fallback,) = [r for r in profile["syscalls"] if "clone3" in r["names"]]
    assert (fallback["action"], fallback["errnoRet"]) == ("SCMP_ACT_ERRNO", errno.ENOSYS)
    # No rule narrows clone or unshare by flags: bwrap asks for new namespaces.
    for rule in profile["syscalls"]:
        if {"clone", "unshare"} & set(rule["names"]):
            assert "args" not in rule
            assert rule["action"] == "SCMP_ACT_ALLOW"


def bwrap_syscalls(workspace: Path, seccomp_fd: int) -> set[str]:
    """The syscalls bwrap (and `true` inside it) makes with the runner's arguments, run
    by an unprivileged user as in the container, with the sandbox's own filter loaded."""
    for tool in ("strace", "bwrap"):
        if shutil.which(tool) is None:
            pytest.fail(
                f"this test needs {tool}: apt-get install {tool.replace('bwrap', 'bubblewrap')}"
            )
    user = SandboxUser(uid=1000, gid=1000)
    args = bwrap_args(
        shutil.which("bwrap") or "bwrap", workspace, user=user, limits=SandboxLimits(), staged=False
    )
    args[-1:-1] = ["--seccomp", str(seccomp_fd)]
    trace = workspace / "bwrap.trace"
    done = subprocess.run(
        ["strace", "-f", "-qq", "-o", str(trace), "-u", UNPRIVILEGED, *args, "/bin/true"],
        pass_fds=(seccomp_fd,),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    names = {m[1] for line in trace.read_text().splitlines() if (m := SYSCALL.match(line))}
    assert "execve" in names
    return names


def test_bubblewrap_runs_under_it(profile: dict[str, Any]) -> None:
    if os.geteuid() != 0:
        pytest.fail("this test starts bwrap as another user through strace -u: run it as root")
    with tempfile.TemporaryDirectory(prefix="tether-seccomp-") as tmp:
        workspace = Path(tmp)
        workspace.chmod(0o777)  # bwrap binds it as the unprivileged user
        fd = os.memfd_create("tether-seccomp", 0)
        try:
            os.write(fd, program())
            os.lseek(fd, 0, os.SEEK_SET)
            made = bwrap_syscalls(workspace, fd)
        finally:
            os.close(fd)
    assert {"unshare", "mount", "pivot_root"} <= made  # it did build its namespaces
    allowed = rules_for(profile, "SCMP_ACT_ALLOW")
    # clone3, where libc tried it, is answered ENOSYS in the container and libc uses clone.
    assert made - {"clone3"} <= allowed, sorted(made - allowed)
