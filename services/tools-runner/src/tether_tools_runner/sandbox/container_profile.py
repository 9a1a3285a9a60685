"""The seccomp profile the runner's container needs so that bubblewrap works inside it.

A container runtime's default profile refuses `unshare`, namespace flags on `clone`,
`mount`, `umount2` and `pivot_root` to a process without CAP_SYS_ADMIN, which is every
process in our runner container: bubblewrap then cannot build the sandbox and the shell
tool is refused (`TETHER_RUNNER_MIN_SANDBOX`). This profile keeps the runtime's shape
(default action: deny with EPERM; an allow-list by name; `clone3` answered ENOSYS so that
libc falls back to `clone`) and allows exactly those calls on top.

The allow-list is every syscall libseccomp knows on the profile's architectures minus
the dangerous ones the sandbox's own filter refuses (`seccomp.DENIED`, one list for both)
and a few obsolete ones, plus back the ones bubblewrap makes (`FOR_BWRAP`). A syscall
newer than the libseccomp that generated the file is denied until it is regenerated:

    python -m tether_tools_runner.sandbox.container_profile > deploy/seccomp/tether-bwrap.json

(and copy it to deploy/k8s/base/tether-bwrap.json; a test checks the two are the same).
"""

from __future__ import annotations

import errno
import json
import sys
from typing import Any

from .seccomp import DENIED

# What bubblewrap itself calls to build the sandbox (recorded with strace by
# tests/deploy/test_seccomp_profile.py): new namespaces, its mounts, and the root switch.
FOR_BWRAP = frozenset({"unshare", "mount", "umount2", "pivot_root"})
# Obsolete or unimplemented calls no program here needs.
OBSOLETE = frozenset(
    {
        "_sysctl", "afs_syscall", "create_module", "get_kernel_syms", "getpmsg", "putpmsg",
        "query_module", "security", "stime", "tuxcall", "vm86", "vm86old", "vserver",
    }
)  # fmt: skip
# Answered ENOSYS, not EPERM: libc then uses `clone`, whose flags a filter can read.
FALL_BACK = ("clone3",)
ARCHITECTURES = {
    "SCMP_ARCH_X86_64": ("X86_64", ("SCMP_ARCH_X86", "SCMP_ARCH_X32")),
    "SCMP_ARCH_AARCH64": ("AARCH64", ("SCMP_ARCH_ARM",)),
}
_SUB_ARCHES = {"SCMP_ARCH_X86": "X86", "SCMP_ARCH_ARM": "ARM"}
_HIGHEST_NUMBER = 1024  # above every syscall number of these architectures


def known_syscalls() -> set[str]:
    """Every syscall name libseccomp knows on the profile's architectures."""
    import pyseccomp as sc

    names: set[str] = set()
    arches = [a for a, _ in ARCHITECTURES.values()] + list(_SUB_ARCHES.values())
    for arch in arches:
        for number in range(_HIGHEST_NUMBER):
            try:
                names.add(sc.resolve_syscall(getattr(sc.Arch, arch), number).decode())
            except ValueError:  # no syscall with that number here
                continue
    return names


def allowed(known: set[str]) -> list[str]:
    refused = (set(DENIED) - FOR_BWRAP) | OBSOLETE | set(FALL_BACK)
    return sorted((known - refused) | FOR_BWRAP | {"clone"})


def profile(known: set[str]) -> dict[str, Any]:
    """The profile, in the JSON format Docker, containerd and CRI-O read."""
    return {
        "defaultAction": "SCMP_ACT_ERRNO",
        "defaultErrnoRet": errno.EPERM,
        "archMap": [
            {"architecture": arch, "subArchitectures": list(subs)}
            for arch, (_, subs) in ARCHITECTURES.items()
        ],
        "syscalls": [
            {"names": allowed(known), "action": "SCMP_ACT_ALLOW"},
            {"names": list(FALL_BACK), "action": "SCMP_ACT_ERRNO", "errnoRet": errno.ENOSYS},
        ],
    }


def main() -> None:
    json.dump(profile(known_syscalls()), sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
