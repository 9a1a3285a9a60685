"""`tether up`'s life as an operator lives it (issue 29, items 1 and 2), on the real binary
with fixed ports in a temporary home: a second `up` on the same home refused at once
naming the first; a fixed port that is taken, and a usual port that is taken, each one
line; a start whose log is free of stacks, library fields and migration chatter; Ctrl-C
at the terminal (SIGINT to the whole process group) with no traceback; and `up` started
again at once on the same ports, with a connection of the last one still in TIME_WAIT
and a stale `up.json` left in the home."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tether_client.server.embedded import free_port
from tether_client.server.supervisor import SERVICES
from tether_common.testing import until_sync

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

TETHER = Path(sys.executable).parent / "tether"
UP_DEADLINE_S = 300.0  # the services import slowly on a loaded two-core machine
READY = "Ctrl-C stops everything"
# What a person at the terminal must not see at the default log level.
NOISE = ("Traceback", 'File "', "KeyboardInterrupt", "CancelledError", "color_message", "alembic")


@dataclass
class Up:
    home: Path
    env: dict[str, str]
    log: Path
    proc: subprocess.Popen[bytes]

    def stop(self) -> int:
        """Ctrl-C as a terminal sends it: SIGINT to the whole foreground process group."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGINT)
        try:
            return self.proc.wait(120)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            raise

    def brain_url(self) -> str:
        found: str = json.loads((self.home / "up.json").read_text())["services"]["brain"]["url"]
        return found


def user_env(home: Path, ports: dict[str, int] | None) -> dict[str, str]:
    """A user's environment: a home, and each service's port when `ports` are given."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TETHER_", "OTEL_"))}
    env |= {"TETHER_HOME": str(home), "COLUMNS": "100"}
    if ports is not None:
        env |= {spec.port_env: str(ports[spec.name]) for spec in SERVICES}
    return env


def start_up(home: Path, env: dict[str, str], log: Path) -> Up:
    with log.open("wb") as sink:
        proc = subprocess.Popen(
            [str(TETHER), "up", "--log-format", "text"],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # a process group of its own, as a terminal's job is
        )
    up = Up(home, env, log, proc)
    try:
        until_sync(
            lambda: READY in log.read_text() or proc.poll() is not None,
            timeout=UP_DEADLINE_S,
            every=0.2,
            what="up",
        )
        assert proc.poll() is None, log.read_text()[-6000:]
    except BaseException:
        up.stop()
        raise
    return up


def refused(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`tether up` expected to stop before starting anything."""
    return subprocess.run(
        [str(TETHER), "up", "--log-format", "text"],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def new_home() -> Path:
    # Not under pytest's private basetemp: PostgreSQL runs as another user under root.
    return Path(tempfile.mkdtemp(prefix="tether-up-home-"))


@pytest.fixture(scope="module")
def first() -> Iterator[Up]:
    assert TETHER.exists(), f"{TETHER} is missing: the tether-client entry point is not installed"
    home = new_home()
    ports = {spec.name: free_port() for spec in SERVICES}
    up = start_up(home, user_env(home, ports), home / "up.log")
    try:
        yield up
    finally:
        up.stop()
        shutil.rmtree(home, ignore_errors=True)


def test_a_second_up_on_the_same_home_is_refused_before_starting_anything(first: Up) -> None:
    nats_log = first.home / "nats" / "nats-server.log"
    before = nats_log.stat().st_size
    second = refused(first.env)
    assert second.returncode == 6, second.stderr
    [line] = second.stderr.strip().splitlines()
    brain = first.brain_url()
    assert f"already running for {first.home} (pid {first.proc.pid}: API {brain}," in line
    assert f"console {brain}/console" in line
    assert "starting" not in second.stdout  # neither NATS nor PostgreSQL
    assert nats_log.stat().st_size == before
    assert first.proc.poll() is None
    assert httpx.get(f"{brain}/readyz", timeout=10).status_code == 200


def test_a_fixed_port_that_is_taken_is_one_line(first: Up) -> None:
    home = new_home()
    try:
        brain_port = int(first.brain_url().rsplit(":", 1)[1])
        ports = {spec.name: 0 for spec in SERVICES} | {"brain": brain_port}
        done = refused(user_env(home, ports))
        assert done.returncode == 2, done.stderr
        [line] = done.stderr.strip().splitlines()
        assert line.startswith(
            f"error: port {brain_port} (TETHER_BRAIN_HTTP_PORT) is in use by pid "
        )
        assert "set TETHER_BRAIN_HTTP_PORT to another port" in line
        assert not (home / "nats").exists()  # nothing started
    finally:
        shutil.rmtree(home, ignore_errors=True)


def test_a_usual_port_that_is_taken_is_refused_not_moved() -> None:
    """No port variable for the brain and its usual port taken: one line naming the port
    and the variable to set (moving it would break a bookmarked console address)."""
    home = new_home()
    holder = socket.socket()
    try:
        try:
            holder.bind(("127.0.0.1", 8700))
            holder.listen(1)
        except OSError:
            pass  # something here holds it already: as good
        # The brain's variable unset, the others any port (other usual ports may be
        # taken on a shared machine: each would be refused the same way).
        env = user_env(home, {spec.name: 0 for spec in SERVICES})
        done = refused({k: v for k, v in env.items() if k != "TETHER_BRAIN_HTTP_PORT"})
        assert done.returncode == 2, done.stderr
        [line] = done.stderr.strip().splitlines()
        assert "port 8700, the brain's usual port, is in use" in line
        assert "set TETHER_BRAIN_HTTP_PORT to another port (0: any free one)" in line
    finally:
        holder.close()
        shutil.rmtree(home, ignore_errors=True)


def time_waits(port: int) -> int:
    """Connections on local `port` in TIME_WAIT."""
    found = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            found += int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == "06"
    return found


STOPS: list[str] = []  # what each Ctrl-C below printed, for the test after


def test_start_is_quiet_and_up_starts_again_at_once_after_ctrl_c(first: Up) -> None:
    started = first.log.read_text()
    for noise in NOISE:
        assert noise not in started, (noise, started[-4000:])
    brain = first.brain_url()
    port = int(brain.rsplit(":", 1)[1])
    with httpx.Client(base_url=brain, timeout=10) as kept:  # a keep-alive connection
        assert kept.get("/readyz").status_code == 200
        assert first.stop() == 0
    STOPS.append(first.log.read_text()[len(started) :])
    assert not (first.home / "up.json").exists()
    assert time_waits(port) > 0, "the stopped brain left no connection in TIME_WAIT"

    # A stale state naming a live process that is not `tether up` blocks nothing.
    (first.home / "up.json").write_text(json.dumps({"pid": os.getpid(), "services": {}}))
    again = start_up(first.home, first.env, first.home / "again.log")
    try:
        assert again.brain_url() == brain
        assert httpx.get(f"{brain}/readyz", timeout=10).status_code == 200
        for noise in NOISE:
            assert noise not in again.log.read_text(), noise
        ready = again.log.read_text()
    finally:
        assert again.stop() == 0
    STOPS.append(again.log.read_text()[len(ready) :])


def test_ctrl_c_at_the_terminal_prints_no_traceback() -> None:
    assert len(STOPS) == 2, "the test before did not get as far"
    for stopped in STOPS:
        for noise in (*NOISE, "WARNING"):  # each service stopped in order: nothing lost
            assert noise not in stopped, (noise, stopped[-4000:])
