"""The fork server: one interpreter that has imported every service, forked once for each
service a supervisor starts (`tether up`'s, the suite's stacks, the benchmarks').

Why: a service's start was mostly its imports, about 1.2 s of CPU each and 6 s for the
five, while the five together import in 1.5 s (they share most of their libraries). A
service forked from an interpreter that holds them starts with its imports done, and the
pages they fill stay shared between the services until written (the heap is frozen out
of the cyclic collector's sight first, so collections do not write them). The suite
starts about 350 services; `tether up` five, and each restart. Android's zygote,
gunicorn's `--preload` and multiprocessing's forkserver do the same.

What a forked service gets is what `python -m MODULE` would give it: a session of its own,
stdout and stderr on the descriptor it was handed and stdin from /dev/null, no other
descriptor, exactly the environment it was handed (`os.environ`, its `PYTHONPATH` first
on `sys.path`, and what /proc/PID/environ and /proc/PID/cmdline show: `_show`), `sys.argv`
and `__main__` as `-m` sets them, and `PR_SET_PDEATHSIG`: it dies with the fork server,
which dies with its starter. What it shares with its siblings is what importing left in
memory (nothing secret: the fork server's environment holds only what every service may
see, no module reads the environment at import, and each child's environment passes the
server unread), the hash seed, and the interpreter's
options (`PYTHON*` variables act when the fork server starts, not each service).

The protocol, on SOCK_SEQPACKET socket pairs (a message a datagram, descriptors beside):
- starter → server, on the control socket: JSON `{"module", "cwd"}` with three
  descriptors: the child's output, one end of a socket pair of this child's own, and a
  memfd holding the child's environment as JSON. The server never reads that one: only
  the child does, so no service's secrets pass through the server's memory, which every
  later child inherits;
- server → starter, on that pair: `pid N` with the child's pidfd (signals sent through it
  cannot reach a later process given the same pid), then `exit CODE` (negative: killed by
  that signal) once reaped. End of file without it: the fork server died, and the child
  with it. End of file on the control socket: the starter is gone, and so is the server.
  A child handed an environment that is not a JSON object of texts says so on its output
  and exits with EX_DATAERR (65).

`python -m tether_client.server.forkserver FD MODULE...`: FD is the control socket; each
MODULE's `__main__` is imported before the first fork.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import importlib
import json
import os
import runpy
import selectors
import signal
import socket
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tether_common import lifeline

# Space the fork server's environment block keeps for a child's (`_show`), as one
# variable of the fork server's own: the kernel shows a process the block it was started
# with, so a child can only be shown an environment that fits in it. A service's is a
# few KiB; one variable may be at most 128 KiB (MAX_ARG_STRLEN).
ROOM_ENV = "TETHER_FORKSERVER_ROOM"
ROOM_BYTES = 64 * 1024
MESSAGE_BYTES = 1 << 20
# /proc/PID/stat fields (1-based) where the argument and environment blocks lie.
_ARG_START, _ENV_END = 48, 51


EX_DATAERR = 65  # the environment handed was not a JSON object of texts


@dataclass(frozen=True)
class Job:
    """What one forked child is to become."""

    module: str
    cwd: str | None
    output: int
    env_fd: int  # the memfd with its environment, read by the child only


def main(argv: Sequence[str]) -> None:
    control = socket.socket(fileno=int(argv[0]))
    preload(argv[1:])
    server = os.getpid()
    job = serve(control)  # returns in a forked child only
    become(job, starter=server)


def preload(modules: Sequence[str]) -> None:
    """Import each service as `python -m` would, short of running it. One that fails is
    left for its child to import again, where the error reaches the service's log."""
    for module in modules:
        try:
            importlib.import_module(f"{module}.__main__")
        except Exception as exc:  # reported again where the service starts
            _say(f"{module} not preloaded: {exc!r}")
        # What it imports stays; the module itself is run afresh in the child, as `-m`
        # runs it (runpy warns of a `__main__` already imported).
        sys.modules.pop(f"{module}.__main__", None)
    gc.collect()
    gc.freeze()


def serve(control: socket.socket) -> Job:
    """Fork a child for each request and report each one's end, until the starter goes.
    Returns in a child only, with nothing of the server left open."""
    wake_r, wake_w = os.pipe()
    for fd in (wake_r, wake_w):
        os.set_blocking(fd, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    children: dict[int, socket.socket] = {}
    with selectors.DefaultSelector() as selector:
        selector.register(control, selectors.EVENT_READ)
        selector.register(wake_r, selectors.EVENT_READ)
        while True:
            for key, _ in selector.select():
                if key.fileobj is not control:
                    with contextlib.suppress(BlockingIOError):
                        os.read(wake_r, 4096)
                    reap(children)
                    continue
                message, fds, _, _ = socket.recv_fds(control, MESSAGE_BYTES, 4)  # 4: too many
                if not message:
                    raise SystemExit(0)  # the starter is gone; lifeline ends the children
                job = fork_child(message, fds, children)
                if job is not None:
                    signal.set_wakeup_fd(-1)
                    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                    for sock in (control, *children.values()):
                        sock.close()
                    os.close(wake_r)
                    os.close(wake_w)
                    return job


def fork_child(message: bytes, fds: list[int], children: dict[int, socket.socket]) -> Job | None:
    """Fork for one request: the child's Job in the child, None in the server."""
    if len(fds) != 3:
        _close(fds)
        _say(f"refused a request with {len(fds)} descriptors, not 3")
        return None
    output, channel, env_fd = fds[0], socket.socket(fileno=fds[1]), fds[2]
    try:
        job = _job(json.loads(message), output, env_fd)
    except (ValueError, TypeError, KeyError) as exc:
        _say(f"refused a request: {exc!r}")
        with contextlib.suppress(OSError):
            channel.send(f"error {exc!r}".encode())
        channel.close()
        _close((output, env_fd))
        return None
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        channel.close()
        return job
    _close((output, env_fd))
    pidfd = os.pidfd_open(pid)
    try:
        socket.send_fds(channel, [f"pid {pid}".encode()], [pidfd])
    except OSError:
        pass  # the starter gave up waiting; the child's end is still reaped and reported
    finally:
        os.close(pidfd)
    children[pid] = channel
    return None


def _job(request: object, output: int, env_fd: int) -> Job:
    if not isinstance(request, dict):
        raise TypeError("a request is a JSON object")
    module, cwd = request["module"], request.get("cwd")
    if not isinstance(module, str) or not module:
        raise TypeError("module must be a name")
    if cwd is not None and not isinstance(cwd, str):
        raise TypeError("cwd must be a path")
    return Job(module, cwd, output, env_fd)


def _environment(fd: int) -> dict[str, str]:
    """The child's environment from its memfd (closed here); exits on one that is not a
    JSON object of texts."""
    with os.fdopen(fd, "rb") as handed:
        raw = handed.read()
    try:
        env = json.loads(raw)
    except ValueError:
        env = None
    if not isinstance(env, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in env.items()
    ):
        sys.stderr.write("forkserver: the environment handed is not a JSON object of texts\n")
        raise SystemExit(EX_DATAERR)
    return env


def reap(children: dict[int, socket.socket]) -> None:
    """Collect every child that ended and tell its starter how."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        channel = children.pop(pid, None)
        if channel is not None:
            with contextlib.suppress(OSError):
                channel.send(f"exit {os.waitstatus_to_exitcode(status)}".encode())
            channel.close()


def become(job: Job, *, starter: int) -> None:
    """Turn this forked child into `python -m job.module`; returns when the module does,
    and the interpreter then ends as that command's would (atexit handlers, flushes)."""
    os.setsid()
    lifeline.arm(starter)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(job.output, 1)
    os.dup2(job.output, 2)
    env = _environment(job.env_fd)
    os.closerange(3, os.sysconf("SC_OPEN_MAX"))
    os.environ.clear()
    os.environ.update(env)
    sys.path[0:0] = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    _show(env, f"{sys.executable} -m {job.module}")
    if job.cwd is not None:
        os.chdir(job.cwd)
    del sys.argv[1:]
    runpy.run_module(job.module, run_name="__main__", alter_sys=True)


def _show(env: Mapping[str, str], title: str) -> None:
    """Rewrite, in place, what /proc/self/environ and /proc/self/cmdline read: the blocks
    this process inherited from the fork server (setproctitle's technique). The command
    line ends in a byte other than NUL, so the kernel reads it as one title up to its
    first NUL; an environment too large for the block shows none at all, rather than the
    fork server's."""
    fields = Path("/proc/self/stat").read_text()
    arg_start, arg_end, env_start, env_end = (
        int(f) for f in fields[fields.rindex(")") + 2 :].split()[_ARG_START - 3 : _ENV_END - 2]
    )
    shown = b"".join(f"{k}={v}".encode() + b"\0" for k, v in env.items())
    _overwrite(env_start, env_end - env_start, shown if len(shown) <= env_end - env_start else b"")
    room = arg_end - arg_start
    line = title.encode()[: room - 2] + b"\0"
    _overwrite(arg_start, room, line + b"\0" * (room - len(line) - 1) + b" ")


def _overwrite(address: int, size: int, data: bytes) -> None:
    ctypes.memmove(address, data.ljust(size, b"\0"), size)


def _say(line: str) -> None:
    # Not `logging`: a handler set up here would be every child's too, before its own.
    sys.stderr.write(f"forkserver: {line}\n")
    sys.stderr.flush()


def _close(fds: Sequence[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


if __name__ == "__main__":
    main(sys.argv[1:])
