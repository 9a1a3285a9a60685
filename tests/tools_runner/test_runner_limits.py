"""Sandbox limits hold per call, not per process, and say which one was hit: memory
(several processes together), processes, the private tmpfs, file size and CPU time each
fail the call with `sandbox_limit` naming the limit, and the runner answers afterwards.
The sandbox runs as the unprivileged sandbox user on the host: root-only host files stay
unreadable, and the real uid of its processes, seen from the host, is that user's."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest

from tether_common.messages.tools import ToolResult
from tether_common.testing import until
from tether_tools_runner.executor import Executor
from tether_tools_runner.sandbox import Attestation, SandboxLimits, run_sandboxed, sandbox_user

Call = Callable[..., Awaitable[ToolResult]]
SMALL = {"sandbox_memory_mb": 256, "sandbox_pids_max": 32, "sandbox_tmpfs_mb": 16}


@pytest.fixture
def limited(attestation: Attestation) -> Attestation:
    """Root runner, bwrap and cgroups: what these limits need (the tests run as root)."""
    wanted = {"memory_limit", "tmpfs_cap", "sandbox_uid"}
    missing = {name: attestation.problems.get(name) for name in wanted}
    if not attestation.at_least("bwrap") or any(
        attestation.features[n] == "missing" for n in wanted
    ):
        pytest.fail(
            f"the sandbox's limits are not attested here (apt-get install bubblewrap): {missing}"
        )
    return attestation


async def still_serving(executor: Executor, call: Call) -> None:
    result = await call(executor, "shell", {"command": "echo alive"})
    assert result.content == "exit code 0\nalive\n", result.content


def assert_limit(result: ToolResult, limit: str) -> None:
    assert result.error_code == "sandbox_limit", result.content
    assert f"sandbox_limit: {limit} limit exceeded" in result.content, result.content


HOLD = """
import os, sys, time
held = b"x" * (int(sys.argv[1]) << 20)
open(f"ready.{os.getpid()}", "w").close()
for _ in range(100):  # until all of them hold their memory at once (bounded)
    if sum(name.startswith("ready.") for name in os.listdir(".")) >= int(sys.argv[2]):
        break
    time.sleep(0.05)
"""


async def test_memory_is_limited_for_the_whole_call(
    limited: Attestation, make_executor: Callable[..., Executor], call: Call, workspace: Path
) -> None:
    (workspace / "hold.py").write_text(HOLD)
    executor = make_executor(sandbox_memory_mb=1024)
    alone = await call(executor, "shell", {"command": "python3 hold.py 700 1 && echo fits"})
    assert alone.ok, alone.content  # one 700 MB process fits
    assert alone.content.endswith("fits\n"), alone.content
    hold = "python3 hold.py 700 3"
    three = f"rm -f ready.*; {hold} & {hold} & {hold} & wait; echo done"
    assert_limit(await call(executor, "shell", {"command": three}), "memory")
    await still_serving(executor, call)


@pytest.mark.parametrize(
    "command",
    [
        "python3 -c 'b = b\"x\" * (600 << 20)'; echo after",
        "a=$(head -c 300000000 /dev/zero | tr '\\0' x); echo after",
        "for i in 1 2 3 4; do python3 -c 'import time; b = b\"x\" * (90 << 20); time.sleep(2)' & done; wait",
    ],
)
async def test_memory_variants(
    limited: Attestation, make_executor: Callable[..., Executor], call: Call, command: str
) -> None:
    executor = make_executor(**SMALL)
    assert_limit(await call(executor, "shell", {"command": command, "timeout_s": 20}), "memory")
    await still_serving(executor, call)


@pytest.mark.parametrize(
    "command",
    [
        "b() { b & b & }; b; sleep 30",
        "python3 -c 'import os, time\nfor _ in range(200):\n    os.fork() or time.sleep(5)'",
        "for i in $(seq 100); do sleep 5 & done; wait",
        "seq 100 | xargs -P 100 -I{} sleep 5",
    ],
)
async def test_process_count_is_limited_for_the_whole_call(
    limited: Attestation,
    make_executor: Callable[..., Executor],
    call: Call,
    workspace: Path,
    command: str,
) -> None:
    (workspace / "many.sh").write_text(command + "\n")
    executor = make_executor(**SMALL)
    result = await call(executor, "shell", {"command": "bash many.sh", "timeout_s": 3})
    assert_limit(result, "processes")
    await still_serving(executor, call)


@pytest.mark.parametrize(
    "command",
    [
        "head -c 40000000 /dev/zero > /tmp/fill; echo status $?",
        "head -c 40000000 /dev/zero > $HOME/fill; echo status $?",
        "head -c 40000000 /dev/zero > /dev/shm/fill; echo status $?",
        "for i in 1 2 3 4 5; do head -c 5000000 /dev/zero > /tmp/part$i; done; echo status $?",
        'python3 -c \'open("/tmp/x", "wb").write(bytes(40 << 20))\'',
    ],
)
async def test_the_private_tmpfs_is_capped(
    limited: Attestation, make_executor: Callable[..., Executor], call: Call, command: str
) -> None:
    executor = make_executor(**SMALL)
    result = await call(executor, "shell", {"command": command})
    assert_limit(result, "disk")
    assert "No space left on device" in result.content
    await still_serving(executor, call)


async def test_tmpfs_and_home_are_private_to_each_call(
    limited: Attestation, executor: Executor, call: Call, workspace: Path
) -> None:
    first = await call(
        executor, "shell", {"command": "echo x > /tmp/left; echo y > ~/left; echo $HOME"}
    )
    assert first.content == "exit code 0\n/tmp/home\n", first.content
    second = await call(executor, "shell", {"command": "ls -A /tmp /tmp/home /dev/shm"})
    assert second.ok, second.content
    assert "left" not in second.content
    assert not (workspace / "left").exists()


@pytest.mark.parametrize(
    "command",
    [
        "head -c 5000000 /dev/zero > big.bin; echo status $?",
        "head -c 5000000 /dev/zero > /tmp/big.bin; echo status $?",
        'python3 -c \'open("big.bin", "wb").write(bytes(5 << 20))\'',
        "dd if=/dev/zero of=big.bin bs=1M count=5",
    ],
)
async def test_file_size_is_capped(
    limited: Attestation,
    make_executor: Callable[..., Executor],
    call: Call,
    workspace: Path,
    command: str,
) -> None:
    executor = make_executor(sandbox_file_size_mb=2)
    assert_limit(await call(executor, "shell", {"command": command}), "file size")
    if (workspace / "big.bin").exists():
        assert (workspace / "big.bin").stat().st_size <= 2 * 1024 * 1024
    await still_serving(executor, call)


@pytest.mark.parametrize(
    "command",
    [
        "while :; do :; done",
        "python3 -c 'while True: pass'; echo after",
        "sh -c 'while :; do :; done'; echo after",
    ],
)
async def test_cpu_time_is_capped(limited: Attestation, workspace: Path, command: str) -> None:
    limits = SandboxLimits(cpu_s=1, memory_mb=512, file_size_mb=16, processes=64)
    outcome = await run_sandboxed(
        command, workspace, attestation=limited, timeout_s=30, limits=limits
    )
    assert not outcome.timed_out, outcome.output
    assert outcome.exceeded == "cpu time", outcome


async def test_a_call_within_its_limits_reports_none(limited: Attestation, workspace: Path) -> None:
    command = "head -c 1000000 /dev/zero > /tmp/a; python3 -c 'b = bytes(50 << 20)'; (: &); echo ok"
    outcome = await run_sandboxed(
        command, workspace, attestation=limited, timeout_s=30, limits=SandboxLimits()
    )
    assert (outcome.exceeded, outcome.output, outcome.exit_code) == (None, "ok\n", 0)


@pytest.fixture
def root_only_files(workspace: Path) -> Iterator[list[Path]]:
    """A root-only (0600) file in a host folder the sandbox sees (/etc), and one in the
    workspace itself (as a root-run runner could have left); removed afterwards."""
    secret = uuid.uuid4().hex
    made = [Path(f"/etc/tether-test-{secret[:8]}"), workspace / "root-only.txt"]
    try:
        for path in made:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            os.write(fd, f"SECRET-{secret}\n".encode())
            os.close(fd)
            os.chown(path, 0, 0)
        yield made
    finally:
        for path in made:
            path.unlink(missing_ok=True)


async def test_root_only_host_files_are_unreadable(
    limited: Attestation, executor: Executor, call: Call, root_only_files: list[Path]
) -> None:
    secret = root_only_files[0].read_text().strip()
    for path in root_only_files:
        shown = path.name if path.parent.name == "ws" else str(path)
        for reader in (
            f"cat {shown}",
            f"head -c 100 {shown}",
            f"dd if={shown} status=none",
            f"python3 -c 'print(open(\"{shown}\").read())'",
            f"cp {shown} copy.txt; cat copy.txt",
            f"ln {shown} hard.txt; cat hard.txt",
            f"tar cf - {shown} 2>&1 | strings",
            f"chmod 644 {shown}; cat {shown}",
        ):
            result = await call(executor, "shell", {"command": reader})
            assert secret not in result.content, (reader, result.content)
    assert root_only_files[0].stat().st_mode & 0o777 == 0o600


async def test_processes_run_as_the_sandbox_user_on_the_host(
    limited: Attestation, executor: Executor, call: Call, workspace: Path
) -> None:
    user = sandbox_user()
    assert user.uid != 0
    assert user.gid != 0
    marker = f"{uuid.uuid4().int % 1000 + 200}.125"
    task = asyncio.ensure_future(
        call(
            executor,
            "shell",
            {"command": f"sleep {marker} & sleep {marker}; id -u", "timeout_s": 2},
        )
    )
    seen = await until(
        lambda: [status for status in _statuses() if marker in status["cmdline"]],
        done=lambda found: len(found) >= 3,  # bwrap, and both sleeps
        timeout=10,
        every=0.02,
        what="the sandbox's processes",
    )
    await task
    assert any("bwrap" in status["cmdline"] for status in seen), seen
    for status in seen:
        assert status["Uid"].split() == [str(user.uid)] * 4, status
        assert status["Gid"].split() == [str(user.gid)] * 4, status
        assert status["Groups"].split() == [], status
    created = await call(executor, "shell", {"command": "touch made.txt; mkdir -p sub/dir"})
    assert created.ok
    for path in (workspace / "made.txt", workspace / "sub", workspace / "sub" / "dir"):
        assert (path.stat().st_uid, path.stat().st_gid) == (user.uid, user.gid)


def _statuses() -> Iterator[dict[str, str]]:
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            lines = Path(f"/proc/{entry}/status").read_text().splitlines()
        except OSError:
            continue
        fields = dict(line.split(":\t", 1) for line in lines if ":\t" in line)
        yield {"cmdline": cmdline, **fields}


async def test_without_bubblewrap_the_command_is_still_unprivileged_with_a_private_home(
    workspace: Path,
) -> None:
    rlimits_only = Attestation("rlimits", None, {}, {"bwrap": "bwrap is not installed"})
    command = "id -u; echo $HOME; ls -A $HOME; touch $HOME/x; cat /etc/shadow; echo end"
    outcome = await run_sandboxed(
        command, workspace, attestation=rlimits_only, timeout_s=10, limits=SandboxLimits()
    )
    uid, home, *rest = outcome.output.splitlines()
    assert uid == str(sandbox_user().uid)
    assert home.startswith("/tmp/tether-home-")
    assert rest[0].startswith("cat: /etc/shadow: Permission denied"), outcome.output
    assert not Path(home).exists()  # removed with the call


async def test_a_call_at_its_limits_does_not_starve_its_siblings(
    limited: Attestation, make_executor: Callable[..., Executor], call: Call, workspace: Path
) -> None:
    """Limits are per call: a fork bomb and a memory hog at their caps leave a sibling
    call (same sandbox uid) free to start processes and allocate."""
    (workspace / "bomb.sh").write_text("b() { b & b & }; b\nsleep 30\n")
    (workspace / "hog.py").write_text(HOLD)
    executor = make_executor(**SMALL)
    sibling = (
        "sleep 1; for i in $(seq 20); do (true); done; "
        "python3 -c 'b = b\"x\" * (100 << 20)'; echo sibling fine"
    )
    bomb, hog, fine = await asyncio.gather(
        call(executor, "shell", {"command": "bash bomb.sh", "timeout_s": 4}),
        call(executor, "shell", {"command": "python3 hog.py 400 1", "timeout_s": 4}),
        call(executor, "shell", {"command": sibling, "timeout_s": 30}),
    )
    assert_limit(bomb, "processes")
    assert_limit(hog, "memory")
    assert fine.content == "exit code 0\nsibling fine\n", fine.content
