"""Gateway settings (`TETHER_GATEWAY_*`)."""

from __future__ import annotations

from pathlib import Path

from pydantic_settings import SettingsConfigDict

from tether_common.settings import HttpSettings


class GatewaySettings(HttpSettings):
    model_config = SettingsConfigDict(env_prefix="TETHER_GATEWAY_", extra="ignore")

    http_port: int = 8703
    scripts_dir: Path | None = None
