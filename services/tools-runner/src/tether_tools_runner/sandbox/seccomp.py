"""The syscall filter bubblewrap installs just before the command runs.

A shell command has no business loading kernel modules, mounting, making namespaces,
tracing or reading other processes' memory, using keyrings, BPF or io_uring, setting the
clock, or rebooting: those calls fail with EPERM, and so does `clone` asking for a new
user namespace; everything else is allowed. The list follows the default seccomp profile
of container runtimes (Docker's), without its NUMA and `personality` rules, which build
tools use. The filter is compiled once with libseccomp (through pyseccomp, a ctypes
binding, so nothing is built here) and handed to bwrap through a memfd on each run.
"""

from __future__ import annotations

import errno
import functools
import logging
import os
import tempfile

from tether_common.errors import ConfigError

log = logging.getLogger(__name__)

DENIED: tuple[str, ...] = (
    # kernel modules and kernels
    "init_module", "finit_module", "delete_module", "create_module", "kexec_load",
    "kexec_file_load",
    # mounts and namespaces (bwrap made the sandbox's own before this applies)
    "mount", "umount", "umount2", "pivot_root", "move_mount", "open_tree", "fsopen",
    "fsconfig", "fsmount", "fspick", "mount_setattr", "unshare", "setns",
    # other processes
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
    # kernel facilities with a history of local privilege escalations
    "bpf", "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter",
    "io_uring_register", "add_key", "request_key", "keyctl", "open_by_handle_at",
    "name_to_handle_at", "lookup_dcookie",
    # the machine itself
    "reboot", "swapon", "swapoff", "acct", "quotactl", "settimeofday", "clock_settime",
    "clock_adjtime", "adjtimex", "iopl", "ioperm", "syslog", "vhangup", "uselib", "ustat",
    "sysfs", "nfsservctl",
)  # fmt: skip
CLONE_NEWUSER = 0x10000000
UNAVAILABLE = "seccomp_unavailable"


@functools.cache
def program() -> bytes:
    """The compiled BPF program; a `ConfigError` says why there is none on this host."""
    try:
        import pyseccomp as sc
    except (ImportError, OSError) as exc:  # OSError: libseccomp.so itself is missing
        raise ConfigError(f"libseccomp is not usable: {exc}", code=UNAVAILABLE) from exc
    try:
        refused = sc.SyscallFilter(defaction=sc.ALLOW)
        for name in DENIED:
            try:
                refused.add_rule(sc.ERRNO(errno.EPERM), name)
            except OSError:  # EINVAL: a name this libseccomp does not know
                log.debug("no syscall %s known here", name)
        refused.add_rule(
            sc.ERRNO(errno.EPERM), "clone", sc.Arg(0, sc.MASKED_EQ, CLONE_NEWUSER, CLONE_NEWUSER)
        )
        # clone3 hides its flags in memory a filter cannot read; ENOSYS sends libc back
        # to `clone`, whose flags the rule above sees.
        refused.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
        with tempfile.TemporaryFile() as out:
            refused.export_bpf(out)
            out.seek(0)
            return out.read()
    except (OSError, RuntimeError, ValueError) as exc:
        raise ConfigError(
            f"libseccomp could not build the filter: {exc}", code=UNAVAILABLE
        ) from exc


def program_fd(compiled: bytes) -> int:
    """A readable descriptor holding `compiled`, for `bwrap --seccomp FD` (the caller
    closes it once bwrap has started)."""
    fd = os.memfd_create("tether-seccomp", 0)
    os.write(fd, compiled)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


__all__ = ["DENIED", "program", "program_fd"]
