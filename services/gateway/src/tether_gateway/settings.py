"""Gateway settings (`TETHER_GATEWAY_*`): provider endpoints and keys, timeouts, retries,
prices, and where model profiles live (`profiles_dir`; the settings below only seed the
default profile of a model that has no profile file).

API keys are `SecretStr`: they print as `**********` and adapters redact them from every
error message, so a key never reaches a log line, an event or the bus.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import NoDecode, SettingsConfigDict

from tether_common.messages.profiles import ModelPrice
from tether_common.settings import HttpSettings
from tether_common.topology import LOCAL_MODEL_PORT, LOOPBACK, port_of

OPENAI_DEFAULT_BASE_URL = "https://api.openai.com/v1"

ModelNames = Annotated[frozenset[str], NoDecode]


class GatewaySettings(HttpSettings):
    # An empty variable is an unset one: compose passes every provider key as
    # `${VAR:-}`, and a key set to "" must read as "not configured", not as a key.
    model_config = SettingsConfigDict(
        env_prefix="TETHER_GATEWAY_",
        env_nested_delimiter="__",
        extra="ignore",
        env_ignore_empty=True,
    )

    http_port: int = port_of("gateway")
    scripts_dir: Path | None = None

    # Shared by every HTTP provider.
    connect_timeout_s: float = Field(default=10.0, gt=0)
    inactivity_timeout_s: float = Field(
        default=300.0, gt=0, description="longest silence allowed while waiting for the stream"
    )
    retry_attempts: int = Field(
        default=3, ge=0, le=10, description="retries of 429 / 5xx / connect errors"
    )
    retry_base_delay_s: float = Field(default=0.5, ge=0)
    retry_max_delay_s: float = Field(
        default=30.0, ge=0, description="longest back-off, and longest Retry-After honoured"
    )
    history_cache_mib: float = Field(
        default=64.0,
        ge=0,
        description="histories kept for model requests sent as deltas, per replica "
        "(estimated MiB; the least recently used go first; 0: none kept)",
    )
    profiles_dir: Path | None = Field(
        default=None, description="model profile YAML files; default $TETHER_HOME/models"
    )
    prices: dict[str, ModelPrice] = Field(
        default_factory=dict,
        description='default profiles\' prices, JSON: {"model": {"input_per_million": …, …}}',
    )
    text_protocol_models: ModelNames = Field(
        default=frozenset(),
        description="models whose default profile uses the fenced tool format (comma list); "
        "a profile file or `tether models probe` supersedes it",
    )

    openai_base_url: str = OPENAI_DEFAULT_BASE_URL
    openai_api_key: SecretStr | None = None
    openai_model: str | None = None
    openai_reasoning_models: ModelNames = Field(
        default=frozenset(), description="models that accept `reasoning_effort` (comma list)"
    )

    anthropic_base_url: str = "https://api.anthropic.com"
    anthropic_api_key: SecretStr | None = None
    anthropic_model: str | None = None
    anthropic_version: str = "2023-06-01"
    anthropic_max_tokens: int = Field(default=4096, ge=1)

    ollama_url: str = "http://127.0.0.1:11434"
    ollama_model: str | None = None

    # `local`: llama.cpp's OpenAI-compatible server that `tether up` starts on a GGUF.
    local_base_url: str = f"http://{LOOPBACK}:{LOCAL_MODEL_PORT}/v1"
    local_model: str = Field(
        default="smollm2-135m-instruct", description="the alias the local server answers to"
    )
    local_text_protocol: bool = Field(
        default=True,
        description="the local default profile teaches the fenced tool format (small models "
        "lack native tools)",
    )
    local_grammar: bool = Field(
        default=True,
        description="the local default profile constrains replies with a JSON-schema grammar",
    )
    local_context_window: int = Field(
        default=8192, ge=512, description="the local default profile's window (the server's n_ctx)"
    )
    local_temperature: float | None = Field(
        default=0.0,
        ge=0,
        le=2,
        description="the local default profile's sampling temperature (greedy: a small model "
        "picks tools and copies values reliably only so; none: the server's default)",
    )
    local_max_output_tokens: int = Field(
        default=512, ge=1, description="output cap when a request names none"
    )

    @field_validator("text_protocol_models", "openai_reasoning_models", mode="before")
    @classmethod
    def _names(cls, value: Any) -> Any:
        """Accept a JSON list or a comma-separated list from the environment."""
        if not isinstance(value, str):
            return value
        if value.lstrip().startswith("["):
            return json.loads(value)
        return [name.strip() for name in value.split(",") if name.strip()]

    def openai_missing(self) -> str | None:
        """What to set before the `openai` adapter can work, or None when it can."""
        custom_url = self.openai_base_url.rstrip("/") != OPENAI_DEFAULT_BASE_URL
        if self.openai_api_key is None and not custom_url:
            return (
                "TETHER_GATEWAY_OPENAI_API_KEY (or TETHER_GATEWAY_OPENAI_BASE_URL "
                "for a local OpenAI-compatible server)"
            )
        return None

    def anthropic_missing(self) -> str | None:
        return "TETHER_GATEWAY_ANTHROPIC_API_KEY" if self.anthropic_api_key is None else None
