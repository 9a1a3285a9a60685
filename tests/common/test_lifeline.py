"""`tether_common.lifeline`: a helper started any of the ways Tether starts one dies with
its starter when the starter is SIGKILLed; started plainly, it outlives it (which is what
the mechanism is for). Also: a child whose starter is already gone ends at once, a pid
given to another process does not pass for the starter, and no service or library starts
a process any other way."""

from __future__ import annotations

import ast
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from proctree import Proc, descendants, kill_all, proc, survivors
from tether_common import lifeline

PARENT = Path(__file__).parent / "lifeline_parent.py"
ARMED = [
    "preexec",
    "preexec_as_another_user",
    "asyncio",
    "popen_from_a_thread_that_ends",
    "command",
    "arm",
    "forkserver_watched",
]


def start_parent(way: str) -> tuple[subprocess.Popen[bytes], list[Proc]]:
    """The parent started `way`'s helpers; returns it and its process tree then."""
    parent = subprocess.Popen(
        [sys.executable, str(PARENT), way], stdout=subprocess.PIPE, cwd=PARENT.parent
    )
    assert parent.stdout is not None
    assert parent.stdout.readline() == b"ready\n", f"{way}: the parent did not start"
    return parent, descendants(parent.pid)


def kill(parent: subprocess.Popen[bytes]) -> None:
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    assert parent.stdout is not None
    parent.stdout.close()


@pytest.fixture
def left() -> Iterator[list[Proc]]:
    """Processes a test saw; whatever of them still runs at the end is killed."""
    seen: list[Proc] = []
    yield seen
    kill_all(seen)


@pytest.mark.parametrize("way", ARMED)
def test_helpers_die_with_their_starter(way: str, left: list[Proc]) -> None:
    if way == "preexec_as_another_user" and os.geteuid() != 0:
        pytest.skip("changing user needs root")
    parent, tree = start_parent(way)
    left += tree
    assert tree, f"{way}: no helper started"
    time.sleep(0.3)  # a helper tied to a thread that has ended would be gone by now
    assert not [p for p in tree if not p.alive()], f"{way}: a helper died early"
    kill(parent)
    assert survivors(tree) == []


@pytest.mark.parametrize("way", ["plain", "forkserver_plain"])
def test_without_it_helpers_outlive_their_starter(way: str, left: list[Proc]) -> None:
    parent, tree = start_parent(way)
    left += tree
    kill(parent)
    assert survivors(tree, within_s=1.0) == tree
    if way == "forkserver_plain":  # the leak of issue 27: fork server, tracker, workers
        assert len(tree) == 4, tree


def test_a_child_whose_starter_is_gone_ends_at_once() -> None:
    # The pid it names is not its parent's: as if the starter had died before it armed.
    done = subprocess.run(
        [*lifeline.command(["sleep", "300"])[:4], "1", "/bin/sleep", "300"],
        timeout=30,
        check=False,
    )
    assert done.returncode == lifeline.ORPHANED


@pytest.mark.parametrize("reason", ["ended", "pid_reused"])
def test_a_watcher_whose_starter_is_gone_ends_at_once(reason: str) -> None:
    if reason == "ended":
        gone = subprocess.Popen(["true"])
        gone.wait()
        starter = f"lifeline.Starter({gone.pid}, 1)"
    else:  # the parent's pid, with another start time: a new process under an old pid
        starter = "lifeline.Starter(os.getppid(), 1)"
    code = f"import os, time; from tether_common import lifeline; lifeline.watch({starter}); "
    code += "time.sleep(300)"
    done = subprocess.run([sys.executable, "-c", code], timeout=30, check=False)
    assert done.returncode == -signal.SIGKILL


@pytest.mark.parametrize("pidfd", [True, False])
def test_wait_gone_returns_when_the_starter_ends(pidfd: bool) -> None:
    child = subprocess.Popen(["sleep", "0.5"])
    starter = proc(child.pid).process
    fd = os.pidfd_open(child.pid) if pidfd else None
    started = time.monotonic()
    try:
        lifeline.wait_gone(starter, fd)  # without a pidfd: while /proc still shows it
    finally:
        if fd is not None:
            os.close(fd)
    child.wait()
    assert 0.3 < time.monotonic() - started < 0.5 + lifeline.POLL_S + 1.0


def test_command_refuses_a_missing_program_as_spawning_would(tmp_path: Path) -> None:
    not_runnable = tmp_path / "script"
    not_runnable.write_text("#!/bin/sh\n")
    for program in ("/nonexistent/server", "no-such-program-here", str(not_runnable)):
        with pytest.raises(FileNotFoundError):
            lifeline.command([program, "--flag"])
    found = lifeline.command(["sleep", "1"])
    assert found[:5] == [sys.executable, "-I", "-m", "tether_common.lifeline", str(os.getpid())]
    assert Path(found[5]).name == "sleep"
    assert found[6:] == ["1"]


def test_start_time_reads_any_process_name(tmp_path: Path) -> None:
    odd = tmp_path / "a) b (c"
    odd.symlink_to("/bin/sleep")
    child = subprocess.Popen([str(odd), "5"])
    try:
        ticks = lifeline.started_at(child.pid)
        assert ticks is not None
        hz = os.sysconf("SC_CLK_TCK")
        assert abs(psutil.boot_time() + ticks / hz - psutil.Process(child.pid).create_time()) < 1
    finally:
        child.kill()
        child.wait()
    assert lifeline.started_at(child.pid) is None


# ---- every spawner uses it ------------------------------------------------------------

REPO = Path(__file__).resolve().parents[2]
# Calls that start a process which may outlive the call. (`subprocess.run` and the like
# wait for their child, so it ends while its starter lives.)
SPAWNS = {
    "Popen", "create_subprocess_exec", "create_subprocess_shell", "open_process",
    "ProcessPoolExecutor", "StdioServerParameters", "fork", "forkpty", "posix_spawn",
    "posix_spawnp", "spawnv", "spawnve", "spawnvp", "spawnvpe",
}  # fmt: skip
# Spawns armed by the child itself, with why.
SELF_ARMED = {
    ("services/output-store/src/tether_output_store/workers.py", "run_worker"): (
        "a query worker arms itself first thing (`workers.worker_spec`): no preexec_fn, "
        "so the spawn stays a vfork"
    ),
    ("libs/client/src/tether_client/server/forkserver.py", "fork_child"): (
        "a forked service arms itself first thing (`forkserver.become`), tied to the fork "
        "server, which `forking.ForkServer` starts through `lifeline.popen`"
    ),
}


def spawn_sites() -> dict[tuple[str, str], str]:
    """Every spawn call in the services and libraries: (file, function) -> its source."""
    found: dict[tuple[str, str], str] = {}
    for path in sorted([*REPO.glob("libs/*/src/**/*.py"), *REPO.glob("services/*/src/**/*.py")]):
        source = path.read_text()
        tree = ast.parse(source)
        for function in ast.walk(tree):
            if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(function):
                if isinstance(node, ast.Call) and _called(node) in SPAWNS:
                    segment = ast.get_source_segment(source, function) or ""
                    found[(str(path.relative_to(REPO)), function.name)] = segment
    return found


def _called(call: ast.Call) -> str | None:
    if isinstance(call.func, ast.Attribute):
        return call.func.attr
    return call.func.id if isinstance(call.func, ast.Name) else None


def test_every_process_a_service_starts_is_tied_to_it() -> None:
    sites = spawn_sites()
    # The scan sees the spawners it is about (it cannot pass by finding nothing).
    assert {name for _, name in sites} >= {
        "fork_child", "_spawn", "stdio_target", "_ensure_pool", "run_worker", "launch", "popen",
    }  # fmt: skip
    unarmed = [
        site
        for site, source in sites.items()
        if "lifeline." not in source
        and site not in SELF_ARMED
        and not site[0].endswith("tether_common/lifeline.py")
    ]
    assert unarmed == [], "start it through tether_common.lifeline (see its docstring)"
