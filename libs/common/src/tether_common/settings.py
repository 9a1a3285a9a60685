"""Settings shared by every service, read from `TETHER_*` environment variables.

Each service composes this with its own `BaseSettings` (prefix `TETHER_<SERVICE>_`);
settings are read once in the service's `app.py` and passed down, never imported as a
global, so tests build them explicitly.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

# Re-exported: where the home is was said here first, and services still read it here.
from tether_common.home import default_home as default_home
from tether_common.home import tether_home as tether_home
from tether_common.topology import LOOPBACK, NATS_PORT, POSTGRES_PORT

DEFAULT_NATS_URL = f"nats://{LOOPBACK}:{NATS_PORT}"


def default_workspace() -> Path:
    """The folder tools work in unless `TETHER_RUNNER_WORKSPACE` (the runner) and
    `TETHER_BRAIN_WORKSPACE` (the brain's path checks) say otherwise."""
    return default_home() / "workspace"


class CommonSettings(BaseSettings):
    """Where the bus and the database are, how to log, which subject prefix to use."""

    model_config = SettingsConfigDict(env_prefix="TETHER_", extra="ignore")

    nats_url: str = DEFAULT_NATS_URL
    nats_user: str | None = None
    # Copies of each JetStream stream: 1 on a single server; 3 on a 3-node cluster (a
    # node lost then loses no event or decision). Changing it rescales existing streams.
    nats_stream_replicas: int = Field(default=1, ge=1, le=5)
    nats_password: str | None = None
    # TLS on the bus (see deploy/README.md): the server's certificate and key (used where
    # Tether starts the server itself, `tether up`) and the CA that clients trust.
    nats_tls_cert: Path | None = None
    nats_tls_key: Path | None = None
    nats_tls_ca: Path | None = None
    database_url: str = f"postgresql+asyncpg://postgres@{LOOPBACK}:{POSTGRES_PORT}/tether"
    db_pool_size: int = Field(
        default=20,
        ge=1,
        le=200,
        description="connections a service keeps open to PostgreSQL (opened on demand)",
    )
    db_pool_overflow: int = Field(
        default=0,
        ge=0,
        le=200,
        description="connections opened beyond the pool in a burst and closed when given "
        "back: each pays a connect, authentication, type look-ups and statement "
        "preparation again, which cost the brain about as much CPU as its steps at 50 runs "
        "in flight, so by default a burst waits for a kept connection instead",
    )
    subject_prefix: str = Field(default="tether", pattern=r"^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$")
    home: Path = Field(default_factory=default_home)
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    log_format: Literal["json", "text"] = "json"
    trace_console: bool = False
    # Set: the process runs under cProfile and writes `<service>-<pid>.prof` here when it
    # stops (`python -m bench --profile`; tether_common.profiling).
    profile_dir: Path | None = None
    event_loop: Literal["uvloop", "asyncio"] = Field(
        default="uvloop",
        description="the services' event loop: uvloop (libuv) spends less CPU on each "
        "message, socket write and task than the standard library's loop; `asyncio` is the "
        "fallback where uvloop is not installed or misbehaves",
    )
    loop_lag_warn_s: float = Field(
        default=0.25,
        gt=0,
        description="an event-loop stall this long or longer is logged as a warning, with how "
        "the loop's thread spent it (tether_common.looplag)",
    )
    operator_token: str | None = Field(
        default=None, description="Bearer token for the operator HTTP APIs (approvals, outputs)."
    )
    # What `tether up` hands the services instead of the token itself: they accept the
    # bootstrap admin's token by its hash, so no service's environment holds a credential.
    operator_token_sha256: str | None = Field(
        default=None,
        pattern=r"^[0-9a-f]{64}$",
        description="SHA-256 (hex) of the operator token, accepted in place of the token.",
    )
    # Signs approval decisions (approvals service) and verifies them (brain); see
    # tether_common.decisions. Never stored in the database.
    decision_key: SecretStr | None = None

    @field_validator("database_url")
    @classmethod
    def _use_asyncpg(cls, url: str) -> str:
        return async_database_url(url)


def async_database_url(url: str) -> str:
    """Accept plain `postgresql://` URLs and point SQLAlchemy at asyncpg."""
    for plain in ("postgresql://", "postgres://"):
        if url.startswith(plain):
            return "postgresql+asyncpg://" + url[len(plain) :]
    return url


class HttpSettings(BaseSettings):
    """Where a service's HTTP server listens (health, readiness and its API)."""

    model_config = SettingsConfigDict(extra="ignore")

    http_host: str = "127.0.0.1"
    http_port: int = Field(default=0, ge=0, le=65535)
