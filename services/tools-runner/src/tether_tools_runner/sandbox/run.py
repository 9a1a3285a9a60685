"""Running one shell command in the sandbox and collecting a bounded result.

The command runs as `bash -c` inside bubblewrap, under the seccomp filter, when the host
attests to them (else with rlimits only), in its own session so the whole group can be
killed; stdin is closed; stdout and stderr are merged and kept head-and-tail; the process
tree never outlives the call, whether it timed out or merely left a background child
behind, nor the runner, however it dies: bubblewrap is armed to die with it
(`tether_common.lifeline`), and takes its pid namespace along (`--die-with-parent`).
Without bubblewrap only the shell is armed: a background child it left would outlive a
runner killed during the call. When the runner is root, the call has its own memory
and pids cgroups and its own size-capped tmpfs, and bubblewrap itself runs as the
unprivileged sandbox user; what the call exceeded (memory, processes, disk, file size,
cpu time) is read back from the kernel's counters afterwards and reported in
`Outcome.exceeded`."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import signal
import tempfile
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tether_common import lifeline

from .attest import Attestation, supports
from .cgroups import CallGroup, hierarchy
from .gitconfig import PINS, RepoView, pin_env, repo_view
from .identity import SandboxUser
from .limits import STAGE, STAGED_SHM, STAGED_TMP, STAGED_WORKSPACE, SandboxLimits, child_setup
from .seccomp import program_fd

MAX_OUTPUT_CHARS = 20_000
_KEEP_BYTES = 4 * MAX_OUTPUT_CHARS  # enough bytes for the head and tail characters
# HOME lives in the call's private tmpfs: nothing the model wrote into the workspace is
# read as a user's config (`.gitconfig`, `.bashrc`, `.config/...`), and it vanishes.
SANDBOX_HOME = "/tmp/home"
SANDBOX_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Readable system locations; everything else on the host (homes, /root, /work, /var,
# /srv, /mnt) is simply absent from the sandbox.
_SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt")
_MASKED_FILES = ("/etc/shadow", "/etc/gshadow", "/etc/shadow-", "/etc/gshadow-")
_MASKED_DIRS = ("/etc/ssh", "/etc/ssl/private")
_FILE_SIZE = re.compile(r"File size limit exceeded|File too large")
_FULL_BYTES = 64 * 1024  # a tmpfs with less free than this ran out of room


@dataclass(frozen=True, slots=True)
class Outcome:
    exit_code: int | None
    output: str
    timed_out: bool
    duration_s: float
    # The sandbox limit the call ran into: memory, processes, disk, file size, cpu time.
    exceeded: str | None = None


def describe(limit: str, limits: SandboxLimits) -> str:
    """One sentence on what `limit` is, for the model reading the failure."""
    return {
        "memory": f"its processes together used more than {limits.memory_mb} MB of memory",
        "processes": f"it tried to run more than {limits.processes} processes at once",
        "disk": f"it filled the sandbox's private /tmp ({limits.tmpfs_mb} MB)",
        "file size": f"a file it wrote reached the {limits.file_size_mb} MB file size cap",
        "cpu time": f"a process used more than {limits.cpu_s} s of CPU time",
    }.get(limit, limit)


def sandbox_env(
    workspace: Path, home: str = SANDBOX_HOME, *, git_sanitised: bool = False
) -> dict[str, str]:
    """The whole environment of a sandboxed command, built from names, never copied from
    the runner's: nothing of the host (tokens, connection strings, webhook URLs, proxy
    settings, loader or shell hooks) reaches the command. HOME and the XDG folders in the
    call's private tmpfs (or a fresh private folder, without bubblewrap); a fixed
    locale and terminal; git given no configuration the command can write."""
    return {
        # Fixed, never the runner's: a read-only command is only as safe as the program
        # its name finds, and nothing on this PATH is writable from the sandbox.
        "PATH": SANDBOX_PATH,
        "HOME": home,
        "XDG_CONFIG_HOME": f"{home}/.config",
        "XDG_CACHE_HOME": f"{home}/.cache",
        "XDG_DATA_HOME": f"{home}/.local/share",
        "XDG_STATE_HOME": f"{home}/.local/state",
        "TMPDIR": "/tmp",
        "LANG": "C.UTF-8",
        "TERM": "dumb",
        "PWD": str(workspace),
        "PAGER": "cat",
        **pin_env(sanitised=git_sanitised),
    }


def bwrap_args(
    bwrap: str,
    workspace: Path,
    *,
    user: SandboxUser,
    limits: SandboxLimits,
    staged: bool,
    block_fd: int | None = None,
    binds: list[str] | None = None,
) -> list[str]:
    """bubblewrap's arguments. `staged`: /tmp, /dev/shm and the workspace come from the
    child's staging mounts (one capped tmpfs for both), else bwrap makes capped tmpfs."""
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
    args += ["--proc", "/proc", "--dev", "/dev"]
    size = str(limits.tmpfs_mb * 1024 * 1024)
    if staged:
        args += ["--bind", str(STAGED_TMP), "/tmp", "--bind", str(STAGED_SHM), "/dev/shm"]
    else:
        cap = ["--size", size] if supports(bwrap, "--size") else []  # else attested missing
        args += [*cap, "--tmpfs", "/tmp", *cap, "--tmpfs", "/dev/shm"]
    args += ["--perms", "0700", "--dir", SANDBOX_HOME]
    # Bound last, so a workspace under /tmp is not hidden by the private /tmp.
    real = os.path.realpath(workspace)
    source = str(STAGED_WORKSPACE) if staged else real
    args += ["--bind", source, real, "--chdir", real]
    args += binds or []  # over the workspace: the sanitised git config
    # bwrap's own root and /dev are tmpfs without a size: read-only, so nothing fills them.
    args += ["--remount-ro", "/dev", "--remount-ro", "/"]
    args += ["--unshare-user", "--uid", str(user.uid), "--gid", str(user.gid)]
    if supports(bwrap, "--disable-userns"):  # a second wall beside the syscall filter
        args += ["--disable-userns"]
    args += ["--unshare-net", "--unshare-pid", "--unshare-ipc"]
    args += ["--unshare-uts", "--hostname", "sandbox", "--new-session", "--die-with-parent"]
    args += ["--cap-drop", "ALL"]
    if block_fd is not None:
        args += ["--block-fd", str(block_fd)]
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


@dataclass(slots=True)
class _Call:
    """What one call holds on the host: its cgroups and a handle on its private tmpfs
    (which keeps the tmpfs readable after the sandbox is gone, to see if it was full)."""

    group: CallGroup | None = None
    tmp_fd: int | None = None
    # Without bubblewrap there is no private /tmp: a fresh folder stands in for HOME
    # (never a shared path another local user could have filled first).
    home: str | None = None
    # The sanitised git config bound over the workspace's for this call, if any.
    view: RepoView | None = None

    async def finish(self, proc: asyncio.subprocess.Process | None) -> None:
        """Kill whatever is left of the tree: the process group, then every cgroup
        member; then remove the groups."""
        if proc is not None:
            _kill_group(proc.pid)
        if self.group is not None:
            await asyncio.to_thread(self.group.kill_all)
        if proc is not None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()

    async def close(self) -> None:
        if self.view is not None:
            self.view.close()
            self.view = None
        if self.home is not None:
            await asyncio.to_thread(shutil.rmtree, self.home, True)
            self.home = None
        if self.tmp_fd is not None:
            os.close(self.tmp_fd)
            self.tmp_fd = None
        if self.group is not None:
            for _ in range(20):
                if self.group.remove():
                    break
                await asyncio.sleep(0.05)

    def exceeded(self, exit_code: int | None, output: str) -> str | None:
        """Which limit the call ran into, from the kernel's counters where there are some."""
        if self.group is not None and self.group.oom_kills():
            return "memory"
        if self.group is not None and self.group.fork_refusals():
            return "processes"
        if self.tmp_fd is not None:
            room = os.fstatvfs(self.tmp_fd)
            if room.f_bavail * room.f_frsize < _FULL_BYTES:
                return "disk"
        # No counter exists for these two; the signal shows in the exit code (a single
        # command) or in bash's report on a job it waited for. A command can fake them,
        # but only to make its own call fail.
        # (Python and others ignore SIGXFSZ and print EFBIG's text instead.)
        if exit_code == 128 + signal.SIGXFSZ or _FILE_SIZE.search(output):
            return "file size"
        if exit_code == 128 + signal.SIGXCPU or "CPU time limit exceeded" in output:
            return "cpu time"
        return None


async def _spawn(
    argv: list[str],
    workspace: Path,
    setup: Callable[[], None],
    pass_fds: tuple[int, ...],
    env: dict[str, str],
) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        cwd=workspace,
        env=env,
        start_new_session=True,  # its own process group, killed as one
        # Runs in the child before exec; armed last (the user change would clear it), so
        # bwrap dies with the runner, and `--die-with-parent` takes the sandbox with it.
        preexec_fn=lifeline.preexec(setup),
        pass_fds=pass_fds,
    )


def _open_staged_tmp(pid: int) -> int | None:
    """The call's tmpfs, reached through the (blocked) bwrap's view of its mounts."""
    with contextlib.suppress(OSError):
        return os.open(f"/proc/{pid}/root{STAGED_TMP}", os.O_RDONLY | os.O_DIRECTORY)
    return None


async def _start(
    command: str,
    workspace: Path,
    attestation: Attestation,
    limits: SandboxLimits,
    call: _Call,
    sanitise_git: bool,
) -> asyncio.subprocess.Process:
    argv = ["/bin/bash", "--noprofile", "--norc", "-c", command]
    user = attestation.user
    # Staging mounts need root; without them bwrap makes the capped tmpfs itself.
    staged = attestation.bwrap is not None and os.geteuid() == 0 and user.drops
    filter_fd = block_read = block_write = None
    fds: list[int] = []
    if staged:
        block_read, block_write = os.pipe()
        fds.append(block_read)
    if attestation.bwrap is not None:
        # Only git reads a repository's config, and a command allowed without asking
        # names every program it runs (a computed or disguised name asks).
        if sanitise_git and "git" in command.lower():
            call.view = await asyncio.to_thread(repo_view, workspace)
        sandbox = bwrap_args(
            attestation.bwrap, workspace, user=user, limits=limits, staged=staged,
            block_fd=block_read, binds=call.view.bwrap_args if call.view else None,
        )  # fmt: skip
        if attestation.seccomp is not None:
            filter_fd = program_fd(attestation.seccomp)
            fds.append(filter_fd)
            sandbox[-1:-1] = ["--seccomp", str(filter_fd)]  # before the closing "--"
        argv = [*sandbox, *argv]
    found = hierarchy()
    if found is not None:
        call.group = CallGroup(found, limits.memory_mb, limits.processes)
    real = os.path.realpath(workspace) if staged else None
    setup = child_setup(limits, call.group, user, real)
    try:
        if staged:
            STAGE.mkdir(mode=0o755, exist_ok=True)
        if attestation.bwrap is None:
            call.home = tempfile.mkdtemp(prefix="tether-home-")
            if user.drops:
                os.chown(call.home, user.uid, user.gid)
        sanitised = call.view is not None and bool(call.view.bwrap_args)
        env = sandbox_env(workspace, call.home or SANDBOX_HOME, git_sanitised=sanitised)
        env.update(call.view.env if call.view else {})
        proc = await _spawn(argv, workspace, setup, tuple(fds), env)
        if block_write is not None:
            # bwrap waits for this byte before running anything: the tmpfs is surely
            # there to be opened, and the command cannot have filled and left it yet.
            call.tmp_fd = _open_staged_tmp(proc.pid)
            with contextlib.suppress(OSError):
                os.write(block_write, b"go")
    finally:
        for fd in (*fds, block_write):
            if fd is not None:
                os.close(fd)  # bwrap has its own copies
    return proc


async def run_sandboxed(
    command: str,
    workspace: Path,
    *,
    attestation: Attestation,
    timeout_s: float,
    limits: SandboxLimits,
    sanitise_git: bool = True,
) -> Outcome:
    """Run `command` with `bash -c` in the strongest sandbox this host attested to.

    `sanitise_git`: git reads a sanitised copy of the workspace repository's config
    (`gitconfig.repo_view`; needs bubblewrap): for commands no operator looked at."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    call = _Call()
    try:
        proc = await _start(command, workspace, attestation, limits, call, sanitise_git)
    except BaseException:
        await call.close()
        raise
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
        await call.finish(proc)
        # Background children are dead now, so the pipe reaches its end promptly.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(reader, 5)
    try:
        code = None if timed_out else proc.returncode
        output = collector.text()
        exceeded = call.exceeded(code, output)
    finally:
        await call.close()
    return Outcome(code, output, timed_out, loop.time() - started, exceeded)


__all__ = [
    "MAX_OUTPUT_CHARS",
    "PINS",
    "SANDBOX_HOME",
    "Outcome",
    "bwrap_args",
    "cap_output",
    "describe",
    "run_sandboxed",
    "sandbox_env",
]
