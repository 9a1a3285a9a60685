"""The starter's side of the fork server (`forkserver`): starts it, asks it for children,
and hands back each child as a process handle the supervisor and the tests use as they
used asyncio's (`pid`, `returncode`, `wait`, `send_signal`, `kill`, `terminate`).

One fork server a process, started at the first service it starts and kept while the
process lives (a test session's stacks all fork from it; `tether up`'s ends with it); one
that died is started again at the next request.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence

from tether_client.server import forkserver
from tether_common import lifeline
from tether_common.errors import ConfigError
from tether_common.topology import SERVICES, may_see

_REPLY_BYTES = 256


class Forked:
    """A child of the fork server, told of its end by the server (its parent)."""

    def __init__(self, pid: int, pidfd: int, channel: socket.socket) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._pidfd = pidfd
        self._channel = channel
        self._ended: asyncio.Task[int] | None = None

    async def wait(self) -> int:
        if self.returncode is not None:
            return self.returncode
        if self._ended is None or self._ended.get_loop() is not asyncio.get_running_loop():
            self._ended = asyncio.ensure_future(self._await_end())
        return await asyncio.shield(self._ended)

    async def _await_end(self) -> int:
        message, _ = await receive(self._channel)
        # No word from the server: it died, and the kernel killed the child with it.
        code = int(message[5:]) if message.startswith(b"exit ") else -signal.SIGKILL
        self.returncode = code
        self._channel.close()
        os.close(self._pidfd)
        return code

    def send_signal(self, sig: int) -> None:
        """As `subprocess.Popen.send_signal`: nothing, once the child has ended."""
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(self._pidfd, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class ForkServer:
    """A running fork server and the control socket to it."""

    def __init__(self, modules: Sequence[str]) -> None:
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.process = lifeline.popen(
                [sys.executable, "-m", forkserver.__name__, str(theirs.fileno()), *modules],
                pass_fds=(theirs.fileno(),),
                env=base_env(os.environ),
                stdin=subprocess.DEVNULL,
                # Its own session: a terminal's Ctrl-C reaches the supervisor, which stops
                # each service in order, not the fork server's children all at once.
                start_new_session=True,
            )
        finally:
            theirs.close()
        self.control = mine

    @property
    def running(self) -> bool:
        return self.process.poll() is None

    async def spawn(
        self, module: str, env: Mapping[str, str], output: int, cwd: str | None = None
    ) -> Forked:
        """Fork `python -m module` with exactly `env`, its stdout and stderr on `output`."""
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        request = json.dumps({"module": module, "cwd": cwd}).encode()
        environment = handed_env(env)
        try:
            socket.send_fds(self.control, [request], [output, theirs.fileno(), environment])
        except OSError:
            mine.close()
            raise
        finally:
            theirs.close()
            os.close(environment)
        mine.setblocking(False)
        message, fds = await receive(mine)
        if not message.startswith(b"pid ") or len(fds) != 1:
            mine.close()
            for fd in fds:
                os.close(fd)
            said = message.decode(errors="replace") or "the fork server ended"
            raise ConfigError(f"could not start {module}: {said}")
        return Forked(int(message[4:]), fds[0], mine)

    def close(self) -> None:
        self.control.close()  # the server ends at end of file, its children with it
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def handed_env(env: Mapping[str, str]) -> int:
    """A memfd holding `env` as JSON, for the child alone to read (the fork server passes
    it on unread, so its memory, which later children inherit, never holds a secret)."""
    fd = os.memfd_create("tether-service-env", os.MFD_CLOEXEC)
    data = json.dumps(dict(env)).encode()
    written = 0
    while written < len(data):
        written += os.write(fd, data[written:])
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def base_env(env: Mapping[str, str]) -> dict[str, str]:
    """The fork server's own environment: what every service may see, and the room its
    children's environments are shown in."""
    kept = {k: v for k, v in env.items() if all(may_see(s.name, k) for s in SERVICES)}
    return kept | {forkserver.ROOM_ENV: "." * forkserver.ROOM_BYTES}


async def receive(sock: socket.socket) -> tuple[bytes, list[int]]:
    """One message and its descriptors from a non-blocking socket, on the running loop."""
    loop = asyncio.get_running_loop()
    while True:
        try:
            message, fds, _, _ = socket.recv_fds(sock, _REPLY_BYTES, 1)
            return message, fds
        except BlockingIOError:
            ready: asyncio.Future[None] = loop.create_future()
            loop.add_reader(sock, _settle, ready)
            try:
                await ready
            finally:
                loop.remove_reader(sock)


def _settle(ready: asyncio.Future[None]) -> None:
    if not ready.done():
        ready.set_result(None)


_shared: ForkServer | None = None
_lock = threading.Lock()


@atexit.register
def _close_shared() -> None:
    if _shared is not None:
        _shared.close()


def shared() -> ForkServer:
    """This process's fork server, started (again) when there is none running."""
    global _shared
    with _lock:
        if _shared is None or not _shared.running:
            if _shared is not None:
                _shared.control.close()
            _shared = ForkServer([spec.module for spec in SERVICES])
        return _shared


async def spawn(module: str, env: Mapping[str, str], output: int, cwd: str | None = None) -> Forked:
    """`ForkServer.spawn` on this process's fork server; one that has just died (its end
    not yet seen when the request went) is started again and asked once more."""
    server = shared()
    try:
        return await server.spawn(module, env, output, cwd)
    except (BrokenPipeError, ConnectionResetError):
        server.process.wait()  # ending: once its end is seen, `shared` starts another
        return await shared().spawn(module, env, output, cwd)
