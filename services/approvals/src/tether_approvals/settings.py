"""Approvals settings (`TETHER_APPROVALS_*`)."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from tether_common.settings import HttpSettings


class ApprovalSettings(HttpSettings):
    model_config = SettingsConfigDict(env_prefix="TETHER_APPROVALS_", extra="ignore")

    http_port: int = 8701
    default_expiry_s: float = Field(default=180.0, gt=0)
