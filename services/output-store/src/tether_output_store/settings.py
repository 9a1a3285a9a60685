"""Output-store settings (`TETHER_OUTPUTS_*`)."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from tether_common.settings import HttpSettings


class OutputSettings(HttpSettings):
    model_config = SettingsConfigDict(env_prefix="TETHER_OUTPUTS_", extra="ignore")

    http_port: int = 8702
    retention_days: float = Field(default=7.0, gt=0)
    chunk_bytes: int = Field(default=256 * 1024, ge=1024, le=8 * 1024 * 1024)
