"""Where the CLI finds the system: each address from its environment variable, else from
the state `tether up` keeps in `TETHER_HOME/up.json` (it may have moved a service to a
free port), else the usual local port.

`up.json` holds addresses and process ids only, never a secret; `tether up` writes it
(0600, in the private TETHER_HOME) once everything is ready and removes it on the way out.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tether_client.server.secretfiles import write_secret
from tether_common.home import tether_home

__all__ = ["UpState", "api_url", "approvals_url", "outputs_url", "read_state", "state_path"]

STATE_FILE = "up.json"
DEFAULT_URLS = {
    "brain": "http://127.0.0.1:8700",
    "approvals": "http://127.0.0.1:8701",
    "output-store": "http://127.0.0.1:8702",
    "gateway": "http://127.0.0.1:8703",
    "tools-runner": "http://127.0.0.1:8704",
}
URL_ENV = {
    "brain": "TETHER_API_URL",
    "approvals": "TETHER_APPROVALS_URL",
    "output-store": "TETHER_OUTPUTS_URL",
    "gateway": "TETHER_GATEWAY_URL",
    "tools-runner": "TETHER_RUNNER_URL",
}


@dataclass
class UpState:
    """What a running `tether up` tells other commands."""

    pid: int
    services: dict[str, dict[str, Any]] = field(default_factory=dict)  # name: url, pid
    nats_url: str | None = None
    nats_monitor_url: str | None = None
    database: str | None = None  # host:port only
    token_file: str | None = None
    provider: str | None = None
    local_model_url: str | None = None
    version: str | None = None

    @property
    def alive(self) -> bool:
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True


def state_path() -> Path:
    return tether_home() / STATE_FILE


def read_state() -> UpState | None:
    """The running `tether up`'s state, or None (none written, unreadable, or its process
    is gone: a stale file is ignored)."""
    try:
        raw = json.loads(state_path().read_text())
        state = UpState(**raw)
    except (OSError, ValueError, TypeError):
        return None
    return state if state.alive else None


def write_state(state: UpState) -> Path:
    return write_secret(state_path(), json.dumps(vars(state), indent=2))


def service_url(name: str) -> str:
    if url := os.environ.get(URL_ENV[name], "").strip():
        return url
    state = read_state()
    if state is not None and (found := state.services.get(name, {}).get("url")):
        return str(found)
    return DEFAULT_URLS[name]


def api_url() -> str:
    return service_url("brain")


def approvals_url() -> str:
    return service_url("approvals")


def outputs_url() -> str:
    return service_url("output-store")
