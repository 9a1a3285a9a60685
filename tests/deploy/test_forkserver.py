"""The fork server (`tether_client.server.forkserver`): every service `tether up` and the
suite start is forked from it, so a forked child must be what `python -m MODULE` would
be, and the server must survive what a starter can send it."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import sys
from pathlib import Path

import pytest

from tether_client.server import forking, forkserver
from tether_common.testing import until
from tether_common.topology import SECRET_ENV

# Reports what it became, then ends as PROBE_EXIT says (or waits for a signal).
PROBE = """
import json, os, sys, time
report = {
    "name": __name__,
    "argv": sys.argv,
    "environ": dict(os.environ),
    "proc_environ": open("/proc/self/environ", "rb").read().rstrip(b"\\0").decode(),
    "cmdline": open("/proc/self/cmdline", "rb").read().decode(),
    "fds": sorted(int(fd) for fd in os.listdir("/proc/self/fd")),
    "stdin": sys.stdin.read(),
    "session_leader": os.getsid(0) == os.getpid(),
    "cwd": os.getcwd(),
}
with open(os.environ["PROBE_OUT"], "w") as out:
    json.dump(report, out)
print("probe printed", flush=True)
if os.environ.get("PROBE_EXIT"):
    sys.exit(int(os.environ["PROBE_EXIT"]))
time.sleep(600)
"""


@pytest.fixture
def probe(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "probe_service.py").write_text(PROBE)
    return {
        "PYTHONPATH": str(tmp_path),
        "PROBE_OUT": str(tmp_path / "report.json"),
        "PATH": os.environ["PATH"],
    }


def alive(pid: int) -> bool:
    """Running (not gone, not a zombie waiting for whoever adopted it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat[stat.rindex(")") + 2] not in "ZX"


async def spawned(
    env: dict[str, str], log: Path, cwd: Path | None = None, module: str = "probe_service"
) -> forking.Forked:
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        return await forking.spawn(module, env, fd, str(cwd) if cwd else None)
    finally:
        os.close(fd)


async def test_a_forked_child_is_what_python_m_would_be(
    probe: dict[str, str], tmp_path: Path
) -> None:
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    env = probe | {"PROBE_EXIT": "3", "ONLY_MINE": "x=y z"}
    child = await spawned(env, tmp_path / "out.log", cwd)
    assert await child.wait() == 3
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["name"] == "__main__"
    assert report["argv"] == [str(tmp_path / "probe_service.py")]
    # Exactly the environment handed, in os.environ and as /proc shows it to others.
    assert report["environ"] == env
    shown = dict(item.split("=", 1) for item in report["proc_environ"].split("\0"))
    assert shown == env
    assert forkserver.ROOM_ENV not in report["proc_environ"]
    assert report["cmdline"] == f"{sys.executable} -m probe_service\0"
    assert report["fds"] == [0, 1, 2, 3]  # 3: the listing's own
    assert report["stdin"] == ""
    assert report["session_leader"] is True
    assert report["cwd"] == str(cwd)
    assert (tmp_path / "out.log").read_text() == "probe printed\n"


async def test_signals_exit_codes_and_waiters(probe: dict[str, str], tmp_path: Path) -> None:
    child = await spawned(probe, tmp_path / "out.log")
    await until((tmp_path / "report.json").exists, timeout=30, what="the probe's report")
    assert child.returncode is None, child.returncode
    waiters = [asyncio.create_task(child.wait()) for _ in range(3)]
    child.send_signal(signal.SIGTERM)
    assert await asyncio.gather(*waiters) == [-signal.SIGTERM] * 3
    assert await child.wait() == -signal.SIGTERM  # kept
    child.kill()  # an ended child: nothing, as subprocess.Popen does
    with pytest.raises(ProcessLookupError):
        os.kill(child.pid, 0)  # reaped by the server: no zombie left


async def test_the_fork_server_holds_no_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    secret = dict.fromkeys(SECRET_ENV, "s3cret") | {"NATS_PASSWORD_BRAIN": "pw"}
    base = forking.base_env(os.environ | secret | {"TETHER_BRAIN_API_KEY": "k"})
    assert not set(secret) & set(base)
    assert "TETHER_BRAIN_API_KEY" not in base  # a credential of one service
    assert base["PATH"] == os.environ["PATH"]
    running = forking.shared().process.pid
    environ = Path(f"/proc/{running}/environ").read_bytes().split(b"\0")
    names = {item.split(b"=", 1)[0].decode() for item in environ if b"=" in item}
    assert not names & set(SECRET_ENV)


async def test_a_bad_request_is_refused_and_the_server_goes_on(
    probe: dict[str, str], tmp_path: Path
) -> None:
    server = forking.shared()
    requests = [b"not json", b"[1]", b'{"module": ""}', b'{"module": "m", "cwd": 3}']
    for request in requests:
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        out, env = os.open(os.devnull, os.O_WRONLY), forking.handed_env({})
        socket.send_fds(server.control, [request], [out, theirs.fileno(), env])
        for fd in (out, env, theirs.detach()):
            os.close(fd)
        mine.setblocking(False)
        reply, fds = await forking.receive(mine)
        mine.close()
        assert reply.startswith(b"error "), (request, reply)
        assert fds == []
    socket.send_fds(server.control, [b"{}"], [])  # no descriptors at all
    # An environment that is not a JSON object of texts: the child says so and exits.
    for handed in (b"not json", b'{"A": 1}', b"[]"):
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        log = tmp_path / "refused.log"
        out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        env = os.memfd_create("bad-env")
        os.write(env, handed)
        os.lseek(env, 0, os.SEEK_SET)
        request = json.dumps({"module": "probe_service"}).encode()
        socket.send_fds(server.control, [request], [out, theirs.fileno(), env])
        for fd in (out, env, theirs.detach()):
            os.close(fd)
        mine.setblocking(False)
        reply, fds = await forking.receive(mine)
        child = forking.Forked(int(reply[4:]), fds[0], mine)
        assert await child.wait() == forkserver.EX_DATAERR, handed
        assert "not a JSON object of texts" in log.read_text(), handed
    child = await spawned(probe | {"PROBE_EXIT": "0"}, tmp_path / "out.log")
    assert await child.wait() == 0
    assert forking.shared() is server


async def test_no_child_inherits_another_s_environment(
    probe: dict[str, str], tmp_path: Path
) -> None:
    """A service's secrets never pass through the fork server's memory, which every later
    child inherits: the next child finds no trace of them anywhere in its own memory."""
    secret = os.urandom(24).hex()
    first = await spawned(probe | {"PROBE_EXIT": "0", "A_SECRET": secret}, tmp_path / "first.log")
    assert await first.wait() == 0
    scanner = tmp_path / "memory_scan.py"
    scanner.write_text(SCAN)
    half = len(secret) // 2
    second = await spawned(
        {
            "PATH": os.environ["PATH"],
            "PYTHONPATH": str(tmp_path),
            # In halves, each reversed: the scanner never holds the secret itself.
            "NEEDLE_A": secret[:half][::-1],
            "NEEDLE_B": secret[half:][::-1],
        },
        tmp_path / "second.log",
        module="memory_scan",
    )
    assert await second.wait() == 0, (tmp_path / "second.log").read_text()
    assert (tmp_path / "second.log").read_text() == "found 0\n"


# Counts the places in this process's readable memory that hold NEEDLE_A then NEEDLE_B
# (each given reversed), without ever making that whole text itself.
SCAN = """
import os
a, b = (os.environ[name][::-1].encode() for name in ("NEEDLE_A", "NEEDLE_B"))
found = 0
with open("/proc/self/maps") as maps, open("/proc/self/mem", "rb", 0) as mem:
    for line in maps:
        span, perms, *_ = line.split()
        if "r" not in perms or line.rstrip().endswith(("[vvar]", "[vsyscall]", "[vvar_vclock]")):
            continue
        start, end = (int(x, 16) for x in span.split("-"))
        try:
            mem.seek(start)
            chunk = mem.read(end - start)
        except (OSError, ValueError, OverflowError):
            continue
        at = chunk.find(a)
        while at != -1:
            found += chunk[at + len(a) : at + len(a) + len(b)] == b
            at = chunk.find(a, at + 1)
print("found", found)
"""


async def test_a_dead_fork_server_takes_its_children_and_is_started_again(
    probe: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a fork server of the test's own: the session's serves other tests' stacks."""
    old = forking.ForkServer([])
    monkeypatch.setattr(forking, "_shared", old)
    child = await spawned(probe, tmp_path / "out.log")
    await until((tmp_path / "report.json").exists, timeout=30, what="the probe's report")
    old.process.kill()
    assert await child.wait() == -signal.SIGKILL  # the kernel ends it with its parent
    await until(lambda: not alive(child.pid), timeout=30, what="the orphan's end")
    (tmp_path / "report.json").unlink()
    again = await spawned(probe | {"PROBE_EXIT": "0"}, tmp_path / "out.log")
    try:
        assert await again.wait() == 0
        assert forking.shared() is not old
    finally:
        forking.shared().close()
        old.control.close()


@pytest.mark.timeout(30)  # the mistake this catches blocked for ever
async def test_a_fork_server_dead_but_not_yet_seen_is_replaced_on_the_request(
    probe: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It died after `shared` last looked: the request meets a closed socket, waits for
    that end, and goes to a new server (not to wait on the new one for ever)."""
    old = forking.ForkServer([])
    monkeypatch.setattr(forking, "_shared", old)
    old.process.kill()
    # Dead, not yet reaped.
    await asyncio.to_thread(os.waitid, os.P_PID, old.process.pid, os.WEXITED | os.WNOWAIT)
    # Seen running once (by a `shared` that looked a moment before it died), then as it is.
    looks = iter([True])
    monkeypatch.setattr(
        forking.ForkServer,
        "running",
        property(lambda self: next(looks, None) or self.process.poll() is None),
    )
    try:
        async with asyncio.timeout(30):
            child = await spawned(probe | {"PROBE_EXIT": "0"}, tmp_path / "out.log")
            assert await child.wait() == 0
        assert forking.shared() is not old
    finally:
        forking.shared().close()
        old.control.close()


async def test_a_preloaded_package_runs_as_python_m_runs_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its `__main__` imported before the fork, then run in the child: once, as
    `__main__`, and without runpy's warning about a `__main__` already imported."""
    package = tmp_path / "probe_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "__main__.py").write_text("print('ran as', __name__, flush=True)\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    server = forking.ForkServer(["probe_pkg"])
    log = tmp_path / "out.log"
    fd = os.open(log, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        child = await server.spawn("probe_pkg", {"PATH": os.environ["PATH"]}, fd)
        assert await child.wait() == 0
    finally:
        os.close(fd)
        server.close()
    assert log.read_text() == "ran as __main__\n"
