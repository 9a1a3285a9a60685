"""Output-store settings (`TETHER_OUTPUTS_*`)."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from tether_common.messages.outputs import MAX_INLINE_BYTES
from tether_common.settings import HttpSettings
from tether_common.topology import port_of
from tether_output_store.store import Backend


class OutputSettings(HttpSettings):
    model_config = SettingsConfigDict(env_prefix="TETHER_OUTPUTS_", extra="ignore")

    http_port: int = port_of("output-store")
    # Where new chunk bytes go. PostgreSQL keeps the index either way (outputs, uploads,
    # one row per chunk), so a commit stays one transaction; chunks written under the
    # other backend stay readable, so switching needs no migration.
    backend: Backend = "postgres"
    jetstream_replicas: int = Field(default=1, ge=1, le=5)
    jetstream_max_bytes: int | None = Field(
        default=None, ge=1024 * 1024, description="Bounds the bucket when it is created."
    )
    orphan_sweep_interval_s: float = Field(
        default=3600.0, gt=0, description="How often objects no chunk row names are sought."
    )
    retention_days: float = Field(default=7.0, gt=0)
    # One stored chunk is one upload message, so it must fit a NATS payload after base64.
    chunk_bytes: int = Field(default=256 * 1024, ge=1024, le=MAX_INLINE_BYTES)
    upload_ttl_s: float = Field(default=3600.0, gt=0, description="An uncommitted upload dies.")
    gc_interval_s: float = Field(default=300.0, gt=0)
    tombstone_days: float = Field(default=30.0, ge=0, description="How long `expired` answers.")
    grep_budget_s: float = Field(
        default=5.0, gt=0, le=60, description="How long a grep or json query may run."
    )
    parse_cap_bytes: int = Field(default=64 * 1024 * 1024, ge=1024)
