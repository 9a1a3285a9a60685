"""Tools-runner settings (`TETHER_RUNNER_*`)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from tether_common.settings import HttpSettings


class RunnerSettings(HttpSettings):
    model_config = SettingsConfigDict(env_prefix="TETHER_RUNNER_", extra="ignore")

    http_port: int = 8704
    workspace: Path = Field(default_factory=lambda: Path.home() / ".tether" / "workspace")
    default_timeout_s: float = Field(default=30.0, gt=0, le=120)
