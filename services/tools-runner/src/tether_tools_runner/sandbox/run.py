"""Running one shell command in the sandbox and collecting a bounded result.

The command runs as `bash -c` inside bubblewrap, under the seccomp filter, when the host
attests to them (else with rlimits only), in its own session so the whole group can be killed; stdin is closed;
stdout and stderr are merged and kept head-and-tail; the process tree never outlives
the call, whether it timed out or merely left a background child behind."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from .attest import Attestation, pids_cgroup_usable
from .limits import PidsCgroup, SandboxLimits, rlimits_setter
from .seccomp import program_fd

MAX_OUTPUT_CHARS = 20_000
_KEEP_BYTES = 4 * MAX_OUTPUT_CHARS  # enough bytes for the head and tail characters
_CREDENTIAL = re.compile(
    r"TOKEN|SECRET|PASSW|API_KEY|_KEY$|CREDENTIAL|COOKIE|SESSION|^TETHER_", re.IGNORECASE
)
_URL_WITH_PASSWORD = re.compile(r"://[^/\s:@]+:[^/\s@]+@")
# Readable system locations; everything else on the host (homes, /root, /work, /var,
# /srv, /mnt) is simply absent from the sandbox.
_SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt")
_MASKED_FILES = ("/etc/shadow", "/etc/gshadow", "/etc/shadow-", "/etc/gshadow-")
_MASKED_DIRS = ("/etc/ssh", "/etc/ssl/private")


@dataclass(frozen=True, slots=True)
class Outcome:
    exit_code: int | None
    output: str
    timed_out: bool
    duration_s: float


def scrubbed_env(source: dict[str, str], workspace: Path) -> dict[str, str]:
    """The environment minus anything that looks like a credential or runner config."""
    env = {
        name: value
        for name, value in source.items()
        if not _CREDENTIAL.search(name) and not _URL_WITH_PASSWORD.search(value)
    }
    env.update(HOME=str(workspace), TMPDIR="/tmp", TERM="dumb", PWD=str(workspace))
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    return env


def bwrap_args(bwrap: str, workspace: Path) -> list[str]:
    args = [bwrap]
    for path in _SYSTEM:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    for path in _MASKED_FILES:
        if os.path.exists(path):
            args += ["--ro-bind", "/dev/null", path]
    for path in _MASKED_DIRS:
        if os.path.isdir(path):
            args += ["--tmpfs", path, "--remount-ro", path]
    args += ["--tmpfs", "/tmp", "--proc", "/proc", "--dev", "/dev"]
    # Bound last, so a workspace under /tmp is not hidden by the private /tmp.
    real = os.path.realpath(workspace)
    args += ["--bind", real, real, "--chdir", real]
    args += ["--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts"]
    args += ["--hostname", "sandbox", "--new-session", "--die-with-parent"]
    if os.geteuid() == 0:
        args += ["--cap-drop", "ALL"]  # root inside keeps no capability to undo the mounts
    return [*args, "--"]


def cap_output(text: str, limit: int = MAX_OUTPUT_CHARS) -> str:
    """Keep the head and the tail of long output, with a marker saying what was cut."""
    if len(text) <= limit:
        return text
    half = limit // 2
    cut = len(text) - 2 * half
    return f"{text[:half]}\n[… {cut} characters omitted …]\n{text[-half:]}"


class _Collector:
    """Reads a stream to its end, keeping only a head and a tail of bounded size."""

    def __init__(self) -> None:
        self.head = bytearray()
        self.tail: deque[bytes] = deque()
        self.tail_size = 0
        self.dropped = 0

    def add(self, chunk: bytes) -> None:
        room = _KEEP_BYTES - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if not chunk:
            return
        self.tail.append(chunk)
        self.tail_size += len(chunk)
        while self.tail_size - len(self.tail[0]) >= _KEEP_BYTES:
            self.dropped += len(self.tail[0])
            self.tail_size -= len(self.tail.popleft())

    def text(self) -> str:
        head = self.head.decode(errors="replace")
        tail = b"".join(self.tail).decode(errors="replace")
        if self.dropped:
            return cap_output(f"{head}\n[… {self.dropped} bytes omitted …]\n{tail}")
        return cap_output(head + tail)


async def _drain(stream: asyncio.StreamReader, collector: _Collector) -> None:
    while chunk := await stream.read(65536):
        collector.add(chunk)


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


async def _finish(proc: asyncio.subprocess.Process, cgroup: PidsCgroup | None) -> None:
    """Kill whatever is left of the tree: the process group, then every cgroup member."""
    _kill_group(proc.pid)
    if cgroup is not None:
        await asyncio.to_thread(cgroup.kill_all)
    with contextlib.suppress(ProcessLookupError):
        proc.kill()
    await proc.wait()
    if cgroup is not None:
        for _ in range(20):
            cgroup.remove()
            if not cgroup.path.exists():
                break
            await asyncio.sleep(0.05)


async def _spawn(
    argv: list[str],
    workspace: Path,
    limits: SandboxLimits,
    cgroup: PidsCgroup | None,
    pass_fds: tuple[int, ...] = (),
) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        cwd=workspace,
        env=scrubbed_env(dict(os.environ), workspace),
        start_new_session=True,  # its own process group, killed as one
        preexec_fn=rlimits_setter(limits, cgroup),  # runs in the child before exec
        pass_fds=pass_fds,
    )


async def run_sandboxed(
    command: str,
    workspace: Path,
    *,
    attestation: Attestation,
    timeout_s: float,
    limits: SandboxLimits,
) -> Outcome:
    """Run `command` with `bash -c` in the strongest sandbox this host attested to."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    argv = ["/bin/bash", "--noprofile", "--norc", "-c", command]
    filter_fd = None
    if attestation.bwrap is not None:
        sandbox = bwrap_args(attestation.bwrap, workspace)
        if attestation.seccomp is not None:
            filter_fd = program_fd(attestation.seccomp)
            sandbox[-1:-1] = ["--seccomp", str(filter_fd)]  # before the closing "--"
        argv = [*sandbox, *argv]
    cgroup = PidsCgroup(limits.processes) if os.geteuid() == 0 and pids_cgroup_usable() else None
    try:
        fds = (filter_fd,) if filter_fd is not None else ()
        proc = await _spawn(argv, workspace, limits, cgroup, fds)
    except BaseException:
        if cgroup is not None:
            cgroup.remove()
        raise
    finally:
        if filter_fd is not None:
            os.close(filter_fd)  # bwrap has its own copy
    collector = _Collector()
    assert proc.stdout is not None
    reader = asyncio.ensure_future(_drain(proc.stdout, collector))
    timed_out = False
    try:
        async with asyncio.timeout(timeout_s):
            await proc.wait()
    except TimeoutError:
        timed_out = True
    finally:
        await _finish(proc, cgroup)
        # Background children are dead now, so the pipe reaches its end promptly.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(reader, 5)
    code = None if timed_out else proc.returncode
    return Outcome(code, collector.text(), timed_out, loop.time() - started)


__all__ = ["MAX_OUTPUT_CHARS", "Outcome", "bwrap_args", "cap_output", "run_sandboxed"]
